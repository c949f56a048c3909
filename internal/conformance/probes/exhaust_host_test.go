package probes

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// descendants sees a grandchild, and stillRunning drops it once it ended.
func TestDescendantsAndStillRunning(t *testing.T) {
	sh := exec.Command("/bin/sh", "-c", "/bin/sleep 30 & wait")
	if err := sh.Start(); err != nil {
		t.Skip("no /bin/sh:", err)
	}
	defer func() { _ = sh.Process.Kill(); _ = sh.Wait() }()
	var sleep procStamp
	for deadline := time.Now().Add(5 * time.Second); sleep.Pid == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		for _, d := range descendants(sh.Process.Pid) {
			sleep = d
		}
	}
	ds := descendants(os.Getpid())
	if sleep.Pid == 0 || !slices.Contains(stillRunning(ds), sleep.Pid) {
		t.Fatalf("descendants of the test %v, of sh %d: no running sleep", ds, sh.Process.Pid)
	}
	if err := syscall.Kill(sleep.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); slices.Contains(stillRunning(ds), sleep.Pid); {
		if time.Now().After(deadline) {
			t.Fatalf("sleep %d still counted as running after SIGKILL", sleep.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The inotify watch counts a host open of the file and nothing for a stat.
func TestOpenWatchCountsOpens(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := watchOpens(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	if n := w.opens(); n != 0 {
		t.Fatalf("a stat counted as %d opens", n)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	if n := w.opens(); n != 1 {
		t.Fatalf("one read counted as %d opens, want 1", n)
	}
}

// windowOf and untilWindow agree: after untilWindow the clock is just
// inside a window that starts at or after the given time.
func TestUntilWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps up to one budget window")
	}
	before := time.Now()
	if err := untilWindow(t.Context(), before); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if windowOf(now) <= windowOf(before) && before.UnixNano()%int64(budgetWindow) != 0 {
		t.Fatalf("still in the window of %v at %v", before, now)
	}
	if into := now.UnixNano() % int64(budgetWindow); into > int64(time.Second) {
		t.Fatalf("%v into the window, want about 100ms", time.Duration(into))
	}
}
