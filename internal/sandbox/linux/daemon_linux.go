package linux

// Daemon mode: sandboxes that outlive the process that spawned them.
//
// A `cordon daemon` owns sandboxes across its own restarts. With
// Options.Daemon set, the provider spawns the init without a parent-death
// signal (and the init arms none), lets the main program be absent or end
// without ending the sandbox, and gives each sandbox an exec channel: a
// listening AF_UNIX SOCK_SEQPACKET socket at <StateDir>/run/<id>.sock
// (directory 0700 root, socket 0600), created here before the spawn and
// handed to the init as a descriptor. Only the host's root can reach the
// path; the sandbox cannot see it (it is outside its root) and the init
// holds the listener close-on-exec, never passing it to a program.
//
// "exec" is served by the sandbox's own init, never by joining its
// namespaces from Go (setns into a user namespace fails in a multithreaded
// process): each connection carries one request and the process's three
// stdio descriptors; the init forks it from its main thread, the one every
// hardening step was applied to, so an exec'd process has exactly the
// boundary of the main program (see sbinit/daemon_linux.go).
//
// The init also holds the host-wide lease lock (a duplicate of the
// spawner's locked descriptor), so the UID/GID range stays claimed while
// no daemon runs: another state directory's cordon cannot lease it to a
// second live sandbox. The process that drives the sandbox holds a second
// lock, run/<id>.lock (its "handle").
//
// After a daemon restart, Attach makes a handle for a live sandbox from
// its record and the init's (pid, start time) the daemon recorded
// (InitPid, InitStartTime): it proves the pid is still that init and sits
// in the sandbox's cgroups, takes the handle lock, and re-takes the lease
// lock from the init (pidfd_getfd of the init's locked descriptor).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// DaemonSandbox is the seam's Sandbox: every method a daemon needs
// (InitStartTime, ExecProcess, WaitMain, Lease, Adopt…) is on
// sandbox.Sandbox now. Kept as a name for this package's tests.
type DaemonSandbox = sandbox.Sandbox

var (
	_ sandbox.Sandbox  = (*linuxSandbox)(nil)
	_ sandbox.Sandbox  = (*attachedSandbox)(nil)
	_ sandbox.Resident = (*Provider)(nil)
)

// Errors of Attach (and of ExecProcess/Wait), matched with errors.Is.
var (
	// ErrInitGone: the recorded init is not running any more: no such pid,
	// another start time (the pid was reused), a zombie, or a process
	// outside the sandbox's cgroups. Its residue is ReleaseRecord's.
	ErrInitGone = errors.New("the sandbox init is gone")
	// ErrLeaseHeld: another process holds the sandbox: its handle lock
	// (the daemon that spawned or attached it still runs, or a second
	// handle of this process), or the lease lock is held by another than
	// the sandbox's init.
	ErrLeaseHeld = errors.New("the sandbox's lease is held by another process")
	// ErrNoExitStatus: the exec channel closed before the process's exit
	// status came (the sandbox was stopped, or Process.Close was called).
	ErrNoExitStatus = errors.New("the exec channel closed before the exit status")
)

// validID reports whether id can name a sandbox's cgroups and exec socket
// (the cgroup package's rule: [a-z0-9-]{1,64}), so it is never a path.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// runDir holds the exec sockets: 0700, root's.
func (p *Provider) runDir() string { return filepath.Join(p.opts.StateDir, "run") }

// runSockPath is the exec socket of sandbox id.
func (p *Provider) runSockPath(id string) string { return filepath.Join(p.runDir(), id+".sock") }

// RunSocket is the path of sandbox id's exec socket (daemon mode).
func (p *Provider) RunSocket(id string) string { return p.runSockPath(id) }

// handlePath is the lock file whose holder owns sandbox id's handle: the
// process that spawned it, or the one that attached it since. It keeps
// two daemons from driving one sandbox. (The lease lock cannot: the init
// holds that one for as long as it lives.)
func (p *Provider) handlePath(id string) string { return filepath.Join(p.runDir(), id+".lock") }

// tryHandle takes the handle lock of sandbox id; ok is false when another
// process holds it.
func (p *Provider) tryHandle(id string) (*leaseLock, bool, error) {
	if !validID(id) {
		return nil, false, fmt.Errorf("invalid sandbox id %q", id)
	}
	if err := ensureRunDir(p.runDir()); err != nil {
		return nil, false, err
	}
	return tryLockFile(p.handlePath(id))
}

