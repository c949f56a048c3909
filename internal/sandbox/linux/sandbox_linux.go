package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/sandbox/linux/filter"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/store"
)

// readyTimeout bounds how long the init may take to build the boundary.
const readyTimeout = 30 * time.Second

type tree struct {
	fd       int
	target   string
	writable bool
}

// event is a control message from the init, or the end of the channel.
type event struct {
	msg sbinit.Message
	fds []*os.File // descriptors sent with msg (only "started" with a terminal)
	err error
}

type linuxSandbox struct {
	p    *Provider
	spec sandbox.Spec
	rec  store.Record

	recorded bool
	lock     *leaseLock // host-wide claim on the lease, held until the record is gone
	handle   *leaseLock // daemon mode: this process's claim on the sandbox (run/<id>.lock)
	binds    []*hostPath
	rootfs   *hostPath
	idm      *idmapper
	trees    []tree
	rootTree int
	// rootOverlay: an image's root is an engine's overlay, read once
	// from the mount table (readEngineOverlay); the sandbox's root is
	// then cordon's overlay of its layers (overlay_linux.go). nil
	// otherwise.
	rootOverlay *overlayOpts
	cg          *cgroup.Group
	gwcg        *cgroup.Group // the gateway's group, beside cg (gatewaycg_linux.go)
	cfg         sbinit.Config
	prog        *filter.Program
	tcpBytes    int64 // the v1 TCP socket-buffer limit (cgroup.Limits.TCPBytes)
	tcpOver     bool  // watchTCP ended the sandbox: its socket memory passed the limit

	cmd     *exec.Cmd
	v1Home  []string // the v1 tasks files the spawning thread came from
	netHome *os.File // the spawning thread's own network namespace, with Spec.EngineNet
	ctl     *os.File
	events  chan event
	done    chan struct{} // closed when the init has exited
	state   *os.ProcessState

	// Daemon mode (see daemon_linux.go).
	mainDone  chan struct{} // closed when the init reported the main program's exit
	mainOnce  sync.Once
	initStart uint64 // field 22 of /proc/<init>/stat, read at spawn

	phases     []Phase
	spawnSteps []Phase // set by the spawning goroutine before it reports

	mu       sync.Mutex
	running  bool // the init said "started": it serves execs (daemon mode)
	timedOut bool
	exit     *sbinit.Message
	master   *os.File // the program's pty master (Spec.Terminal), until Master
	deprov   bool
	created  time.Time
}

var _ sandbox.Sandbox = (*linuxSandbox)(nil)

func (sb *linuxSandbox) ID() string { return sb.spec.ID }

// Lease is the UID/GID range leased for the sandbox.
func (sb *linuxSandbox) Lease() sandbox.Lease { return leaseOf(sb.rec.Lease) }

// leaseOf is a store lease as the seam names it.
func leaseOf(l store.Lease) sandbox.Lease {
	return sandbox.Lease{UID: l.UID, GID: l.GID, Size: l.Size}
}

// HelperFacts reads the sandbox's gateway cgroup back.
func (sb *linuxSandbox) HelperFacts() (sandbox.HelperFacts, error) {
	return sb.p.helperFacts(sb.spec.ID)
}

// Adopt places a trusted-side helper process (the gateway) in the
// gateway's own cgroups beside the sandbox's: bounded (an agent cannot
// make its gateway exhaust the host), but never a candidate of the
// sandbox's OOM killer (gatewaycg_linux.go).
func (sb *linuxSandbox) Adopt(pid int) error {
	if testHooks && slices.Contains(sb.p.opts.TestSkip, "gateway-cgroup") && sb.cg != nil {
		return sb.cg.AddProc(pid) // positive control of the gateway's own group
	}
	if sb.gwcg == nil {
		return fmt.Errorf("adopt %d: the sandbox has no gateway cgroups", pid)
	}
	return sb.gwcg.AddProc(pid)
}

// InitPid is the host pid of the sandbox init, 0 before Start.
func (sb *linuxSandbox) InitPid() int {
	if sb.cmd == nil || sb.cmd.Process == nil {
		return 0
	}
	return sb.cmd.Process.Pid
}

func (sb *linuxSandbox) hostname() string { return "cordon-" + sb.spec.ID[:8] }

