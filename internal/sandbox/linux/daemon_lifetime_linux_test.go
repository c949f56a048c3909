package linux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// Tests of a daemon sandbox's life beyond the process that spawned it:
// attach from a restarted daemon, surviving the spawner's SIGKILL, reclaim
// leaving live daemon records alone, and the identity checks (ids, the
// init's start time) that adoption rests on. The shared helpers
// (requireSandboxes, newStateDir, startDaemonSandbox, run, checkGone) are in
// daemon_linux_test.go.

// Attach from a second provider (a restarted daemon): it refuses a wrong
// start time, a pid outside the sandbox and a lease another holds; then
// execs and deprovisions through the handle, leaving nothing behind.
func TestDaemonAttach(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	pA := newDaemonProvider(t, dir, st)
	sb := startDaemonSandbox(t, pA)
	ctx := context.Background()
	rec, err := st.Get(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	st2, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	pB := newDaemonProvider(t, dir, st2)
	pid, start := sb.InitPid(), sb.InitStartTime()

	if _, err := pB.Attach(ctx, rec, pid, start+1); !errors.Is(err, ErrInitGone) {
		t.Errorf("Attach with a wrong start time = %v, want ErrInitGone", err)
	}
	self, _ := procStartTime(os.Getpid())
	if _, err := pB.Attach(ctx, rec, os.Getpid(), self); !errors.Is(err, ErrInitGone) {
		t.Errorf("Attach of a pid outside the sandbox's cgroups = %v, want ErrInitGone", err)
	}
	if _, err := pB.Attach(ctx, rec, pid, start); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("Attach while the spawner holds the lease = %v, want ErrLeaseHeld", err)
	}
	runRec := rec
	runRec.Kind = store.KindRun
	if _, err := pB.Attach(ctx, runRec, pid, start); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("Attach of a run record = %v, want a usage error", err)
	}

	// The spawner "dies": its locks and control channel go away (the
	// real thing, SIGKILL, is TestDaemonSurvivesSpawnerSIGKILL).
	sb.lock.release()
	sb.handle.release()
	sb.ctl.Close()
	// The lease stays claimed host-wide: the init holds the lock.
	if lk, ok, err := tryLockLease(rec.Lease); ok || err != nil {
		lk.release()
		t.Fatalf("the lease lock was free (%v) with the spawner gone and the init alive", err)
	}

	h, err := pB.Attach(ctx, rec, pid, start)
	if err != nil {
		t.Fatal(err)
	}
	ds := h.(DaemonSandbox)
	if ds.ID() != sb.ID() || ds.InitPid() != pid || ds.InitStartTime() != start || ds.Lease() != sb.Lease() {
		t.Errorf("attached handle %s %d %d %+v", ds.ID(), ds.InitPid(), ds.InitStartTime(), ds.Lease())
	}
	if r := run(t, ds, "", "/bin/echo", "attached"); r.out != "attached\n" {
		t.Errorf("exec through the attached handle = %+v", r)
	}
	if _, err := h.Start(ctx); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("Start of an attached sandbox = %v", err)
	}
	if _, err := pA.Attach(ctx, rec, pid, start); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("a second Attach = %v, want ErrLeaseHeld", err)
	}
	// Adopt: a helper process joins the sandbox's cgroups (and dies with it).
	helper := exec.Command("/bin/sleep", "1000")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := ds.Adopt(helper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := ReleaseRecord(ctx, st2, pB, rec.ID); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("ReleaseRecord under a live handle = %v, want ErrLeaseHeld", err)
	}
	if err := h.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	if lk, ok, err := tryLockLease(rec.Lease); !ok || err != nil {
		t.Errorf("the lease lock after Deprovision: %v, %v", ok, err)
	} else {
		lk.release()
	}
	if err := helper.Wait(); err == nil {
		t.Error("an adopted helper survived Deprovision")
	}
	select {
	case <-sb.done:
	case <-time.After(5 * time.Second):
		t.Error("the init did not exit")
	}
	checkGone(t, pB, st2, sb.ID(), pid)
	if err := h.Deprovision(ctx); err != nil {
		t.Errorf("second Deprovision = %v", err)
	}
}

