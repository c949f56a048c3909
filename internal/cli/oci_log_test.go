package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit"
)

// TestOCILogWritesOnlyItsOwnFile: --log is opened as root to append the
// engine's error lines. Found in review: a FIFO at that path (fs.
// protected_fifos is 0 on this kind of machine) blocked the runtime
// forever, and a second name of another file (a hard link) had the line
// appended to that file. Now only a regular file with one name is
// written. The control: a fresh path gets the line.
func TestOCILogWritesOnlyItsOwnFile(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	var out bytes.Buffer
	o := &ociFlags{g: &globals{stdout: &out, stderr: &out}}
	errTest := errors.New("test refusal")

	o.logPath = filepath.Join(dir, "log.json")
	_ = o.fail(errTest)
	if b, _ := os.ReadFile(o.logPath); !strings.Contains(string(b), "test refusal") {
		t.Fatalf("control: the log has no line: %q", b)
	}

	other := filepath.Join(dir, "other-file")
	if err := os.WriteFile(other, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.logPath = filepath.Join(dir, "hardlink.json")
	if err := os.Link(other, o.logPath); err != nil {
		t.Fatal(err)
	}
	_ = o.fail(errTest)
	if b, _ := os.ReadFile(other); string(b) != "precious\n" {
		t.Errorf("the line went into another file through a hard link: %q", b)
	}

	o.logPath = filepath.Join(dir, "fifo.json")
	if err := unix.Mkfifo(o.logPath, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = o.fail(errTest); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang bound, not a timing claim
		t.Fatalf("the runtime blocks opening a FIFO at --log")
	}
}