// buildConfig assembles the init's configuration and the evidence inputs.
func (sb *linuxSandbox) buildConfig() (sbinit.Config, evidence.Inputs, error) {
	prog, err := seccompFor(sb.p.opts.StateDir, sb.p.opts.CordonSHA256)
	if err != nil {
		return sbinit.Config{}, evidence.Inputs{}, failure.Fail(failure.KindUnsupported, "seccomp", err)
	}
	sb.prog = prog
	// The init builds the new root on this empty directory, in its own
	// mount namespace. It runs as its namespace's root, which is no host
	// uid, so the path must be traversable: the state dir is 0711 (its
	// files stay 0600) and this dir is empty.
	mountDir := filepath.Join(sb.p.opts.StateDir, "mnt")
	if err := os.MkdirAll(mountDir, 0o755); err != nil {
		return sbinit.Config{}, evidence.Inputs{}, failure.Fail(failure.KindProvision, "mount dir", err)
	}
	if err := os.Chmod(sb.p.opts.StateDir, 0o711); err != nil {
		return sbinit.Config{}, evidence.Inputs{}, failure.Fail(failure.KindProvision, "state dir mode", err)
	}
	nofile, fsize := providerRlimits()
	cfg := sbinit.Config{
		MountDir: mountDir, Hostname: sb.hostname(), UID: sandboxUID, GID: sandboxGID,
		TmpBytes: sb.spec.Limits.TmpBytes, NoFile: nofile, FSize: fsize,
		Seccomp: prog.Raw, Argv: sb.spec.Argv, Env: mergeEnv(sb.spec.Env), Dir: sandboxHome,
		TestSkip: sb.p.opts.TestSkip, UserLimits: presentUserLimits(), Tty: ttyConfig(sb.spec.Terminal),
	}
	img := sb.spec.Image
	mounts := []string{"/", "/proc", "/dev", "/dev/pts", "/dev/shm", sbinit.ProbeDir, "/tmp"}
	if img == nil {
		mounts = append(mounts, sandboxHome)
	}
	var masks []evidence.MaskedPath
	for _, m := range sbinit.Masks {
		mounts = append(mounts, m.Path)
		masks = append(masks, evidence.MaskedPath{Path: m.Path, Kind: string(m.Kind)})
	}
	writable := []string{"/proc", "/dev/pts", "/dev/shm", sbinit.ProbeDir, "/tmp"}
	if img == nil {
		writable = append(writable, sandboxHome)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		mounts = append(mounts, "/dev/"+n)
		writable = append(writable, "/dev/"+n)
	}
	fd := sbinit.FirstTreeFD
	if sb.rootfs != nil {
		cfg.RootfsFD = fd
		fd++
	} else {
		cfg.EtcFiles = etcFiles(cfg.Hostname)
		binds, links := hostBaseBinds(os.Readlink, func(p string) bool { fi, err := os.Stat(p); return err == nil && fi.IsDir() })
		for _, b := range binds {
			if _, err := os.Stat(b.Source); err == nil {
				mounts = append(mounts, b.Target)
			}
		}
		cfg.Binds, cfg.Symlinks = binds, links
	}
	// HOME is its own bounded scratch tmpfs, mounted by the init (not in
	// image mode: the image brings its own).
	cfg.WritablePaths = []string{"/tmp"}
	if img == nil {
		cfg.Binds = append(cfg.Binds, sbinit.Bind{Target: sandboxHome, Tmpfs: true})
		cfg.WritablePaths = append(cfg.WritablePaths, sandboxHome)
	}
	for _, t := range sb.trees {
		cfg.Binds = append(cfg.Binds, sbinit.Bind{FD: fd, Target: t.target, Writable: t.writable})
		fd++
		mounts = append(mounts, t.target)
		if t.writable {
			writable = append(writable, t.target)
			cfg.WritablePaths = append(cfg.WritablePaths, t.target)
		}
	}
	if sb.spec.Workspace != "" || sb.spec.WorkspaceFile != nil {
		cfg.Dir = "/workspace"
	}
	sb.modeConfig(&cfg, fd)
	in := evidence.Inputs{
		LeaseUID: sb.rec.Lease.UID, LeaseGID: sb.rec.Lease.GID, LeaseSize: sb.rec.Lease.Size,
		UID: sandboxUID, GID: sandboxGID, MountTargets: mounts, WritableTargets: writable,
		NoFile: nofile, FSize: fsize, ProbeDir: sbinit.ProbeDir,
		ProbeControl: sbinit.ProbeControl, Probe: sbinit.ProbeDenied, Hostname: cfg.Hostname,
		CgroupPaths: map[string]string{}, InitEnv: sbinit.Env, Masks: masks, UserLimits: cfg.UserLimits,
		PtyMax: sbinit.MaxPtys,
	}
	if img != nil {
		if err := sb.imageConfig(&cfg, &in); err != nil {
			return sbinit.Config{}, evidence.Inputs{}, err
		}
	}
	sb.cgroupPaths(in.CgroupPaths)
	sb.engineNetConfig(&cfg)
	return cfg, in, nil
}