// TestDaemonSpawnerHelper, re-run by TestDaemonSurvivesSpawnerSIGKILL
// (testkit.HelperTest), is a daemon stand-in that spawns sandboxes into
// the state dir helperEnv names, prints them, and waits to be killed.
const helperEnv = "CORDON_TEST_DAEMON_SPAWNER"

func TestDaemonSpawnerHelper(t *testing.T) {
	testkit.OnlyAsHelper(t)
	dir := os.Getenv(helperEnv)
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	p := newDaemonProvider(t, dir, st)
	for range 2 {
		sb := startDaemonSandbox(t, p)
		fmt.Printf("SPAWNED %s %d %d\n", sb.ID(), sb.InitPid(), sb.InitStartTime())
	}
	fmt.Println("DONE")
	time.Sleep(time.Hour)
}

// A daemon-mode sandbox survives the SIGKILL of the process that spawned
// it (no parent-death signal at spawn, none re-armed after the init's uid
// switch). A later process attaches to it and execs, or, when its init is
// gone, releases its residue from the record.
func TestDaemonSurvivesSpawnerSIGKILL(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	cmd := testkit.HelperTest(t, "TestDaemonSpawnerHelper", helperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	type spawned struct {
		id    string
		pid   int
		start uint64
		pidfd int
	}
	var sbs []spawned
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "DONE" {
			break
		}
		var s spawned
		if _, err := fmt.Sscanf(line, "SPAWNED %s %d %d", &s.id, &s.pid, &s.start); err == nil {
			sbs = append(sbs, s)
		}
	}
	if len(sbs) != 2 {
		t.Fatalf("the helper spawned %d sandboxes", len(sbs))
	}
	for i := range sbs {
		fd, err := unix.PidfdOpen(sbs[i].pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		sbs[i].pidfd = fd
		defer unix.Close(fd)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	time.Sleep(300 * time.Millisecond)
	for _, s := range sbs {
		if state, start, err := procStat(s.pid); err != nil || start != s.start || state == 'Z' {
			t.Fatalf("init %d after its spawner's SIGKILL: state %c start %d, %v", s.pid, state, start, err)
		}
		// No other state dir can lease the range meanwhile: the init
		// still holds the lease lock.
		rec, err := st.Get(context.Background(), s.id)
		if err != nil {
			t.Fatal(err)
		}
		if lk, ok, err := tryLockLease(rec.Lease); ok || err != nil {
			lk.release()
			t.Errorf("sandbox %s: the lease lock is free (%v) while its init lives and no daemon runs", s.id, err)
		}
	}

	p := newDaemonProvider(t, dir, st)
	ctx := context.Background()
	// The first: attach, exec, deprovision.
	rec, err := st.Get(ctx, sbs[0].id)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Attach(ctx, rec, sbs[0].pid, sbs[0].start)
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, h.(DaemonSandbox), "", "/bin/sh", "-c", "echo $(id -u) alive"); r.out != "1000 alive\n" {
		t.Errorf("exec after the spawner died = %+v", r)
	}
	if err := h.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	checkGone(t, p, st, sbs[0].id, sbs[0].pid)
	if lk, ok, err := tryLockLease(rec.Lease); !ok || err != nil {
		t.Errorf("the lease lock after Deprovision: %v, %v", ok, err)
	} else {
		lk.release()
	}

	// The second: its init dies while no daemon runs; Attach refuses and
	// ReleaseRecord clears the residue.
	if err := unix.PidfdSendSignal(sbs[1].pidfd, unix.SIGKILL, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(sbs[1].pidfd), Events: unix.POLLIN}}, 5000); err != nil {
		t.Fatal(err)
	}
	rec, err = st.Get(ctx, sbs[1].id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Attach(ctx, rec, sbs[1].pid, sbs[1].start); !errors.Is(err, ErrInitGone) {
		t.Fatalf("Attach of a dead init = %v, want ErrInitGone", err)
	}
	if err := ReleaseRecord(ctx, st, p, sbs[1].id); err != nil {
		t.Fatal(err)
	}
	checkGone(t, p, st, sbs[1].id, 0)
}

