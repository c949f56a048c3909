package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// factGot returns what the trusted side read for fact name of boundary b.
func factGot(t *testing.T, rec evidenceRecord, b, name string) string {
	t.Helper()
	for _, f := range rec.facts(t, b) {
		if f.Name == name {
			return f.Got
		}
	}
	t.Fatalf("evidence boundary %s has no fact %q", b, name)
	return ""
}

// TestResourceMemory: past --memory the kernel's OOM killer ends the
// program inside the sandbox's cgroup; cordon survives to say so (exit
// 137, oom in --json and the evidence) and removes the cgroup. Under the
// limit the same allocation succeeds.
func TestResourceMemory(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	tests := []struct {
		name       string
		memory     string
		limitBytes int64
		allocMB    int
		wantCode   int
		wantOOM    bool
	}{
		{"under the limit", "64M", 64 << 20, 8, 0, false},
		{"over the limit", "32M", 32 << 20, 128, 137, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := filepath.Join(t.TempDir(), "ev.json")
			r := runCordon(t, st, runOpts{}, probeArgs([]string{"--json", "--memory", tt.memory, "--evidence", ev}, "alloc", strconv.Itoa(tt.allocMB))...)
			if r.Code != tt.wantCode || r.Outcome.OOM != tt.wantOOM || r.Outcome.ExitCode != tt.wantCode {
				t.Errorf("alloc %d MiB under --memory %s = %d, outcome %+v; want %d, oom=%v\nstderr: %s",
					tt.allocMB, tt.memory, r.Code, r.Outcome, tt.wantCode, tt.wantOOM, r.Stderr)
			}
			// cordon wrote its outcome: the OOM kill stayed inside the sandbox.
			if r.Outcome.SandboxID == "" {
				t.Fatalf("alloc %d MiB under --memory %s: no --json outcome; cordon itself did not finish\nstderr: %s", tt.allocMB, tt.memory, r.Stderr)
			}
			if tt.wantOOM && (r.Outcome.Signal != 9 || !strings.Contains(r.Stderr, "out-of-memory")) {
				t.Errorf("alloc over the limit: signal %d, stderr %q; want 9 and a message naming the out-of-memory killer", r.Outcome.Signal, r.Stderr)
			}
			if !tt.wantOOM && (!r.Probe.OK || r.Probe.Data != fmt.Sprintf("touched %d MiB", tt.allocMB)) {
				t.Errorf("alloc under the limit: probe %+v, want it to touch %d MiB", r.Probe, tt.allocMB)
			}
			rec := readEvidenceFile(t, ev)
			if got := factGot(t, rec, "resource", "memory_limit"); got != strconv.FormatInt(tt.limitBytes, 10) {
				t.Errorf("evidence memory_limit read back %q, want %d", got, tt.limitBytes)
			}
			if rec.Outcome == nil || rec.Outcome.OOM != tt.wantOOM {
				t.Errorf("evidence outcome %+v, want oom=%v", rec.Outcome, tt.wantOOM)
			}
			if d := cgroupDirsOf(r.Outcome.SandboxID); len(d) != 0 {
				t.Errorf("after the run: cgroup dirs %v remain, want removed", d)
			}
		})
	}
	// The host and cordon are fine: the next sandbox runs normally.
	if r := runCordon(t, st, runOpts{}, "run", "--", "/bin/true"); r.Code != 0 {
		t.Errorf("cordon run /bin/true after the OOM = %d, want 0\nstderr: %s", r.Code, r.Stderr)
	}
	requireNoResidue(t, st)
}

// TestResourcePids: a fork bomb stops at --pids with EAGAIN, cordon ends
// normally, and every child is gone afterwards (namespace teardown and
// cgroup removal, seen from the host). Without the limit the same probe
// gets every child it asks for. Sequential: it scans the leased range.
func TestResourcePids(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	tests := []struct {
		name      string
		flags     []string
		ask       int
		wantLimit bool
	}{
		{"limited", []string{"--pids", "32"}, 100, true},
		{"unlimited control", nil, 40, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := filepath.Join(t.TempDir(), "ev.json")
			r := runCordon(t, st, runOpts{}, probeArgs(append([]string{"--json", "--evidence", ev}, tt.flags...), "forkbomb", strconv.Itoa(tt.ask))...)
			if r.Code != 0 || r.Outcome.SandboxID == "" {
				t.Fatalf("forkbomb %d %v = %d, want 0 with an outcome\nstdout: %s\nstderr: %s", tt.ask, tt.flags, r.Code, r.Stdout, r.Stderr)
			}
			var got int
			if _, err := fmt.Sscanf(r.Probe.Data, "children=%d", &got); err != nil {
				t.Fatalf("forkbomb %d %v: probe %+v: no child count", tt.ask, tt.flags, r.Probe)
			}
			switch {
			case tt.wantLimit && (got <= 0 || got >= 32 || r.Probe.Errno != "EAGAIN"):
				t.Errorf("forkbomb %d under --pids 32 = %d children, errno %q; want 0 < n < 32 and EAGAIN", tt.ask, got, r.Probe.Errno)
			case !tt.wantLimit && (got != tt.ask || !r.Probe.OK):
				t.Errorf("forkbomb %d without --pids = %d children, errno %q; want %d, no error", tt.ask, got, r.Probe.Errno, tt.ask)
			}
			rec := readEvidenceFile(t, ev)
			if d := cgroupDirsOf(r.Outcome.SandboxID); len(d) != 0 {
				t.Errorf("after the fork bomb: cgroup dirs %v remain, want removed", d)
			}
			if left := procsWithUIDIn(r.Outcome.SandboxID, rec.Lease.UID, rec.Lease.UID+rec.Lease.Size); len(left) != 0 {
				t.Errorf("after the fork bomb: processes in the leased range remain: %v", left)
			}
		})
	}
	requireNoResidue(t, st)
}
