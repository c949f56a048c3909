package linux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// These tests build real sandboxes: the sandbox init is this test binary,
// re-executed through /proc/self/exe as sbinit.Argv0 (package sbinit's
// init dispatches, as in the cordon binary). Build with CGO_ENABLED=0.
//
// This file holds the helpers the daemon tests share and the tests of
// serving execs in a live daemon sandbox (idle, concurrent, after the main
// program's exit, their hardening and Landlock);
// daemon_lifetime_linux_test.go holds those of its life beyond its spawner.

// requireSandboxes ends t (skip, or under CI=true fail) unless this test
// binary can build sandboxes at DEDICATED_CONTAINER: root, a static build
// (it is the init), and Landlock (the filesystem boundary's second fence).
func requireSandboxes(t *testing.T) {
	t.Helper()
	testkit.RequireStaticBuild(t)
	testkit.RequireRoot(t)
	testkit.RequireLandlock(t, 1)
}

// newStateDir returns a fresh state dir the sandbox init can traverse
// (0711, as cordon leaves it) and its open store. Cleanup releases every
// record left in it.
func newStateDir(t *testing.T) (string, *store.Store) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cordon-linux-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if recs, err := st.List(ctx); err == nil && len(recs) > 0 {
			if p, err := New(Options{StateDir: dir, Store: st}); err == nil {
				for _, r := range recs {
					_ = ReleaseRecord(ctx, st, p, r.ID)
				}
			}
		}
		st.Close()
		os.RemoveAll(dir)
	})
	return dir, st
}