// takeHandle takes the handle lock of a sandbox being provisioned.
func (p *Provider) takeHandle(sb *linuxSandbox) error {
	h, ok, err := p.tryHandle(sb.spec.ID)
	if err != nil {
		return failure.Fail(failure.KindProvision, "sandbox lock", err)
	}
	if !ok {
		return failure.Fail(failure.KindProvision, "sandbox lock", fmt.Errorf("%w: sandbox %s", ErrLeaseHeld, sb.spec.ID))
	}
	sb.handle = h
	return nil
}

// releaseHandle removes the handle lock file, while still holding it (so
// nobody locks the file being removed), then releases it.
func (p *Provider) releaseHandle(id string, h *leaseLock) {
	if h == nil || h.fd < 0 {
		return
	}
	os.Remove(p.handlePath(id))
	h.release()
}

// ensureRunDir creates the run directory 0700, and refuses one that is a
// symlink or not the caller's.
func ensureRunDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not %d", dir, st.Uid, os.Geteuid())
	}
	if st.Mode&0o777 != 0o700 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// listenExec creates the sandbox's exec socket, listening, before the
// spawn. The returned file is the listener the init inherits; the caller
// closes its copy once the init runs.
func (sb *linuxSandbox) listenExec() (*os.File, error) {
	dir := sb.p.runDir()
	if err := ensureRunDir(dir); err != nil {
		return nil, failure.Fail(failure.KindProvision, "exec socket dir", err)
	}
	path := sb.p.runSockPath(sb.spec.ID)
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, failure.Failf(failure.KindProvision, "exec socket", "%s: path too long for a Unix socket (the state dir is too deep)", path)
	}
	// Residue of a dead sandbox with this id (ids are random; only a
	// retried id collides).
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, failure.Fail(failure.KindProvision, "exec socket", err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, failure.Fail(failure.KindProvision, "exec socket", err)
	}
	fail := func(err error) (*os.File, error) {
		unix.Close(fd)
		os.Remove(path)
		return nil, failure.Fail(failure.KindProvision, "exec socket", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return fail(fmt.Errorf("bind %s: %w", path, err))
	}
	// The directory is 0700 root: nobody else could connect before this.
	if err := os.Chmod(path, 0o600); err != nil {
		return fail(err)
	}
	if err := unix.Listen(fd, sbinit.MaxExecs); err != nil {
		return fail(fmt.Errorf("listen %s: %w", path, err))
	}
	return os.NewFile(uintptr(fd), "exec-listener"), nil
}

