package probes

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
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

// The "outside" directories a sandbox must fail to write into are
// writable by every uid (so that only the layer under test denies the
// sandbox) and sticky: another local user cannot remove what an escaping
// sandbox wrote there before the host looks, which would make the
// "absent" fact pass on a broken boundary.
func TestOutsideDirKeepsOthersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (files of other uids) and CI is set")
		}
		t.Skip("needs root")
	}
	e := &conformance.Env{Dir: t.TempDir()}
	for _, p := range []string{filepath.Dir(e.Dir), e.Dir} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	d, err := outsideDir(e, "outside")
	if err != nil {
		t.Fatal(err)
	}
	escaped := filepath.Join(d, "escaped")
	if err := os.WriteFile(escaped, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(escaped, 4243, 4243); err != nil {
		t.Fatal(err)
	}
	rm := func(uid uint32, p string) error {
		cmd := exec.Command("/bin/rm", "-f", p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd.Run()
	}
	_ = rm(4242, escaped)
	if _, err := os.Lstat(escaped); err != nil {
		t.Errorf("another local user removed the sandbox's file from %s: %v", d, err)
	}
	// Control: the directory is writable by any uid (the sandbox's).
	own := filepath.Join(d, "own")
	cmd := exec.Command("/bin/touch", own)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	if err := cmd.Run(); err != nil {
		t.Errorf("control: uid 4242 cannot create a file in %s: %v", d, err)
	}
}