// cgroupPaths fills paths: seen from the host's cgroup namespace, the init
// must sit in the sandbox's own group in every hierarchy cordon uses.
func (sb *linuxSandbox) cgroupPaths(paths map[string]string) {
	own := "/" + cgroup.Prefix + "/" + sb.spec.ID
	for ctl, m := range sb.p.layout.Mounts {
		key := string(ctl)
		if m.Version == 2 {
			key = ""
		}
		paths[key] = own
	}
	if sb.p.layout.Unified != "" {
		paths[""] = own
	}
}

// Phase is how long one step of Start took (for --trace and benchmarks).
type Phase = sandbox.Phase

func (sb *linuxSandbox) mark(name string) {
	now := time.Now()
	prev := sb.created
	for _, p := range sb.phases {
		if !p.Nested {
			prev = prev.Add(p.Dur)
		}
	}
	sb.phases = append(sb.phases, Phase{Name: name, Dur: now.Sub(prev)})
}

// Phases returns the timed steps of Start.
func (sb *linuxSandbox) Phases() []Phase { return sb.phases }

// Start spawns the init in new namespaces inside the sandbox's cgroups,
// sends it its configuration, waits until it has hardened itself, then
// reads the evidence and admits a level. The program has not started.
func (sb *linuxSandbox) Start(ctx context.Context) (sandbox.Admission, error) {
	sb.created = time.Now()
	cfg, in, err := sb.buildConfig()
	if err != nil {
		return sandbox.Admission{}, err
	}
	// The in-situ set's host listeners, opened here, on a goroutine in the
	// host's network namespace, and closed once judged.
	ins, err := evidence.OpenInSitu(sb.spec.InSitu == sandbox.InSituFull)
	if err != nil {
		return sandbox.Admission{}, failure.Fail(failure.KindStart, "in-situ set", err)
	}
	defer ins.Close()
	cfg.InSitu = &sbinit.InSitu{Full: ins.Full, Abstract: ins.Abstract, Port: ins.Port}
	sb.cfg = cfg
	sb.mark("config")
	if err := sb.spawn(); err != nil {
		return sandbox.Admission{}, err
	}
	sb.mark("spawn")
	sb.phases = append(sb.phases, sb.spawnSteps...)
	b, _ := json.Marshal(cfg)
	if _, err := sb.ctl.Write(b); err != nil {
		return sandbox.Admission{}, failure.Fail(failure.KindStart, "send config", err)
	}
	if cfg.TtyAtStart {
		if err := sb.receiveConsole(ctx); err != nil {
			return sandbox.Admission{}, err
		}
	}
	m, err := sb.next(ctx, readyTimeout)
	if err != nil {
		return sandbox.Admission{}, failure.Fail(failure.KindStart, "wait for init", err)
	}
	if m.Type != "ready" {
		return sandbox.Admission{}, initFailure(m)
	}
	sb.mark("init")
	for _, k := range []string{"root", "namespaces", "masks", "rlimits_bounding", "creds_nnp", "landlock", "seccomp", "insitu"} {
		if v, ok := m.Timings[k]; ok {
			sb.phases = append(sb.phases, Phase{Name: "init." + k, Dur: time.Duration(v) * time.Microsecond, Nested: true})
		}
	}
	in.Pid = sb.cmd.Process.Pid
	rec := sb.evidence(in)
	sb.mark("evidence")
	sb.judgeInSitu(rec, ins, m.Timings["insitu"])
	sb.mark("insitu")
	adm := sandbox.Admission{Level: rec.LevelAdmitted, Verified: rec.EnforcementMode == evidence.Verified, Record: rec}
	return adm, nil
}