// procStat reads the state (field 3) and start time (field 22) of pid from
// /proc/PID/stat. The command name may hold spaces and parentheses, so
// fields are counted from the last ')'.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	closing := bytes.LastIndexByte(b, ')')
	if closing < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no (comm) field", pid)
	}
	rest := bytes.Fields(b[closing+1:])
	const startField = 22 - 3
	if len(rest) <= startField || len(rest[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after comm", pid, len(rest))
	}
	start, err = strconv.ParseUint(string(rest[startField]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: bad start time %q", pid, rest[startField])
	}
	return rest[0][0], start, nil
}

// procStartTime is field 22 of /proc/PID/stat (clock ticks since boot).
func procStartTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// InitStartTime is the init's start time (field 22 of /proc/<pid>/stat),
// read at spawn; 0 outside daemon mode or before Start. With InitPid it
// proves later that a pid is still this init (Attach).
func (sb *linuxSandbox) InitStartTime() uint64 { return sb.initStart }

// WaitMain waits until the main program has ended and reports how. In
// daemon mode the sandbox lives on (execs still work) until Stop; with no
// main program, or if the init ends first, it returns when the init ends.
func (sb *linuxSandbox) WaitMain(ctx context.Context) (sandbox.Exit, error) {
	select {
	case <-sb.mainDone:
	case <-sb.done:
		// Drain: readControl records an exit reported just before the end.
		drainEvents(sb.events)
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
	return sb.exitStatus(), nil
}

// Attach returns a handle for a live daemon-mode sandbox spawned by an
// earlier process (a daemon before its restart), from its record and the
// init's pid and start time recorded then. It refuses (errors matching
// ErrInitGone) unless the pid is alive, has that start time, is no zombie
// and sits in the sandbox's own cgroups in every hierarchy; and
// (ErrLeaseHeld) unless it can take the sandbox's handle lock and re-take
// the host-wide lease lock from the init, both of which it then holds
// until Deprovision. The handle supports ID, InitPid,
// InitStartTime, Lease, Adopt, ExecProcess, Signal, Stop and Deprovision;
// Start, Exec, Wait and WaitMain belong to the spawning process and return
// KindUsage errors.
func (p *Provider) Attach(ctx context.Context, rec store.Record, initPid int, initStart uint64) (sandbox.Sandbox, error) {
	if rec.Kind != store.KindDaemon {
		return nil, failure.Failf(failure.KindUsage, "attach", "sandbox %s is a %q record; only daemon-owned sandboxes can be attached", rec.ID, rec.Kind)
	}
	if initPid <= 0 || initStart == 0 {
		return nil, failure.Failf(failure.KindUsage, "attach", "sandbox %s: no init pid and start time recorded", rec.ID)
	}
	if !validID(rec.ID) {
		return nil, failure.Failf(failure.KindUsage, "attach", "invalid sandbox id %q", rec.ID)
	}
	cg := cgroup.Open(p.layout, rec.ID)
	gone := func(format string, args ...any) error {
		return failure.Fail(failure.KindStart, "attach", fmt.Errorf("%w: sandbox %s: %s", ErrInitGone, rec.ID, fmt.Sprintf(format, args...)))
	}
	// The pidfd first, then the checks: if they pass, the pidfd is that
	// init, and every later signal goes to it and to no reused pid.
	pidfd, err := unix.PidfdOpen(initPid, 0)
	if err != nil {
		return nil, gone("pid %d: %v", initPid, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(pidfd)
		}
	}()
	state, start, err := procStat(initPid)
	switch {
	case err != nil:
		return nil, gone("pid %d: %v", initPid, err)
	case start != initStart:
		return nil, gone("pid %d started at %d, not %d (another process)", initPid, start, initStart)
	case state == 'Z' || state == 'X':
		return nil, gone("pid %d has exited", initPid)
	}
	if err := p.inSandboxCgroups(initPid, rec.ID); err != nil {
		return nil, gone("%v", err)
	}
	held := func(err error) error {
		return failure.Fail(failure.KindProvision, "attach", fmt.Errorf("%w: sandbox %s: %v", ErrLeaseHeld, rec.ID, err))
	}
	handle, free, err := p.tryHandle(rec.ID)
	if err != nil {
		return nil, failure.Fail(failure.KindProvision, "attach: sandbox lock", err)
	}
	if !free {
		return nil, held(errors.New("another process has a handle on it (a daemon still running?)"))
	}
	lk, err := takeLeaseFromInit(pidfd, initPid, rec.Lease)
	if err != nil {
		handle.release()
		return nil, held(err)
	}
	ok = true
	a := &attachedSandbox{p: p, rec: rec, pid: initPid, start: initStart, pidfd: pidfd, cg: cg, lock: lk, handle: handle, unwatch: make(chan struct{})}
	go a.watchTCP()
	return a, nil
}

// watchTCP is linuxSandbox.watchTCP for an attached sandbox: the process
// that spawned it watched its TCP memory; this one does from now on. The
// limit is read back from its cgroups as Provision set it.
func (a *attachedSandbox) watchTCP() {
	if testHooks && slices.Contains(a.p.opts.TestSkip, "tcp-watch") {
		return
	}
	f, err := a.cg.ReadBack()
	if err != nil {
		a.p.opts.Logger.Warn("attached sandbox: its limits are unreadable; killing it", "sandbox", a.rec.ID, "err", err)
		a.kill()
		return
	}
	limit := f.TCPMemBytes
	if f.Versions[cgroup.Memory] == 2 || limit <= 0 || limit >= 1<<52 {
		// v2, a kernel without the v1 file, or a sandbox provisioned
		// before v1 TCP limits were set: the limit Provision sets now.
		limit = tcpLimit(f.MemoryBytes, readHostTCPMem)
	}
	// The gateway's group, its TCP limit read back likewise (none: a
	// sandbox provisioned before gateways had their own group).
	gw := cgroup.Open(a.p.layout, GatewayGroup(a.rec.ID))
	var gwLimit int64
	if gf, err := gw.ReadBack(); err == nil && gf.TCPMemBytes > 0 && gf.TCPMemBytes < 1<<52 {
		gwLimit = gf.TCPMemBytes
	}
	(&tcpWatch{
		id: a.rec.ID, limit: limit, cg: a.cg, initPid: a.pid, done: a.unwatch, log: a.p.opts.Logger, kill: a.kill,
		gw: gw, gwLimit: gwLimit,
	}).run()
}

// kill ends the attached sandbox without waiting (Stop waits).
func (a *attachedSandbox) kill() {
	a.Signal(unix.SIGKILL)
	_ = a.cg.Kill()
}

// takeLeaseFromInit re-takes the host-wide lease lock of a live sandbox:
// its init holds a locked descriptor of the lease's lock file (see
// sbinit.Config.LeaseLockFD). The descriptor is found by its path in
// /proc/<pid>/fd, duplicated with pidfd_getfd (the same open file
// description, so the same lock), checked to be that very file, and
// locked again: that succeeds only if the lock is this description's,
// not another holder's.
func takeLeaseFromInit(pidfd, pid int, l store.Lease) (*leaseLock, error) {
	want := leaseLockPath(l)
	var st unix.Stat_t
	if err := unix.Stat(want, &st); err != nil {
		return nil, fmt.Errorf("lease lock %s: %w", want, err)
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the init's descriptors: %w", err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || target != want {
			continue
		}
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			return nil, fmt.Errorf("take the lease lock from the init (pidfd_getfd): %w", err)
		}
		var got unix.Stat_t
		if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
			unix.Close(fd)
			return nil, fmt.Errorf("the init's descriptor %d is not the lease lock %s", n, want)
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("the lease lock %s is held by another process than the init (%v)", want, err)
		}
		return &leaseLock{fd: fd}, nil
	}
	return nil, fmt.Errorf("the init holds no descriptor of the lease lock %s", want)
}