func newDaemonProvider(t *testing.T, dir string, st *store.Store) *Provider {
	t.Helper()
	p, err := New(Options{StateDir: dir, Store: st, Daemon: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startDaemonSandbox provisions, starts (admitting DEDICATED_CONTAINER from
// evidence) and lets run a daemon-mode sandbox; argv may be empty.
func startDaemonSandbox(t *testing.T, p *Provider, argv ...string) *linuxSandbox {
	t.Helper()
	ctx := context.Background()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	sb, err := p.Provision(ctx, sandbox.Spec{Argv: argv, Level: sandbox.DedicatedContainer, Stdout: null, Stderr: null})
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
	if err := sb.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return sb.(*linuxSandbox)
}

type result struct {
	out, err string
	exit     sandbox.Exit
}

// run execs argv in ds with pipes as stdout and stderr and waits for it.
func run(t *testing.T, ds DaemonSandbox, stdin string, argv ...string) result {
	t.Helper()
	r, err := runErr(ds, stdin, nil, "", argv...)
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return r
}

func runErr(ds DaemonSandbox, stdin string, env []string, dir string, argv ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res result
	var files [3]*os.File
	var readers []*os.File
	for i := range files {
		r, w, err := os.Pipe()
		if err != nil {
			return res, err
		}
		if i == 0 {
			files[0] = r
			go func() { io.WriteString(w, stdin); w.Close() }()
			continue
		}
		files[i] = w
		readers = append(readers, r)
	}
	p, err := ds.ExecProcess(ctx, argv, env, dir, files)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		for _, r := range readers {
			r.Close()
		}
		return res, err
	}
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i, r := range readers {
		wg.Go(func() {
			b, _ := io.ReadAll(r)
			r.Close()
			outs[i] = string(b)
		})
	}
	res.exit, err = p.Wait(ctx)
	wg.Wait()
	res.out, res.err = outs[0], outs[1]
	return res, err
}

func TestDaemonIdleExec(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newDaemonProvider(t, dir, st)
	sb := startDaemonSandbox(t, p)

	rec, err := st.Get(context.Background(), sb.ID())
	if err != nil || rec.Kind != store.KindDaemon {
		t.Fatalf("record = %+v, %v; want kind daemon", rec, err)
	}
	sock := p.RunSocket(sb.ID())
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("exec socket %s: %v, %v; want a 0600 socket", sock, fi, err)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("run dir: %v, %v; want 0700", fi, err)
	}
	if sb.InitStartTime() == 0 {
		t.Fatal("InitStartTime = 0")
	}
	if _, start, err := procStat(sb.InitPid()); err != nil || start != sb.InitStartTime() {
		t.Fatalf("init start time %d, %v; InitStartTime %d", start, err, sb.InitStartTime())
	}

	if r := run(t, sb, "", "/bin/echo", "hi"); r.out != "hi\n" || r.exit != (sandbox.Exit{}) {
		t.Errorf("echo hi = %+v", r)
	}
	if r := run(t, sb, "", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"); r.out != "out\n" || r.err != "err\n" || r.exit.Code != 3 {
		t.Errorf("exit 3 = %+v", r)
	}
	if r := run(t, sb, "", "/bin/sh", "-c", "kill -TERM $$"); r.exit.Signal != int(syscall.SIGTERM) {
		t.Errorf("kill -TERM $$ = %+v", r)
	}
	if r := run(t, sb, "stdin text", "cat"); r.out != "stdin text" || r.exit.Code != 0 {
		t.Errorf("cat = %+v", r)
	}
	// Environment: the sandbox defaults plus env; working directory.
	r, err := runErr(sb, "", []string{"FOO=bar"}, "/tmp", "/bin/sh", "-c", `echo "$FOO $HOME $USER $(pwd) $(id -u):$(id -g)"`)
	if err != nil || r.out != "bar /home/agent agent /tmp 1000:1000\n" {
		t.Errorf("env/dir = %+v, %v", r, err)
	}
	// Own session: the process leads its session and group.
	if r := run(t, sb, "", "/bin/sh", "-c", `read pid comm state ppid pgrp sid rest < /proc/self/stat; echo "$pid $pgrp $sid"`); func() bool {
		f := strings.Fields(r.out)
		return len(f) != 3 || f[0] != f[1] || f[0] != f[2]
	}() {
		t.Errorf("session of an exec'd shell = %q, want pid == pgrp == sid", r.out)
	}

	// Missing programs: ExecError, NotFound (exit 127 for the caller).
	for _, argv := range [][]string{{"/nonexistent/prog"}, {"no-such-program-cordon"}} {
		_, err := runErr(sb, "", nil, "", argv...)
		var xe *ExecError
		if !errors.As(err, &xe) || !xe.NotFound() {
			t.Errorf("exec %v = %v, want an ExecError NotFound", argv, err)
		}
	}
	// Not executable: ExecError, not NotFound.
	_, err = runErr(sb, "", nil, "", "/etc/passwd")
	var xe *ExecError
	if !errors.As(err, &xe) || xe.NotFound() {
		t.Errorf("exec /etc/passwd = %v, want an ExecError (EACCES)", err)
	}

	// Signals through the exec channel; after the exit, ErrProcessDone.
	ctx := context.Background()
	proc, err := sb.ExecProcess(ctx, []string{"/bin/sleep", "100"}, nil, "", [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	if proc.Pid() <= 1 {
		t.Errorf("pid in the sandbox = %d", proc.Pid())
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ex, err := proc.Wait(ctx); err != nil || ex.Signal != int(syscall.SIGTERM) {
		t.Errorf("sleep after SIGTERM = %+v, %v", ex, err)
	}
	if err := proc.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v, want ErrProcessDone", err)
	}

	// Closing the connection does not kill the process.
	proc, err = sb.ExecProcess(ctx, []string{"/bin/sleep", "100"}, nil, "", [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	proc.Close()
	if _, err := proc.Wait(ctx); !errors.Is(err, ErrNoExitStatus) {
		t.Errorf("Wait after Close = %v, want ErrNoExitStatus", err)
	}
	time.Sleep(100 * time.Millisecond)
	if r := run(t, sb, "", "/bin/sh", "-c", "kill -0 "+strconv.Itoa(proc.Pid())); r.exit.Code != 0 {
		t.Errorf("the process of a closed exec connection is gone: %+v", r)
	}

	// Idle: no main program, so WaitMain waits for the sandbox's end.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := sb.WaitMain(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitMain of an idle sandbox = %v, want the context's deadline", err)
	}

	// Deprovision removes everything, the exec socket included.
	if err := sb.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	checkGone(t, p, st, sb.ID(), sb.InitPid())
	if _, err := sb.ExecProcess(ctx, []string{"/bin/true"}, nil, "", [3]*os.File{}); err == nil {
		t.Error("ExecProcess after Deprovision succeeded")
	}
}

// checkGone asserts nothing of sandbox id is left on the host.
func checkGone(t *testing.T, p *Provider, st *store.Store, id string, initPid int) {
	t.Helper()
	if _, err := st.Get(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("record of %s after Deprovision: %v", id, err)
	}
	if _, err := os.Lstat(p.RunSocket(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("exec socket of %s after Deprovision: %v", id, err)
	}
	if _, err := os.Lstat(p.handlePath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("handle lock of %s after Deprovision: %v", id, err)
	}
	for _, d := range cgroup.PlannedDirs(p.Layout(), id) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup dir %s after Deprovision: %v", d, err)
		}
	}
	if res, err := cgroup.Residue(p.Layout()); err != nil || slices.Contains(res, id) {
		t.Errorf("cgroup residue %v, %v", res, err)
	}
	if initPid > 0 {
		if st, _, err := procStat(initPid); err == nil && st != 'Z' && st != 'X' {
			// A pid may be reused, but not this soon by a live process of ours.
			t.Errorf("init pid %d still running (state %c)", initPid, st)
		}
	}
}

func TestDaemonConcurrentExecs(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	sb := startDaemonSandbox(t, newDaemonProvider(t, dir, st))
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			r, err := runErr(sb, "", nil, "", "/bin/sh", "-c", fmt.Sprintf("sleep 0.$((%d %% 3)); echo %d; exit %d", i, i, i%7))
			if err != nil {
				errs <- fmt.Errorf("exec %d: %w", i, err)
				return
			}
			if r.out != fmt.Sprintf("%d\n", i) || r.exit.Code != i%7 {
				errs <- fmt.Errorf("exec %d = %+v", i, r)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The main program's exit does not end a daemon-mode sandbox; the init
// reports it, forwards signals while it runs, and keeps serving execs.
func TestDaemonMainExitKeepsSandbox(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newDaemonProvider(t, dir, st)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sb := startDaemonSandbox(t, p, "/bin/sh", "-c", "exit 7")
	ex, err := sb.WaitMain(ctx)
	if err != nil || ex.Code != 7 {
		t.Fatalf("WaitMain = %+v, %v, want exit 7", ex, err)
	}
	if ex, err := sb.Wait(ctx); err != nil || ex.Code != 7 {
		t.Errorf("Wait = %+v, %v, want exit 7", ex, err)
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case <-sb.done:
		t.Fatal("the init exited with the main program")
	default:
	}
	if r := run(t, sb, "", "/bin/echo", "still here"); r.out != "still here\n" {
		t.Errorf("exec after the main program ended = %+v", r)
	}

	sb2 := startDaemonSandbox(t, p, "/bin/sleep", "1000")
	sb2.Signal(syscall.SIGTERM) // to the init, forwarded to the main program
	ex, err = sb2.WaitMain(ctx)
	if err != nil || ex.Signal != int(syscall.SIGTERM) {
		t.Fatalf("WaitMain after SIGTERM = %+v, %v", ex, err)
	}
	sb2.Signal(syscall.SIGTERM) // no main program: dropped
	if r := run(t, sb2, "", "/bin/echo", "ok"); r.out != "ok\n" {
		t.Errorf("exec after SIGTERM ended the main program = %+v", r)
	}
}

// procStatus returns the lines of /proc/PID/status as key → value.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m
}

// childByCmdline finds, read from the host, the child of ppid whose
// command line is cmd, waiting briefly for it to appear.
func childByCmdline(t *testing.T, ppid int, cmd string) int {
	t.Helper()
	for range 100 {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") != cmd {
				continue
			}
			if s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil && strings.Contains(string(s), fmt.Sprintf("\nPPid:\t%d\n", ppid)) {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no child %q of pid %d", cmd, ppid)
	return 0
}

// An exec'd process has exactly the main program's boundary, read from
// the host: credentials, every capability set, no_new_privs, seccomp,
// rlimits, cgroups, namespaces; and its own session.
func TestDaemonExecHardening(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newDaemonProvider(t, dir, st)
	sb := startDaemonSandbox(t, p, "/bin/sleep", "1001")
	ctx := context.Background()
	proc, err := sb.ExecProcess(ctx, []string{"/bin/sleep", "1002"}, nil, "", [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Signal(syscall.SIGKILL)
	initPid := sb.InitPid()
	mainPid := childByCmdline(t, initPid, "/bin/sleep 1001")
	execPid := childByCmdline(t, initPid, "/bin/sleep 1002")
	ms, es := procStatus(t, mainPid), procStatus(t, execPid)
	if f := strings.Fields(es["NSpid"]); len(f) != 2 || f[1] != strconv.Itoa(proc.Pid()) {
		t.Errorf("exec'd NSpid %q, Pid() = %d", es["NSpid"], proc.Pid())
	}
	lease := sb.Lease()
	wantID := fmt.Sprintf("%d %d %d %d", lease.UID+sandboxUID, lease.UID+sandboxUID, lease.UID+sandboxUID, lease.UID+sandboxUID)
	wantGID := fmt.Sprintf("%d %d %d %d", lease.GID+sandboxGID, lease.GID+sandboxGID, lease.GID+sandboxGID, lease.GID+sandboxGID)
	want := map[string]string{
		"Uid": wantID, "Gid": wantGID, "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	}
	for _, k := range []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters"} {
		if ms[k] != es[k] {
			t.Errorf("%s: main program %q, exec'd %q", k, ms[k], es[k])
		}
		if w, ok := want[k]; ok && es[k] != w {
			t.Errorf("%s: exec'd %q, want %q", k, es[k], w)
		}
	}
	t.Logf("main program (host pid %d) and exec'd process (host pid %d, %d inside):", mainPid, execPid, proc.Pid())
	for _, k := range []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters", "NSpid"} {
		t.Logf("  %-16s %-48q %q", k, ms[k], es[k])
	}
	if n, err := strconv.Atoi(es["Seccomp_filters"]); err != nil || n < 1 {
		t.Errorf("Seccomp_filters %q", es["Seccomp_filters"])
	}
	same := func(what string, read func(pid int) (string, error)) {
		t.Helper()
		a, err1 := read(mainPid)
		b, err2 := read(execPid)
		if err1 != nil || err2 != nil || a != b {
			t.Errorf("%s: main program %q (%v), exec'd %q (%v)", what, a, err1, b, err2)
		}
	}
	for _, ns := range []string{"cgroup", "ipc", "mnt", "net", "pid", "pid_for_children", "time", "time_for_children", "user", "uts"} {
		same("ns/"+ns, func(pid int) (string, error) { return os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns)) })
		// …and they are the init's, not the host's.
		hostNS, _ := os.Readlink("/proc/self/ns/" + ns)
		if ex, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", execPid, ns)); ex == hostNS && ns != "time" && ns != "time_for_children" {
			t.Errorf("ns/%s of the exec'd process is the host's (%s)", ns, ex)
		}
	}
	for _, f := range []string{"cgroup", "limits"} {
		same(f, func(pid int) (string, error) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			return string(b), err
		})
	}
	// Its own session and group, no controlling terminal, like the main program.
	for _, pid := range []int{mainPid, execPid} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		// state ppid pgrp session tty_nr
		if f[2] != strconv.Itoa(pid) || f[3] != strconv.Itoa(pid) || f[4] != "0" {
			t.Errorf("pid %d: pgrp %s session %s tty %s, want its own session and no terminal", pid, f[2], f[3], f[4])
		}
	}
	// Only 0, 1 and 2 reach the exec'd process. Read them once sleep is in
	// its sleep: while the dynamic loader maps the libraries it holds them
	// open (fd 3, /etc/ld.so.cache, libc.so.6) for a moment, which is no
	// inherited descriptor.
	waitInSleep(t, execPid)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", execPid))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", execPid, e.Name()))
		names = append(names, e.Name()+"->"+target)
	}
	if len(names) != 3 || !strings.HasPrefix(names[0], "0->") || !strings.HasPrefix(names[1], "1->") || !strings.HasPrefix(names[2], "2->") {
		t.Errorf("descriptors of the exec'd process: %v, want 0 1 2", names)
	}
}