func initFailure(m sbinit.Message) error {
	switch m.Type {
	case "error":
		return failure.Failf(failure.KindStart, "sandbox init", "%s: %s", m.Step, m.Error)
	default:
		return failure.Failf(failure.KindStart, "sandbox init", "unexpected message %q", m.Type)
	}
}

func (sb *linuxSandbox) exitText() string {
	select {
	case <-sb.done:
		if sb.state != nil {
			return sb.state.String()
		}
	default:
	}
	return "running"
}

// spawn starts the init. The spawning goroutine is locked to its OS thread
// for the init's whole life: the parent-death signal fires when the thread
// that forked exits (golang/go#27505). Before the fork the thread joins the
// sandbox's v1 cgroups (v1 moves single threads), so the init is born in
// them and its cgroup namespace is rooted there; on v2 clone3 places it
// with CLONE_INTO_CGROUP. For the clone the thread's effective uid is the
// lease's (asLeaseOwner): the lease owns the sandbox's user namespace, and
// the other namespaces, created by the same clone, belong to that user
// namespace.
func (sb *linuxSandbox) spawn() error {
	daemon := sb.p.opts.Daemon
	var ln, leaseFile *os.File // the exec listener (daemon or Execs mode) and the lease lock (daemon mode)
	var err error
	switch {
	case daemon:
		ln, leaseFile, err = sb.daemonFiles()
	case sb.spec.Execs:
		ln, err = sb.listenExec()
	}
	if err != nil {
		return err
	}
	child, extra, err := sb.initFiles()
	if err != nil {
		for _, f := range []*os.File{ln, leaseFile} {
			if f != nil {
				f.Close()
			}
		}
		return err
	}
	attr := sb.initAttr()
	sb.netAttr(attr)
	if daemon {
		// The sandbox outlives this process by design; the init arms none
		// either (sbinit.Config.Daemon).
		attr.Pdeathsig = 0
		// After the trees, where buildConfig told the init to find them.
		extra = append(extra, ln, leaseFile)
	} else if ln != nil {
		extra = append(extra, ln)
	}
	if fd, err := sb.cg.UnifiedFD(); err == nil && fd >= 0 {
		attr.UseCgroupFD = true
		attr.CgroupFD = fd
		defer unix.Close(fd)
	}
	stdin, stdout, stderr := initStdio(sb.spec)
	sb.cmd = &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{sbinit.Argv0}, Env: sbinit.Env,
		Stdin: stdin, Stdout: stdout, Stderr: stderr, ExtraFiles: extra, SysProcAttr: attr,
	}
	started := make(chan error, 1)
	go sb.runInit(started)
	err = <-started
	child.Close()
	for _, f := range extra[1:] {
		f.Close()
	}
	sb.trees, sb.rootTree = nil, 0
	if err != nil {
		return failure.Fail(failure.KindStart, "spawn sandbox init", err)
	}
	if daemon {
		// The init is our unreaped child: its pid cannot have been reused.
		if sb.initStart, err = procStartTime(sb.cmd.Process.Pid); err != nil {
			return failure.Fail(failure.KindStart, "read the init's start time", err)
		}
	}
	return nil
}