// inSandboxCgroups checks that pid sits in the group of sandbox id in every
// hierarchy this provider uses, as seen from the host's cgroup namespace.
func (p *Provider) inSandboxCgroups(pid int, id string) error {
	have, err := cgroup.ProcCgroups(pid)
	if err != nil {
		return err
	}
	own := "/" + cgroup.Prefix + "/" + id
	for ctl, m := range p.layout.Mounts {
		key := string(ctl)
		if m.Version == 2 {
			key = ""
		}
		if have[key] != own {
			return fmt.Errorf("pid %d is in %q for %s, not %s", pid, have[key], ctl, own)
		}
	}
	if p.layout.Unified != "" && have[""] != own {
		return fmt.Errorf("pid %d is in %q (unified), not %s", pid, have[""], own)
	}
	return nil
}

// attachedSandbox is a live daemon-mode sandbox this process did not spawn.
type attachedSandbox struct {
	p      *Provider
	rec    store.Record
	pid    int
	start  uint64
	pidfd  int
	cg     *cgroup.Group
	lock   *leaseLock // the lease lock, taken back from the init
	handle *leaseLock // run/<id>.lock
	// unwatch ends watchTCP (closed by Deprovision).
	unwatch chan struct{}

	mu     sync.Mutex
	deprov bool
}

func (a *attachedSandbox) ID() string   { return a.rec.ID }
func (a *attachedSandbox) InitPid() int { return a.pid }

// ScanTraps reports nothing: an adopted sandbox holds no bind descriptors
// (the daemon that built it had them).
func (a *attachedSandbox) ScanTraps() []trapscan.Report { return nil }
func (a *attachedSandbox) InitStartTime() uint64        { return a.start }
func (a *attachedSandbox) Lease() sandbox.Lease         { return leaseOf(a.rec.Lease) }
func (a *attachedSandbox) Phases() []sandbox.Phase      { return nil }

// HelperFacts reads the sandbox's gateway cgroup back.
func (a *attachedSandbox) HelperFacts() (sandbox.HelperFacts, error) {
	return a.p.helperFacts(a.rec.ID)
}

// Adopt places a trusted-side helper (the gateway) in its own cgroups
// beside the sandbox's (gatewaycg_linux.go).
func (a *attachedSandbox) Adopt(pid int) error {
	return cgroup.Open(a.p.layout, GatewayGroup(a.rec.ID)).AddProc(pid)
}