// waitInSleep waits (at most 5 s) until pid, a /bin/sleep, is blocked in
// nanosleep or clock_nanosleep (/proc/PID/syscall's first field).
func waitInSleep(t *testing.T, pid int) {
	t.Helper()
	sleeping := map[string]bool{
		strconv.Itoa(unix.SYS_NANOSLEEP): true, strconv.Itoa(unix.SYS_CLOCK_NANOSLEEP): true,
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
		if f := strings.Fields(string(b)); len(f) > 0 && sleeping[f[0]] {
			return
		}
	}
	t.Fatalf("pid %d never reached its sleep", pid)
}

// Landlock holds for an exec'd process: it cannot write outside the
// writable paths even where its uid may (the probe dir is a tmpfs it
// owns), while the same write under /tmp succeeds (positive control).
func TestDaemonExecLandlock(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	sb := startDaemonSandbox(t, newDaemonProvider(t, dir, st))
	// The uid may write there as far as permissions go…
	if r := run(t, sb, "", "/bin/sh", "-c", "test -w "+sbinit.ProbeDir+" && stat -c '%u %a' "+sbinit.ProbeDir+" && cat "+sbinit.ProbeDir+"/"+sbinit.ProbeControl); r.exit.Code != 0 || r.out != "1000 700\nok" {
		t.Fatalf("probe dir as seen by the exec'd process: %+v", r)
	}
	// …but Landlock denies it.
	r := run(t, sb, "", "/bin/sh", "-c", "echo x > "+sbinit.ProbeDir+"/exec-denied")
	if r.exit.Code == 0 || !strings.Contains(r.err, "Permission denied") {
		t.Errorf("write in the probe dir = %+v, want Permission denied", r)
	}
	for _, target := range []string{"/etc/f", "/f", "/usr/f", "/dev/f"} {
		if r := run(t, sb, "", "/bin/sh", "-c", "echo x > "+target); r.exit.Code == 0 {
			t.Errorf("write %s succeeded", target)
		}
	}
	// Positive control: the same write in a writable path.
	if r := run(t, sb, "", "/bin/sh", "-c", "echo x > /tmp/exec-ok && cat /tmp/exec-ok"); r.exit.Code != 0 || r.out != "x\n" {
		t.Errorf("write in /tmp = %+v, want success", r)
	}
	if r := run(t, sb, "", "/bin/sh", "-c", "echo y > /home/agent/exec-ok && cat /home/agent/exec-ok"); r.exit.Code != 0 || r.out != "y\n" {
		t.Errorf("write in /home/agent = %+v, want success", r)
	}
}
