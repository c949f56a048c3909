package cgroup

// Tests against the host's real cgroups. They need root and the memory, pids
// and cpu controllers; they skip with the reason otherwise, except under
// CI=true, where CI runs as root and a skip would hide a regression.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestMain(m *testing.M) {
	testkit.Dispatch(map[string]func() int{"alloc": allocHelper})
	os.Exit(m.Run())
}

// allocHelper waits for a byte on stdin (sent once it is in its group), then
// touches 64MiB, one byte a page.
func allocHelper() int {
	io.ReadFull(os.Stdin, make([]byte, 1))
	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("survived", len(b))
	return 0
}

// requireRealCgroups skips unless the test can create real cgroups; under
// CI=true it fails instead.
func requireRealCgroups(t testing.TB) Layout {
	t.Helper()
	testkit.RequireRoot(t)
	l, err := Detect()
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if m := l.Missing(); len(m) > 0 {
		testkit.Unavailable(t, "host lacks cgroup controllers %v", m)
	}
	return l
}

var testSeq atomic.Int64

// testGroupPrefix marks groups made by this test process; other packages'
// tests may hold cordon groups of their own at the same time.
func testGroupPrefix() string { return fmt.Sprintf("cgtest-%d-", os.Getpid()) }

// newRealGroup creates a group that is removed when the test ends, pass or fail.
func newRealGroup(t testing.TB, l Layout, lim Limits) *Group {
	t.Helper()
	name := fmt.Sprintf("%s%d", testGroupPrefix(), testSeq.Add(1))
	t.Cleanup(func() {
		if err := Open(l, name).Remove(); err != nil {
			t.Errorf("cleanup of cgroup %s: %v", name, err)
		}
	})
	g, err := Create(l, name, lim)
	if err != nil {
		t.Fatalf("Create(%s, %+v): %v", name, lim, err)
	}
	return g
}

func ourResidue(t *testing.T, l Layout) []string {
	t.Helper()
	all, err := Residue(l)
	if err != nil {
		t.Fatalf("Residue: %v", err)
	}
	var ours []string
	for _, n := range all {
		if strings.HasPrefix(n, testGroupPrefix()) {
			ours = append(ours, n)
		}
	}
	return ours
}

func wantSIGKILL(t *testing.T, cmd *exec.Cmd, err error) {
	t.Helper()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("%v: wait = %v (status %v), want killed by SIGKILL", cmd.Args, err, cmd.ProcessState)
	}
}

func TestRealLifecycle(t *testing.T) {
	l := requireRealCgroups(t)
	lim := Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 0.5}
	g := newRealGroup(t, l, lim)
	if diff := cmp.Diff(PlannedDirs(l, g.Name()), g.Dirs()); diff != "" {
		t.Errorf("Dirs() differs from PlannedDirs (-planned +created):\n%s", diff)
	}

	facts, err := g.ReadBack()
	if err != nil {
		t.Fatalf("ReadBack: %v", err)
	}
	want := Facts{
		MemoryBytes: lim.MemoryBytes, MemswBytes: lim.MemoryBytes, Pids: lim.Pids,
		TCPMemBytes: lim.MemoryBytes, // v1 memory.kmem.tcp.limit_in_bytes, or v2 memory.max
		CPUQuotaUs:  50000, CPUPeriodUs: 100000,
		Versions: map[Controller]int{Memory: l.Mounts[Memory].Version, Pids: l.Mounts[Pids].Version, CPU: l.Mounts[CPU].Version},
		Dirs:     g.Dirs(),
	}
	if g.NoSwapAccounting() {
		t.Logf("host does not account swap: memory+swap is not capped by the group")
		want.MemswBytes, want.NoSwapAccounting = 0, true
	}
	if diff := cmp.Diff(want, facts, cmpopts.IgnoreFields(Facts{}, "Files")); diff != "" {
		t.Errorf("ReadBack() mismatch (-want +got):\n%s", diff)
	}
	t.Logf("facts: %+v", facts)

	cmd := exec.Command("sleep", "30")
	if l.Unified != "" {
		fd, err := g.UnifiedFD()
		if err != nil {
			t.Fatalf("UnifiedFD: %v", err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	pid := cmd.Process.Pid
	if err := g.AddProc(pid); err != nil {
		t.Fatalf("AddProc(%d): %v", pid, err)
	}
	if err := g.AddProc(pid); err != nil {
		t.Fatalf("AddProc(%d) again: %v", pid, err)
	}

	cg, err := ProcCgroups(pid)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := "/" + Prefix + "/" + g.Name()
	keys := []string{}
	for c, m := range l.Mounts {
		if m.Version == 1 {
			keys = append(keys, string(c))
		}
	}
	if l.Unified != "" {
		keys = append(keys, "")
	}
	for _, k := range keys {
		if cg[k] != wantPath {
			t.Errorf("/proc/%d/cgroup[%q] = %q, want %q", pid, k, cg[k], wantPath)
		}
	}

	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	wantSIGKILL(t, cmd, cmd.Wait())

	if err := g.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for _, d := range g.Dirs() {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Remove, Lstat(%s) = %v, want not exist", d, err)
		}
	}
	if err := g.Remove(); err != nil {
		t.Errorf("second Remove() = %v, want nil", err)
	}
	if res := ourResidue(t, l); len(res) != 0 {
		t.Errorf("Residue() after Remove has our groups %v", res)
	}
}

// Kill takes a whole process tree: through cgroup.kill when the host has a
// v2 mount, and by the SIGKILL sweep when it has none (Unified cleared).
func TestRealKillTree(t *testing.T) {
	full := requireRealCgroups(t)
	v1only := Layout{Mounts: map[Controller]Mount{}}
	for c, m := range full.Mounts {
		if m.Version == 1 {
			v1only.Mounts[c] = m
		}
	}
	for _, tc := range []struct {
		name string
		l    Layout
	}{{"cgroup.kill", full}, {"sweep", v1only}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "cgroup.kill" && tc.l.Unified == "" {
				testkit.Unavailable(t, "host has no cgroup v2 mount (cgroup.kill)")
			}
			if len(tc.l.Mounts) == 0 && tc.l.Unified == "" {
				t.Skip("host has no v1 hierarchies")
			}
			g := newRealGroup(t, tc.l, Limits{Pids: 16})
			cmd := exec.Command("sh", "-c", "read x; sleep 30 & sleep 30 & wait")
			stdin, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			if err := g.AddProc(cmd.Process.Pid); err != nil {
				t.Fatalf("AddProc: %v", err)
			}
			stdin.Write([]byte("\n"))
			var pids []int
			for deadline := time.Now().Add(5 * time.Second); len(pids) < 3 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
				pids, _ = g.members()
			}
			if len(pids) != 3 {
				t.Fatalf("group members = %v, want sh and two sleeps", pids)
			}
			if err := g.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			if left, _ := g.members(); len(left) != 0 {
				t.Errorf("members after Kill = %v, want none", left)
			}
			wantSIGKILL(t, cmd, cmd.Wait())
			for _, p := range pids {
				if p != cmd.Process.Pid && alive(p) {
					t.Errorf("pid %d alive after Kill", p)
				}
			}
		})
	}
}