// daemonFiles opens what a daemon-mode init is handed besides its control
// channel: a duplicate of the lease lock and the exec listener.
func (sb *linuxSandbox) daemonFiles() (ln, leaseFile *os.File, err error) {
	if sb.lock == nil {
		return nil, nil, failure.Failf(failure.KindInternal, "spawn", "daemon mode without a lease lock")
	}
	// The same open file description, so the init holds the very lock.
	lfd, err := unix.FcntlInt(uintptr(sb.lock.fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, nil, failure.Fail(failure.KindStart, "lease lock", err)
	}
	leaseFile = os.NewFile(uintptr(lfd), "lease-lock")
	if ln, err = sb.listenExec(); err != nil {
		leaseFile.Close()
		return nil, nil, err
	}
	return ln, leaseFile, nil
}

// initFiles opens the control socketpair, keeps this side in sb.ctl, and
// returns the child's end with the descriptors the init inherits in the
// order buildConfig told it: the control channel, the root tree (if any),
// then the bind trees.
func (sb *linuxSandbox) initFiles() (child *os.File, extra []*os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, failure.Fail(failure.KindStart, "socketpair", err)
	}
	sb.ctl = os.NewFile(uintptr(fds[0]), "cordon-ctl")
	child = os.NewFile(uintptr(fds[1]), "cordon-ctl-child")
	extra = []*os.File{child}
	if sb.rootTree > 0 {
		extra = append(extra, os.NewFile(uintptr(sb.rootTree), "rootfs"))
	}
	for _, t := range sb.trees {
		extra = append(extra, os.NewFile(uintptr(t.fd), t.target))
	}
	return child, extra, nil
}

// initAttr is the clone of the init: every namespace at once, the lease's
// ids mapped from 0, no supplementary groups (the caller's would otherwise
// stay in the child), and killed with the spawning thread.
func (sb *linuxSandbox) initAttr() *syscall.SysProcAttr {
	lease := sb.rec.Lease
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(lease.UID), Size: int(lease.Size)}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(lease.GID), Size: int(lease.Size)}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
		Pdeathsig:                  syscall.SIGKILL,
	}
}

// runInit is the spawning goroutine: it starts the init on its locked
// thread, reports the outcome on started, then waits for the init to exit
// and closes sb.done.
func (sb *linuxSandbox) runInit(started chan<- error) {
	runtime.LockOSThread()
	// Never unlocked: when this goroutine returns the thread exits,
	// which is only after the init is gone. The thread stays in the
	// sandbox's v1 pids and cpu groups until then (each cgroup move
	// costs an RCU grace period); it counts as one task against the
	// sandbox's pids limit, and cgroup.Kill never signals its caller.
	// (Daemon mode has no parent-death signal: once the init runs the
	// thread leaves the groups and is unlocked.)
	err := sb.startInit()
	started <- err
	if err != nil {
		sb.leaveIfMainThread()
		close(sb.done)
		return
	}
	if sb.p.opts.Daemon {
		// No parent-death signal ties the init to this thread: leave
		// the sandbox's groups and free the thread.
		if err := rejoin(sb.v1Home); err != nil {
			sb.p.opts.Logger.Warn("return spawning thread to its cgroups", "err", err)
		} else {
			runtime.UnlockOSThread()
		}
	}
	go sb.readControl()
	go sb.watchTCP()
	_ = sb.cmd.Wait()
	sb.state = sb.cmd.ProcessState
	sb.leaveIfMainThread()
	close(sb.done)
}

// startInit runs on the locked spawning thread: it joins the sandbox's v1
// groups, starts sb.cmd with the lease as owner of the new user namespace,
// and leaves the memory group again. It records the three steps' times in
// sb.spawnSteps.
func (sb *linuxSandbox) startInit() error {
	lease := sb.rec.Lease
	t0 := time.Now()
	if err := sb.joinEngineNet(); err != nil {
		return err
	}
	back, err := sb.joinV1()
	if err != nil {
		return err
	}
	t1 := time.Now()
	// The lease, not host root, owns the new user namespace.
	if sb.skip("userns-owner") {
		err = sb.cmd.Start()
	} else {
		err = asLeaseOwner(lease.UID, lease.GID, sb.cmd.Start)
	}
	if err != nil && sb.cmd.Process != nil {
		// Started, but this thread kept the lease's credentials.
		_ = sb.cmd.Process.Kill()
		_ = sb.cmd.Wait()
	}
	t2 := time.Now()
	// Leave the memory group at once: its OOM killer scans the
	// group's tasks, and this thread's mm is cordon's own.
	if rerr := rejoin(back); rerr != nil && err == nil {
		err = rerr
	}
	sb.spawnSteps = []Phase{{Name: "spawn.join_cgroups", Dur: t1.Sub(t0), Nested: true}, {Name: "spawn.clone_exec", Dur: t2.Sub(t1), Nested: true}, {Name: "spawn.leave_memory_cgroup", Dur: time.Since(t2), Nested: true}}
	return err
}

