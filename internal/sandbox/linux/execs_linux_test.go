package linux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// Tests of a standalone sandbox that serves execs (Spec.Execs) and of the
// console handed out at Start (Image.TerminalAtStart). The shared helpers
// (requireSandboxes, newStateDir, run, runErr, checkGone, childByCmdline)
// are in daemon_linux_test.go.

func newStandaloneProvider(t *testing.T, dir string, st *store.Store) *Provider {
	t.Helper()
	p, err := New(Options{StateDir: dir, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startStandalone provisions and starts spec (admitting DEDICATED_CONTAINER
// verified from evidence) and, unless noExec, runs its program.
func startStandalone(t *testing.T, p *Provider, spec sandbox.Spec, noExec bool) *linuxSandbox {
	t.Helper()
	ctx := context.Background()
	spec.Level = sandbox.DedicatedContainer
	sb, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Deprovision(context.Background()) })
	adm, err := sb.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if adm.Level != sandbox.DedicatedContainer || !adm.Verified {
		t.Fatalf("admitted %v (verified %v), want DEDICATED_CONTAINER verified: %+v", adm.Level, adm.Verified, adm.Record)
	}
	if !noExec {
		if err := sb.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return sb.(*linuxSandbox)
}

// pidGone waits (at most 10 s) until the process behind pidfd has exited.
func pidGone(t *testing.T, pidfd int) bool {
	t.Helper()
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 10000)
	return err == nil && n == 1
}

// sandboxProcs are the pids the host lists in the sandbox's cgroups,
// except this test process: the spawning thread sits in the v1 groups
// until the init is reaped and its locked thread exits (spawn), and v1
// lists a thread's whole process in cgroup.procs.
func sandboxProcs(t *testing.T, sb *linuxSandbox) []string {
	t.Helper()
	var out []string
	for _, d := range sb.cg.Dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(b)) {
			if f != strconv.Itoa(os.Getpid()) && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// A standalone sandbox with Execs serves execs while its main program
// runs (stdio, exit status, signals), is a "run" record with an exec
// socket, and ends with its main program: an exec'd long sleeper is
// killed (its host pid gone) and the cgroups are empty. Deprovision then
// leaves nothing behind.
func TestExecsStandalone(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newStandaloneProvider(t, dir, st)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	defer inW.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	sb := startStandalone(t, p, sandbox.Spec{Argv: []string{"/bin/sh", "-c", "read x; exit 5"}, Execs: true, Stdin: in, Stdout: null, Stderr: null}, false)
	in.Close()

	rec, err := st.Get(ctx, sb.ID())
	if err != nil || rec.Kind != store.KindRun || !slices.Contains(rec.Resources, p.RunSocket(sb.ID())) {
		t.Fatalf("record = %+v, %v; want kind run naming the exec socket", rec, err)
	}
	if fi, err := os.Lstat(p.RunSocket(sb.ID())); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("exec socket: %v, %v; want a 0600 socket", fi, err)
	}
	if r := run(t, sb, "to stdin", "/bin/sh", "-c", "cat; echo err >&2; exit 3"); r.out != "to stdin" || r.err != "err\n" || r.exit.Code != 3 {
		t.Errorf("exec with stdio = %+v", r)
	}
	if r := run(t, sb, "", "/bin/sh", "-c", "echo $(id -u)"); r.out != "1000\n" {
		t.Errorf("exec'd id -u = %+v", r)
	}
	// Process.Signal reaches the exec'd process.
	term, err := sb.ExecProcess(ctx, []string{"/bin/sleep", "1001"}, nil, "", [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	if err := term.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ex, err := term.Wait(ctx); err != nil || ex.Signal != int(syscall.SIGTERM) {
		t.Errorf("exec'd sleep after SIGTERM = %+v, %v", ex, err)
	}

	// A long sleeper, seen from the host, dies with the main program.
	long, err := sb.ExecProcess(ctx, []string{"/bin/sleep", "1002"}, nil, "", [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	hostPid := childByCmdline(t, sb.InitPid(), "/bin/sleep 1002")
	pidfd, err := unix.PidfdOpen(hostPid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if got := sandboxProcs(t, sb); len(got) < 3 {
		t.Fatalf("the sandbox's cgroups list %v while init, main program and sleeper run", got)
	}
	io.WriteString(inW, "end\n")
	if ex, err := sb.WaitMain(ctx); err != nil || ex.Code != 5 {
		t.Errorf("WaitMain = %+v, %v; want exit 5", ex, err)
	}
	if ex, err := sb.Wait(ctx); err != nil || ex.Code != 5 {
		t.Errorf("Wait = %+v, %v; want exit 5", ex, err)
	}
	if !pidGone(t, pidfd) {
		t.Errorf("the exec'd sleeper (host pid %d) outlived the main program", hostPid)
	}
	if got := sandboxProcs(t, sb); len(got) != 0 {
		t.Errorf("the sandbox's cgroups list %v after the main program ended", got)
	}
	if ex, err := long.Wait(ctx); err == nil && ex.Signal != int(syscall.SIGKILL) {
		t.Errorf("the sleeper's exit = %+v, want killed or no status", ex)
	}
	if _, err := sb.ExecProcess(ctx, []string{"/bin/true"}, nil, "", [3]*os.File{}); err == nil {
		t.Error("ExecProcess after the sandbox ended succeeded")
	}
	initPid := sb.InitPid()
	if err := sb.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	checkGone(t, p, st, sb.ID(), initPid)
	if lk, ok, err := tryLockLease(rec.Lease); !ok || err != nil {
		t.Errorf("the lease lock after Deprovision: %v, %v", ok, err)
	} else {
		lk.release()
	}
}

// An exec into a standalone sandbox without Execs is refused as a usage
// error, and no exec socket exists; the control is TestExecsStandalone,
// where the same provider and call succeed with Execs. Execs with a
// daemon-mode provider, and a console at start without a terminal, are
// refused at Provision.
func TestExecsRefusals(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newStandaloneProvider(t, dir, st)
	ctx := context.Background()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	sb := startStandalone(t, p, sandbox.Spec{Argv: []string{"/bin/sleep", "1000"}, Stdout: null, Stderr: null}, false)
	if _, err := sb.ExecProcess(ctx, []string{"/bin/true"}, nil, "", [3]*os.File{}); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("ExecProcess without Execs = %v, want a usage error", err)
	}
	if _, _, err := sb.ExecProcessTerminal(ctx, []string{"/bin/true"}, nil, "", [3]*os.File{}, sandbox.Terminal{Stdin: true}); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("ExecProcessTerminal without Execs = %v, want a usage error", err)
	}
	if _, err := os.Lstat(p.RunSocket(sb.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("exec socket of a sandbox without Execs: %v", err)
	}
	if err := sb.SignalAll(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ex, err := sb.Wait(ctx); err != nil || ex.Signal != int(syscall.SIGKILL) {
		t.Errorf("Wait after SignalAll(SIGKILL) = %+v, %v", ex, err)
	}

	d := newDaemonProvider(t, dir, st)
	if _, err := d.Provision(ctx, sandbox.Spec{Argv: []string{"/bin/true"}, Execs: true, Level: sandbox.DedicatedContainer}); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("Execs with a daemon-mode provider = %v, want a usage error", err)
	}
	if _, err := p.Provision(ctx, sandbox.Spec{Argv: []string{"/bin/true"}, Image: &sandbox.Image{TerminalAtStart: true}, Level: sandbox.DedicatedContainer}); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("a console at start without a terminal = %v, want a usage error", err)
	}
	if recs, err := st.List(ctx); err != nil || len(recs) != 1 {
		t.Errorf("records after the refusals: %+v, %v; want only the first sandbox's", recs, err)
	}
}

// SignalAll reaches every process of the sandbox; Signal only the main
// program (the positive control: the same signal through Signal leaves
// the exec'd process running). The main program traps SIGTERM and says
// so on its stdout.
func TestExecsSignalAll(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newStandaloneProvider(t, dir, st)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	sb := startStandalone(t, p, sandbox.Spec{
		Argv:  []string{"/bin/sh", "-c", `trap 'echo term' TERM; echo up; while :; do sleep 0.05; done`},
		Execs: true, Stdout: outW, Stderr: null,
	}, false)
	outW.Close()
	lines := bufio.NewScanner(out)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("the main program's output ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := next(); l != "up" {
		t.Fatalf("main program said %q, want up", l)
	}
	proc, err := sb.ExecProcess(ctx, []string{"/bin/sleep", "1003"}, nil, "", [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()
	hostPid := childByCmdline(t, sb.InitPid(), "/bin/sleep 1003")

	sb.Signal(syscall.SIGTERM)
	if l := next(); l != "term" {
		t.Fatalf("after Signal the main program said %q, want term", l)
	}
	if st, _, err := procStat(hostPid); err != nil || st == 'Z' {
		t.Fatalf("Signal reached the exec'd process too (state %c, %v)", st, err)
	}

	if err := sb.SignalAll(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if l := next(); l != "term" {
		t.Errorf("after SignalAll the main program said %q, want term", l)
	}
	if ex, err := proc.Wait(ctx); err != nil || ex.Signal != int(syscall.SIGTERM) {
		t.Errorf("the exec'd process after SignalAll(SIGTERM) = %+v, %v", ex, err)
	}
	if err := sb.SignalAll(0); failure.KindOf(err) != failure.KindUsage {
		t.Errorf("SignalAll(0) = %v, want a usage error", err)
	}
	if err := sb.SignalAll(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ex, err := sb.Wait(ctx); err != nil || ex.Signal != int(syscall.SIGKILL) {
		t.Errorf("Wait after SignalAll(SIGKILL) = %+v, %v", ex, err)
	}
}

// TestExecsSpawnerHelper, re-run by TestExecsSpawnerSIGKILL
// (testkit.HelperTest), spawns an Execs sandbox into the state dir
// execsHelperEnv names, starts an exec'd sleeper in it, prints the ids and
// waits to be killed.
const execsHelperEnv = "CORDON_TEST_EXECS_SPAWNER"

func TestExecsSpawnerHelper(t *testing.T) {
	testkit.OnlyAsHelper(t)
	dir := os.Getenv(execsHelperEnv)
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	p := newStandaloneProvider(t, dir, st)
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	sb := startStandalone(t, p, sandbox.Spec{Argv: []string{"/bin/sleep", "1004"}, Execs: true, Stdout: null, Stderr: null}, false)
	if _, err := sb.ExecProcess(context.Background(), []string{"/bin/sleep", "1005"}, nil, "", [3]*os.File{}); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SPAWNED %s %d %d\n", sb.ID(), sb.InitPid(), childByCmdline(t, sb.InitPid(), "/bin/sleep 1005"))
	time.Sleep(time.Hour)
}

// The SIGKILL of an Execs sandbox's spawner ends the sandbox (the init's
// parent-death signal: init, main program and exec'd process gone, seen
// from the host), and Reclaim then removes its residue: record, cgroups,
// exec socket, lease.
func TestExecsSpawnerSIGKILL(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	cmd := testkit.HelperTest(t, "TestExecsSpawnerHelper", execsHelperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var id string
	var initPid, execPid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "SPAWNED %s %d %d", &id, &initPid, &execPid); err == nil {
			break
		}
	}
	if id == "" {
		t.Fatal("the helper spawned no sandbox")
	}
	var fds []int
	for _, pid := range []int{initPid, execPid} {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		fds = append(fds, fd)
	}
	p := newStandaloneProvider(t, dir, st)
	ctx := context.Background()
	rec, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Control: while the spawner lives, Reclaim leaves the sandbox be.
	if rep, err := p.Reclaim(ctx); err != nil || !slices.Contains(rep.Live, id) {
		t.Fatalf("Reclaim with the spawner alive = %+v, %v", rep, err)
	}
	if _, err := os.Lstat(p.RunSocket(id)); err != nil {
		t.Fatalf("exec socket while the spawner lives: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for i, fd := range fds {
		if !pidGone(t, fd) {
			t.Fatalf("pid %d (%s) outlived its spawner's SIGKILL", []int{initPid, execPid}[i], []string{"init", "exec'd sleeper"}[i])
		}
	}
	rep, err := p.Reclaim(ctx)
	if err != nil || !slices.Contains(rep.Reclaimed, id) {
		t.Fatalf("Reclaim after the spawner's SIGKILL = %+v, %v", rep, err)
	}
	checkGone(t, p, st, id, initPid)
	if lk, ok, err := tryLockLease(rec.Lease); !ok || err != nil {
		t.Errorf("the lease lock after Reclaim: %v, %v", ok, err)
	} else {
		lk.release()
	}
}