// A child that touches 64MiB in a 16MiB group is OOM-killed, the kill is
// counted, and memory+swap is capped at the memory limit so it cannot escape
// into swap (this host has no swap at all, so the cap is shown by reading it
// back, not by swapping).
func TestRealOOM(t *testing.T) {
	l := requireRealCgroups(t)
	g := newRealGroup(t, l, Limits{MemoryBytes: 16 << 20})
	facts, err := g.ReadBack()
	if err != nil {
		t.Fatal(err)
	}
	if facts.NoSwapAccounting {
		t.Logf("host does not account swap; memsw cap not checked")
	} else if facts.MemswBytes != 16<<20 {
		t.Errorf("memory+swap limit = %d, want %d", facts.MemswBytes, 16<<20)
	}

	cmd := testkit.Child(t, "alloc")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	stdin.Write([]byte{1})
	wantSIGKILL(t, cmd, cmd.Wait())
	if strings.Contains(out.String(), "survived") {
		t.Errorf("helper survived a 16MiB limit: %q", out.String())
	}
	n, err := g.OOMKills()
	if err != nil || n < 1 {
		t.Errorf("OOMKills() = %d, %v, want ≥ 1", n, err)
	}
}

// Open finds and removes residue: groups left by a cordon that died.
func TestRealResidueReclaim(t *testing.T) {
	l := requireRealCgroups(t)
	g := newRealGroup(t, l, Limits{Pids: 16})
	if res := ourResidue(t, l); !slices.Contains(res, g.Name()) {
		t.Fatalf("Residue() = %v, want it to list %s", res, g.Name())
	}
	if err := Open(l, g.Name()).Remove(); err != nil {
		t.Fatalf("Open(%s).Remove(): %v", g.Name(), err)
	}
	for _, d := range g.Dirs() {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Remove, Lstat(%s) = %v", d, err)
		}
	}
	// The shared parents stay.
	for _, d := range g.Dirs() {
		if _, err := os.Stat(filepath.Dir(d)); err != nil {
			t.Errorf("parent %s: %v", filepath.Dir(d), err)
		}
	}
}

func BenchmarkCreateRemove(b *testing.B) {
	testkit.RequireRoot(b)
	l, err := Detect()
	if err != nil {
		b.Fatal(err)
	}
	lim := Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 0.5}
	var inCreate, inRemove time.Duration
	n := 0
	for ; b.Loop(); n++ {
		name := fmt.Sprintf("cgbench-%d-%d", os.Getpid(), n)
		t0 := time.Now()
		g, err := Create(l, name, lim)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}
		inCreate, inRemove = inCreate+t1.Sub(t0), inRemove+time.Since(t1)
	}
	b.ReportMetric(float64(inCreate.Nanoseconds())/float64(n), "create-ns/op")
	b.ReportMetric(float64(inRemove.Nanoseconds())/float64(n), "remove-ns/op")
	b.ReportMetric(float64(len(PlannedDirs(l, "x"))), "dirs")
}

// alive reports whether pid exists and is not a zombie (orphans killed with
// their parent wait for init to reap them).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