// skip reports whether a test build was asked to leave out layer.
func (sb *linuxSandbox) skip(layer string) bool {
	return testHooks && slices.Contains(sb.p.opts.TestSkip, layer)
}

// joinV1 moves the calling thread into the sandbox's v1 cgroups and
// returns the memory tasks file to move it back to.
func (sb *linuxSandbox) joinV1() ([]string, error) {
	tid := strconv.Itoa(unix.Gettid())
	mine, err := cgroup.ProcCgroups(os.Getpid())
	if err != nil {
		return nil, err
	}
	var back []string
	for ctl, m := range sb.p.layout.Mounts {
		if m.Version != 1 {
			continue
		}
		sb.v1Home = append(sb.v1Home, filepath.Join(m.Path, mine[string(ctl)], "tasks"))
		dst := filepath.Join(m.Path, cgroup.Prefix, sb.spec.ID, "tasks")
		if err := os.WriteFile(dst, []byte(tid), 0); err != nil {
			return nil, errors.Join(fmt.Errorf("move spawning thread into %s: %w", dst, err), rejoin(back))
		}
		if ctl == cgroup.Memory {
			back = append(back, filepath.Join(m.Path, mine[string(ctl)], "tasks"))
		}
	}
	return back, nil
}

// leaveIfMainThread moves the spawning thread back out of every v1 group
// it joined when it is the process's main thread. Go ends a thread whose
// locked goroutine returns, which takes it out of the groups, except the
// main thread, which it parks for good instead: left in the sandbox's
// groups, it would keep them from ever being removed (Deprovision fails
// with EBUSY and the record stays behind as residue).
func (sb *linuxSandbox) leaveIfMainThread() {
	sb.leaveEngineNet(unix.Gettid() == unix.Getpid())
	if unix.Gettid() == unix.Getpid() {
		if err := rejoin(sb.v1Home); err != nil {
			sb.p.opts.Logger.Warn("return main thread to its cgroups", "err", err)
		}
	}
}

