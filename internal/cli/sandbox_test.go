package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr"
)

// openFiles closes what it opened when a later flag is refused: the
// descriptors of the workspace and the first bind do not outlive the
// refusal of the second (positive control: without the bad bind, both
// are open and returned).
func TestOpenFilesClosesOnRefusal(t *testing.T) {
	dir := t.TempDir()
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	before := count()
	ok := &createFlags{workspace: dir, ro: []string{dir + ":/in"}}
	files, err := ok.openFiles(&hostmgr.Spec{})
	if err != nil || len(files) != 2 || count() != before+2 {
		t.Fatalf("openFiles = %d files, %v; %d descriptors open, want 2 more than %d", len(files), err, count(), before)
	}
	for _, f := range files {
		f.Close()
	}
	bad := &createFlags{workspace: dir, ro: []string{dir + ":/in", dir + "/missing:/x"}}
	if _, err := bad.openFiles(&hostmgr.Spec{}); err == nil {
		t.Fatal("openFiles of a missing bind succeeded")
	}
	if n := count(); n != before {
		t.Errorf("after the refusal %d descriptors are open, want %d (the ones opened before it leaked)", n, before)
	}
}

// age is the largest whole unit; the zero time (a record without its
// created time) is "-", not 2026 years.
func TestAge(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"}, {-time.Minute, "0s"}, {59 * time.Second, "59s"}, {time.Minute, "1m"}, {59*time.Minute + 59*time.Second, "59m"},
		{time.Hour, "1h"}, {47 * time.Hour, "47h"}, {48 * time.Hour, "2d"}, {400 * 24 * time.Hour, "400d"},
	} {
		if got := age(now.Add(-c.ago), now); got != c.want {
			t.Errorf("age(%v ago) = %q, want %q", c.ago, got, c.want)
		}
	}
	if got := age(time.Time{}, now); got != "-" {
		t.Errorf("age(zero) = %q, want -", got)
	}
}

// The table has an AGE column from each sandbox's created time.
func TestPrintInfoAge(t *testing.T) {
	var out bytes.Buffer
	g := &globals{stdout: &out, stderr: &out}
	printInfo(g, []hostmgr.Info{{Name: "old", ID: "sb1", State: "running", Created: time.Now().Add(-3 * time.Hour)}, {Name: "unknown", ID: "sb2", State: "created"}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || strings.Fields(lines[0])[4] != "AGE" {
		t.Fatalf("table:\n%s", out.String())
	}
	if f := strings.Fields(lines[1]); len(f) < 5 || f[0] != "old" || f[4] != "3h" {
		t.Errorf("row %q, want old ... 3h", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 5 || f[0] != "unknown" || f[4] != "-" {
		t.Errorf("row %q, want unknown ... -", lines[2])
	}
}

// TestGatewaySpecSpecialFiles checks that sandbox create --config reads
// its file as run --config and config check do: a FIFO nobody writes is
// an empty configuration at once (it used to block in open forever), a
// device is refused before it is read (/dev/zero was read without end).
// Control: a regular file is read.
func TestGatewaySpecSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{{fifo, "empty configuration"}, {"/dev/zero", "not a regular file"}} {
		done := make(chan error, 1)
		go func() { _, err := gatewaySpec(c.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("gatewaySpec(%s) err = %v, want %q", c.path, err, c.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("gatewaySpec(%s) still reading after 20s", c.path)
		}
	}
	if gs, err := gatewaySpec("../../examples/minimal.yaml"); err != nil || len(gs.Config) == 0 {
		t.Errorf("control: gatewaySpec(minimal.yaml) = %v, %v", gs, err)
	}
}