func (a *attachedSandbox) notHere(op string) error {
	return failure.Failf(failure.KindUsage, op, "sandbox %s was attached after a restart: %s belongs to the process that spawned it", a.rec.ID, op)
}

func (a *attachedSandbox) Start(context.Context) (sandbox.Admission, error) {
	return sandbox.Admission{}, a.notHere("start")
}
func (a *attachedSandbox) Exec(context.Context) error { return a.notHere("exec") }
func (a *attachedSandbox) Wait(context.Context) (sandbox.Exit, error) {
	return sandbox.Exit{}, a.notHere("wait")
}
func (a *attachedSandbox) WaitMain(context.Context) (sandbox.Exit, error) {
	return sandbox.Exit{}, a.notHere("wait for the main program")
}

// ExecProcess is linuxSandbox.ExecProcess for an attached sandbox.
func (a *attachedSandbox) ExecProcess(ctx context.Context, argv, env []string, dir string, stdio [3]*os.File) (sandbox.Process, error) {
	p, _, err := execProcess(ctx, a.p.runSockPath(a.rec.ID), argv, mergeEnv(env), dir, stdio, nil)
	return asProcess(p, err)
}

// ExecProcessTerminal is linuxSandbox.ExecProcessTerminal for an attached
// sandbox.
func (a *attachedSandbox) ExecProcessTerminal(ctx context.Context, argv, env []string, dir string, stdio [3]*os.File, t sandbox.Terminal) (sandbox.Process, *os.File, error) {
	return execTerminal(ctx, a.p.runSockPath(a.rec.ID), argv, mergeEnv(env), dir, stdio, t)
}

// Signal sends sig to the init (through its pidfd: never a reused pid),
// which forwards it to the main program while that runs.
func (a *attachedSandbox) Signal(sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pidfd >= 0 {
		_ = unix.PidfdSendSignal(a.pidfd, sig, nil, 0)
	}
}

// Stop kills the init (which ends the PID namespace) and everything in
// the sandbox's cgroups, then waits until the init has exited. It is not
// this process's child: its pidfd becomes readable when it exits.
func (a *attachedSandbox) Stop(ctx context.Context) error {
	a.Signal(unix.SIGKILL)
	var errs []error
	if err := a.cg.Kill(); err != nil {
		errs = append(errs, err)
	}
	a.mu.Lock()
	fd := a.pidfd
	a.mu.Unlock()
	if fd < 0 {
		return errors.Join(errs...)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 50)
		if err == nil && n > 0 {
			return errors.Join(errs...)
		}
		if err != nil && err != unix.EINTR {
			// No poll on pidfds: watch /proc instead.
			if st, start, err := procStat(a.pid); err != nil || start != a.start || st == 'Z' || st == 'X' {
				return errors.Join(errs...)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if ctx.Err() != nil {
			return errors.Join(append(errs, ctx.Err())...)
		}
		if time.Now().After(deadline) {
			return errors.Join(append(errs, failure.Failf(failure.KindInternal, "stop", "the sandbox init (pid %d) did not exit after SIGKILL", a.pid))...)
		}
	}
}

// Deprovision stops the sandbox, removes its cgroups and exec socket,
// deletes its record (releasing the lease) and the lease lock. Idempotent.
func (a *attachedSandbox) Deprovision(ctx context.Context) error {
	a.mu.Lock()
	if a.deprov {
		a.mu.Unlock()
		return nil
	}
	a.deprov = true
	a.mu.Unlock()
	if a.unwatch != nil {
		close(a.unwatch)
	}
	var errs []error
	if err := a.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	a.mu.Lock()
	if a.pidfd >= 0 {
		unix.Close(a.pidfd)
		a.pidfd = -1
	}
	a.mu.Unlock()
	if err := a.cg.Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove cgroups: %w", err))
	}
	if err := cgroup.Open(a.p.layout, GatewayGroup(a.rec.ID)).Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove gateway cgroups: %w", err))
	}
	if err := os.Remove(a.p.runSockPath(a.rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.p.opts.Logger.Warn("remove exec socket", "err", err)
	}
	if len(errs) == 0 {
		if err := a.p.opts.Store.Finish(ctx, a.rec.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, fmt.Errorf("release lease: %w", err))
		}
	}
	a.lock.release()
	a.p.releaseHandle(a.rec.ID, a.handle)
	return errors.Join(errs...)
}