func rejoin(files []string) error {
	tid := strconv.Itoa(unix.Gettid())
	var errs []error
	for _, f := range files {
		if err := os.WriteFile(f, []byte(tid), 0); err != nil {
			errs = append(errs, fmt.Errorf("return spawning thread to %s: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

// Exec starts the program: the init forks it in its own session. Exec
// failures come back as KindExec errors carrying the errno.
func (sb *linuxSandbox) Exec(ctx context.Context) error {
	b, _ := json.Marshal(sbinit.Message{Type: "go"})
	if _, err := sb.ctl.Write(b); err != nil {
		return failure.Fail(failure.KindStart, "start program", err)
	}
	m, fds, err := sb.nextFDs(ctx, readyTimeout)
	if err != nil {
		return failure.Fail(failure.KindStart, "start program", err)
	}
	if m.Type != "started" {
		closeAll(fds) // none: readControl passes descriptors only with started
	} else if err := sb.takeMaster(m, fds); err != nil {
		sb.kill()
		return failure.Fail(failure.KindStart, "start program", err)
	}
	switch m.Type {
	case "started":
		sb.mu.Lock()
		sb.running = true
		sb.mu.Unlock()
		sb.p.opts.Store.SetState(ctx, sb.spec.ID, "running")
		if t := sb.spec.Limits.Timeout; t > 0 {
			time.AfterFunc(t, sb.timeout)
		}
		return nil
	case "error":
		if m.Step == "pty" {
			// No terminal for the program: cordon failing, not the program.
			sb.kill()
			return failure.Failf(failure.KindStart, "terminal", "the sandbox could not give the program a pseudo-terminal: %s", m.Error)
		}
		return &ExecError{Errno: syscall.Errno(m.Errno), Msg: m.Error}
	default:
		return initFailure(m)
	}
}

// ExecError is an exec failure inside the sandbox (the seam's type).
type ExecError = sandbox.ExecError

func (sb *linuxSandbox) timeout() {
	sb.mu.Lock()
	select {
	case <-sb.done:
		sb.mu.Unlock()
		return
	default:
	}
	sb.timedOut = true
	sb.mu.Unlock()
	sb.Signal(syscall.SIGTERM)
	select {
	case <-sb.done:
	case <-time.After(time.Second):
		sb.kill()
	}
}

// Signal forwards sig to the program through the init.
func (sb *linuxSandbox) Signal(sig syscall.Signal) {
	if pid := sb.InitPid(); pid > 0 {
		select {
		case <-sb.done:
		default:
			_ = unix.Kill(pid, sig)
		}
	}
}

// kill ends the whole sandbox: SIGKILL to its PID 1 ends every process in
// the PID namespace; the cgroup kill catches anything that escaped it.
func (sb *linuxSandbox) kill() {
	if pid := sb.InitPid(); pid > 0 {
		select {
		case <-sb.done:
		default:
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	if sb.cg != nil {
		_ = sb.cg.Kill()
	}
}

// Wait waits for the program and the init to end and reports how. In
// daemon mode it is WaitMain: the init outlives the program.
func (sb *linuxSandbox) Wait(ctx context.Context) (sandbox.Exit, error) {
	if sb.p.opts.Daemon {
		return sb.WaitMain(ctx)
	}
	select {
	case <-sb.done:
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
	// Drain: readControl records the exit message.
	drainEvents(sb.events)
	return sb.exitStatus(), nil
}

// exitStatus reports how the program ended: its reported exit, or — the
// init itself ended without reporting (killed: timeout, OOM, stop; or
// crashed) — the init's own status.
func (sb *linuxSandbox) exitStatus() sandbox.Exit {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	ex := sandbox.Exit{TimedOut: sb.timedOut, SocketMemory: sb.tcpOver}
	ex.OOM = sb.tcpOver
	if sb.cg != nil {
		if n, err := sb.cg.OOMKills(); err == nil && n > 0 {
			ex.OOM = true
		}
	}
	switch {
	case sb.exit != nil:
		ex.Code, ex.Signal = sb.exit.Code, sb.exit.Signal
	case sb.state != nil:
		if ws, ok := sb.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Signal = int(ws.Signal())
		} else {
			ex.Code = sb.state.ExitCode()
		}
	}
	return ex
}

// Stop ends every process of the sandbox and waits for the init.
func (sb *linuxSandbox) Stop(ctx context.Context) error {
	sb.kill()
	if sb.cmd == nil || sb.cmd.Process == nil {
		return nil
	}
	select {
	case <-sb.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
		return failure.Failf(failure.KindInternal, "stop", "the sandbox init did not exit after SIGKILL")
	}
}

// Deprovision stops the sandbox, removes its cgroups, closes its fds and
// deletes the write-ahead record, which releases the lease. Idempotent.
func (sb *linuxSandbox) Deprovision(ctx context.Context) error {
	sb.mu.Lock()
	if sb.deprov {
		sb.mu.Unlock()
		return nil
	}
	sb.deprov = true
	sb.mu.Unlock()
	var errs []error
	if err := sb.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, h := range sb.binds {
		h.close()
	}
	if sb.rootfs != nil {
		sb.rootfs.close()
	}
	for _, t := range sb.trees {
		unix.Close(t.fd)
	}
	if sb.rootTree > 0 {
		unix.Close(sb.rootTree)
	}
	if sb.idm != nil {
		sb.idm.close()
	}
	if sb.ctl != nil {
		sb.ctl.Close()
	}
	if sb.cg != nil {
		if err := sb.cg.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroups: %w", err))
		}
	}
	if sb.gwcg != nil {
		if err := sb.gwcg.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("remove gateway cgroups: %w", err))
		}
	}
	if sb.servesExecs() {
		// Nothing listens on it any more (the init is gone).
		if err := os.Remove(sb.p.runSockPath(sb.spec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			sb.p.opts.Logger.Warn("remove exec socket", "err", err)
		}
	}
	if m := sb.Master(); m != nil {
		m.Close() // a terminal nobody took
	}
	defer sb.p.releaseHandle(sb.spec.ID, sb.handle)
	if sb.recorded && len(errs) == 0 {
		if err := sb.p.opts.Store.Finish(ctx, sb.spec.ID); err != nil {
			errs = append(errs, fmt.Errorf("release lease: %w", err))
		}
	}
	sb.lock.release()
	return errors.Join(errs...)
}
