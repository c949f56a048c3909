package conformance

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A held run whose program leaves a process holding cordon's stderr
// (a provider that does not end what the program started) must not hang
// the runner once cordon itself has ended: Finish returns.
func TestHeldFinishDoesNotWaitOnAnOrphanedStderr(t *testing.T) {
	d := t.TempDir()
	pidFile := filepath.Join(d, "orphan.pid")
	bin := filepath.Join(d, "cordon")
	script := "#!/bin/sh\n" +
		"sleep 300 </dev/null >/dev/null &\n" +
		"echo $! > " + pidFile + "\n" +
		"echo '{\"op\":\"hold\",\"ok\":true}'\n" +
		"exit 0\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Env{Bin: bin, Dir: d}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := e.Start(ctx, RunOpts{StateDir: d, Op: []string{"hold", "ids"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Finish(ctx); err != nil {
		t.Errorf("Finish: %v (cordon had ended; an orphan held its stderr)", err)
	}
}