// Standalone `cordon run` and `cordon gc` never reclaim a daemon record,
// even with its owner gone; the provider's Reclaim removes the exec socket
// of a record it does reclaim, and only of that one.
func TestReclaimKeepsDaemonRecords(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	gone := store.Owner{PID: 1, StartTime: 1, BootID: "not-this-boot"}
	for _, r := range []store.Record{
		{ID: "daemon0000000001", Kind: store.KindDaemon, Workload: "w", Owner: gone},
		{ID: "run0000000000001", Kind: store.KindRun, Workload: "w", Owner: gone},
	} {
		if _, err := st.Begin(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	p := &Provider{opts: Options{StateDir: dir, Store: st}}
	if err := os.Mkdir(p.runDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"daemon0000000001", "run0000000000001"} {
		if err := os.WriteFile(p.runSockPath(id), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := p.Reclaim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Reclaimed, []string{"run0000000000001"}) || !slices.Contains(rep.Live, "daemon0000000001") {
		t.Errorf("report %+v", rep)
	}
	if _, err := st.Get(ctx, "daemon0000000001"); err != nil {
		t.Errorf("daemon record reclaimed: %v", err)
	}
	if _, err := os.Stat(p.runSockPath("daemon0000000001")); err != nil {
		t.Errorf("daemon exec socket removed: %v", err)
	}
	if _, err := os.Stat(p.runSockPath("run0000000000001")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("exec socket of the reclaimed record: %v", err)
	}
	// The package-level Reclaim (cordon run, cordon gc) agrees.
	if rep, err := Reclaim(ctx, st, cgroup.Layout{}); err != nil || len(rep.Reclaimed) != 0 || !slices.Contains(rep.Live, "daemon0000000001") {
		t.Errorf("Reclaim = %+v, %v", rep, err)
	}
}

func TestExecProcessNeedsDaemonMode(t *testing.T) {
	sb := &linuxSandbox{p: &Provider{}, spec: sandbox.Spec{ID: "x"}, done: make(chan struct{})}
	if _, err := sb.ExecProcess(context.Background(), []string{"/bin/true"}, nil, "", [3]*os.File{}); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("ExecProcess outside daemon mode = %v", err)
	}
	sb.p.opts.Daemon = true
	if _, err := sb.ExecProcess(context.Background(), []string{"/bin/true"}, nil, "", [3]*os.File{}); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("ExecProcess before Exec = %v", err)
	}
	for _, c := range []struct {
		argv []string
		env  []string
		dir  string
	}{{nil, nil, ""}, {[]string{""}, nil, ""}, {[]string{"a\x00b"}, nil, ""}, {[]string{"a"}, []string{"K=\x00"}, ""}, {[]string{"a"}, nil, "relative"}} {
		if _, _, err := execProcess(context.Background(), "/nonexistent.sock", c.argv, c.env, c.dir, [3]*os.File{}, nil); failure.KindOf(err) != failure.KindUsage {
			t.Errorf("execProcess(%q, %q, %q) = %v, want a usage error", c.argv, c.env, c.dir, err)
		}
	}
	big := []string{"/bin/true", strings.Repeat("x", sbinit.MaxExecMessage)}
	if _, _, err := execProcess(context.Background(), "/nonexistent.sock", big, nil, "", [3]*os.File{}, nil); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("oversized exec = %v, want a usage error", err)
	}
	if _, _, err := execProcess(context.Background(), "/nonexistent.sock", []string{"/bin/true"}, nil, "", [3]*os.File{}, nil); failure.KindOf(err) != failure.KindExec {
		t.Errorf("exec without a listener = %v, want an exec error", err)
	}
}

func TestValidID(t *testing.T) {
	for _, id := range []string{"0123456789abcdef", "a", "a-b"} {
		if !validID(id) {
			t.Errorf("validID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "../x", "a/b", "A", strings.Repeat("a", 65), "a.b"} {
		if validID(id) {
			t.Errorf("validID(%q) = true", id)
		}
	}
}

func TestProcStat(t *testing.T) {
	state, start, err := procStat(os.Getpid())
	if err != nil || start == 0 || (state != 'R' && state != 'S') {
		t.Fatalf("procStat(self) = %c %d %v", state, start, err)
	}
	if _, _, err := procStat(1 << 30); err == nil {
		t.Error("procStat of a missing pid succeeded")
	}
}
