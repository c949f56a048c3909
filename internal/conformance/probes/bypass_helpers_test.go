package probes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The device check passes the safe set and the sandbox's own pty
// subsidiaries, and names everything else.
func TestUnsafeNodes(t *testing.T) {
	got := unsafeNodes([]string{
		"null c 1:3", "zero c 1:5", "full c 1:7", "random c 1:8", "urandom c 1:9", "tty c 5:0", "pts/ptmx c 5:2", "pts/0 c 136:0",
		"mem c 1:1", "kmsg c 1:11", "sda b 8:0", "loop0 b 7:0", "evil c 136:0", "ptmx b 5:2",
	})
	want := []string{"mem c 1:1", "kmsg c 1:11", "sda b 8:0", "loop0 b 7:0", "evil c 136:0", "ptmx b 5:2"}
	if !slices.Equal(got, want) {
		t.Errorf("unsafeNodes = %q, want %q", got, want)
	}
}

// A file a sandbox could write (its workspace, a writable bind) is read
// by the runner, root, without following a symlink into a host file and
// without blocking on a FIFO; a regular file is read (the control).
func TestReadSandboxFile(t *testing.T) {
	d := t.TempDir()
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("host-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(d, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "plain"), []byte("probe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "fifo"} {
		done := make(chan struct{})
		var got string
		var err error
		go func() { got, err = readSandboxFile(filepath.Join(d, name)); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("readSandboxFile(%s) blocked", name)
		}
		if err == nil || strings.Contains(got, "host-secret") {
			t.Errorf("readSandboxFile(%s) = %q, %v: want an error, no host content", name, got, err)
		}
	}
	if got, err := readSandboxFile(filepath.Join(d, "plain")); err != nil || got != "probe" {
		t.Errorf("control: readSandboxFile(plain) = %q, %v", got, err)
	}
}
