package sbinit

// Argv0 is the argv[0] that makes the cordon binary act as the sandbox init.
const Argv0 = "cordon-sandbox-init"

// Env is the init's whole environment. One processor keeps the Go runtime
// to few threads, and every hardening step that is per thread has to
// visit each of them. The program's environment is Config.Env, not this.
var Env = []string{"GOMAXPROCS=1"}

// HoldArgv0 makes the binary hold a user namespace open for the trusted
// side (idmapped mounts) until its stdin closes.
const HoldArgv0 = "cordon-userns-hold"

// Fixed file descriptors handed to the init.
const (
	ControlFD = 3 // SOCK_SEQPACKET to the trusted side
	// FirstTreeFD is the first of the detached mount trees (open_tree) the
	// trusted side prepared: the rootfs and user binds, already read-only or
	// idmapped as declared. Bind.FD names one of them.
	FirstTreeFD = 4
	// Daemon mode: the exec listener and the lease lock follow the trees;
	// Config.ExecFD and Config.LeaseLockFD name them, as Bind.FD names a
	// tree.
)

// MaxMessage bounds one control message.
const MaxMessage = 1 << 20

// The exec channel (daemon mode). The trusted side creates a listening
// AF_UNIX SOCK_SEQPACKET socket on the host, in a root-only directory the
// sandbox cannot see, and hands the init the listening descriptor
// (Config.ExecFD). Each connection carries one exec:
//
//	→ {"type":"exec","argv":[...],"env":[...],"dir":"...","pty":{...}} + exactly 3 fds (SCM_RIGHTS: stdin, stdout, stderr)
//	← {"type":"started","pid":N}  or  {"type":"error","step":"exec","error":"...","errno":N}
//	  (with "pty": {"type":"started","pid":N,"tty":true} + exactly 1 fd, the pty master)
//	→ {"type":"signal","signal":N}          (any number, while it runs)
//	← {"type":"exit","code":C} or {"type":"exit","signal":S}  (code 0 is sent as {"type":"exit"})
//
// The init starts the process from its main thread, the thread every
// hardening step was applied to, exactly as it starts the main program:
// in its own session, with the same credentials, capability sets,
// no_new_privs, Landlock domain, seccomp filter, rlimits, cgroups and
// namespaces. Closing the connection does not kill the process: it runs
// on, unwatched, until it ends or the sandbox is stopped.
//
// With "pty" (a Tty) the init opens a pseudo-terminal of the sandbox's own
// devpts for this one process, exactly as for the main program: the
// descriptors the Tty names are the slave (the ones sent for them are
// closed unused), the slave is the process's controlling terminal, and
// the master goes back with "started" and is closed in the init.
const (
	// MaxExecs bounds the exec connections served at once; one more is
	// answered with an EAGAIN error and closed.
	MaxExecs = 64
	// MaxExecMessage bounds one message on an exec connection (below
	// MaxMessage, and below the default socket send buffer, so any request
	// a client can send in one datagram fits).
	MaxExecMessage = 128 << 10
)

// Bind is a host path bound into the new root.
type Bind struct {
	// Source is a host path bound by the init (base layout entries only);
	// FD, when non-zero, is a detached tree moved into place instead.
	Source string `json:"source,omitempty"`
	FD     int    `json:"fd,omitempty"`
	// Tmpfs makes Target a private scratch tmpfs of Config.TmpBytes owned
	// by the program's uid (its HOME).
	Tmpfs    bool   `json:"tmpfs,omitempty"`
	Target   string `json:"target"`
	Writable bool   `json:"writable,omitempty"`
	// Bytes and Mode, with Tmpfs, are the tmpfs's size (0:
	// Config.TmpBytes) and mode (0: 0700).
	Bytes int64  `json:"bytes,omitempty"`
	Mode  uint32 `json:"mode,omitempty"`
	// Optional skips a source that does not exist (base layout entries).
	Optional bool `json:"optional,omitempty"`
}

// Symlink is created in the new root (merged-usr layouts: /bin -> usr/bin).
type Symlink struct {
	Target string `json:"target"`
	Path   string `json:"path"`
}

// Config is everything the init needs, sent once by the trusted side after
// it has placed the init in its cgroups.
type Config struct {
	MountDir string            `json:"mount_dir"` // empty host dir to build the root on
	Hostname string            `json:"hostname"`
	UID      int               `json:"uid"` // uid/gid the program runs as inside
	GID      int               `json:"gid"`
	RootfsFD int               `json:"rootfs_fd,omitempty"` // detached tree of an explicit read-only root
	Binds    []Bind            `json:"binds"`
	Symlinks []Symlink         `json:"symlinks,omitempty"`
	EtcFiles map[string]string `json:"etc_files,omitempty"` // synthesized /etc: name -> content
	TmpBytes int64             `json:"tmp_bytes"`
	NoFile   uint64            `json:"nofile"`
	FSize    uint64            `json:"fsize"`
	Seccomp  []byte            `json:"seccomp"` // struct sock_filter array
	// WritablePaths are the only paths Landlock lets the program write under.
	WritablePaths []string `json:"writable_paths"`
	Argv          []string `json:"argv"`
	Env           []string `json:"env"`
	Dir           string   `json:"dir"`
	// UserLimits are written to /proc/sys/user/<name> in the sandbox's
	// user namespace before the init drops its capabilities: per-uid
	// bounds on the kernel's per-user counters (inotify, fanotify,
	// namespace counts) inside the sandbox. Names are bare file names.
	UserLimits map[string]uint64 `json:"user_limits,omitempty"`
	// TestSkip names hardening layers to leave out; honoured only in test
	// builds (build tag cordon_testhooks), for positive controls.
	TestSkip []string `json:"test_skip,omitempty"`
	// Daemon: the sandbox outlives the process that spawned it (a host
	// daemon). The init arms no parent-death signal, Argv may be empty (an
	// idle sandbox), the init outlives the main program (it reports its
	// exit and keeps serving execs) and it serves the exec channel.
	Daemon bool `json:"daemon,omitempty"`
	// ExecFD is the listening exec socket (daemon or Execs mode only), 0
	// for none.
	ExecFD int `json:"exec_fd,omitempty"`
	// LeaseLockFD (daemon mode only) is the trusted side's locked
	// descriptor of the host-wide lease lock file. The init only keeps it
	// open (close-on-exec, never passed on), so the UID/GID range stays
	// claimed for as long as the sandbox lives, whether or not its
	// daemon runs.
	LeaseLockFD int `json:"lease_lock_fd,omitempty"`
	// Execs (never with Daemon) makes a standalone sandbox's init serve
	// the exec channel (ExecFD) as a daemon-mode one does, while it keeps
	// its parent-death signal and holds no lease lock (its spawner holds
	// the lease, as for any standalone run), and end, like a standalone
	// init, when the main program ends: every process in it dies with it.
	Execs bool `json:"execs,omitempty"`
	// Tty, when set, makes the init run the program on a pseudo-terminal
	// of the sandbox's own devpts instance (see Tty). Not in daemon mode
	// (there an exec asks for one: Message.Pty).
	Tty *Tty `json:"tty,omitempty"`
	// TtyAtStart (with Tty) makes the init open the program's
	// pseudo-terminal before it reports ready, after every hardening step
	// and the in-situ attempts, and send its master at once in a
	// "console" message (SCM_RIGHTS, exactly one descriptor), closing it
	// before it sends "ready": the trusted side holds the console before
	// the program starts, and the master is provably gone from the init
	// when "ready" arrives. The init keeps only the slave (close-on-exec)
	// until "go", for the program; "started" then carries no descriptor.
	TtyAtStart bool `json:"tty_at_start,omitempty"`
	// Image is image mode (cordon oci, see image_linux.go): the explicit
	// root is an OCI image's, every mount point in it is resolved without
	// following a symlink (and created, when missing, only in a writable
	// root), and RootWritable leaves the root read-write.
	Image        bool `json:"image,omitempty"`
	RootWritable bool `json:"root_writable,omitempty"`
	// MemProbe makes the init leave the /proc/1/mem probe for the trusted
	// side (memprobe_linux.go): set when the program is the namespace's
	// root, whose ids the non-dumpable init's /proc files also carry.
	MemProbe bool `json:"mem_probe,omitempty"`
	// Groups are the program's supplementary groups inside (empty: none).
	Groups []int `json:"groups,omitempty"`
	// Rlimits are applied after the provider's own (NoFile, FSize, core
	// 0), already clamped by the trusted side: they only lower.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// InSitu, when set, makes the init attempt the in-situ set
	// (insitu_linux.go) after hardening, before it reports ready. Nil
	// attempts nothing (the trusted side then records no in-situ checks).
	InSitu *InSitu `json:"in_situ,omitempty"`
	// EngineNet: the init was spawned into a network namespace an engine
	// made (sandbox.Spec.EngineNet), owned by the host's user namespace:
	// it holds no capability there and leaves the interfaces as the
	// engine configured them (no loopback change).
	EngineNet bool `json:"engine_net,omitempty"`
}

// Rlimit is one resource limit the init sets (RLIMIT_* number).
type Rlimit struct {
	Type int    `json:"type"`
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// InSitu is what the trusted side opened for the in-situ attempts: each
// attempt leaves a trace only the host can read (a file under the
// sandbox's root, an accept on a host listener, a descriptor or a socket
// of the init seen in /proc), and none of them blocks or sends traffic
// anywhere but the sandbox's own loopback.
type InSitu struct {
	// Full adds the longer set (kernel objects that need more of the
	// kernel: bpf, perf events, a mount over the probe dir).
	Full bool `json:"full,omitempty"`
	// Abstract is the name (without the leading NUL) of an abstract Unix
	// socket the trusted side listens on in the host's network namespace.
	Abstract string `json:"abstract"`
	// Port is a TCP port the trusted side listens on at the host's
	// 127.0.0.1.
	Port int `json:"port"`
}

// The in-situ set's fixed names.
const (
	// InSituWrite, in ProbeDir, is written after seccomp: must not exist.
	InSituWrite = "insitu-write"
	// InSituControl is the same write in a writable scratch path: must
	// exist while the trusted side judges; removed at "go".
	InSituControl = "/tmp/.cordon-insitu-control"
	// InSituRoute is a non-loopback address (TEST-NET-1, RFC 5737) the
	// init connects a UDP socket to: a UDP connect sends nothing, it only
	// looks up a route, which the sandbox's empty namespace must not have.
	InSituRoute = "192.0.2.1"
	// InSituPort is the UDP port of the route attempt and of its loopback
	// control (the discard port; nothing is sent).
	InSituPort = 9
)

// Tty asks the init for a pseudo-terminal. The init opens the sandbox's
// /dev/ptmx (its private devpts, bounded by MaxPtys: never the host's
// pty pool), unlocks it, sets the window size, opens the slave with
// TIOCGPTPEER and starts the program in a new session with the slave as
// its controlling terminal. Each of the program's descriptors 0, 1 and 2
// is the slave when the matching field is true, else the init's own
// descriptor as without a terminal. The master goes to the trusted side
// with the "started" message (SCM_RIGHTS, exactly one descriptor) and is
// closed in the init: it never stays in the sandbox.
type Tty struct {
	Stdin  bool   `json:"stdin,omitempty"`
	Stdout bool   `json:"stdout,omitempty"`
	Stderr bool   `json:"stderr,omitempty"`
	Rows   uint16 `json:"rows,omitempty"`
	Cols   uint16 `json:"cols,omitempty"`
}

// ProbeDir is where the init runs the Landlock probe: a tiny tmpfs writable
// by the program's uid, outside every Landlock-writable path.
const ProbeDir = "/dev/.cordon-probe"

// Probe file names inside ProbeDir.
const (
	ProbeControl = "control" // written after setuid, before Landlock: must exist
	ProbeDenied  = "denied"  // attempted after Landlock: must not exist
)

// Message is one control message; exactly one field group is set.
type Message struct {
	Type string `json:"type"` // "console", "ready", "go", "started", "exit", "error", "signal", "exec"

	// ready: hints only; the trusted side verifies everything itself.
	LandlockABI int `json:"landlock_abi,omitempty"`
	// Timings are the init's own step durations in microseconds (for the
	// benchmark's per-phase breakdown; not evidence).
	Timings map[string]int64 `json:"timings,omitempty"`

	// started (0 in daemon mode when there is no main program). With
	// Config.Tty the message carries the pty master (SCM_RIGHTS) and Tty
	// is true — unless Config.TtyAtStart, where "console" carried it
	// before "ready" (Tty true there); no other message carries a
	// descriptor.
	Pid int  `json:"pid,omitempty"`
	Tty bool `json:"tty,omitempty"`

	// exit; signal: Signal is the signal to send
	Code   int `json:"code,omitempty"`
	Signal int `json:"signal,omitempty"`

	// exec (daemon mode, on the exec channel): an empty Env means the main
	// program's environment, an empty Dir its working directory.
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// Pty (exec only) asks for a pseudo-terminal for the process; the
	// "started" answer then carries its master and Tty is true.
	Pty *Tty `json:"pty,omitempty"`

	// error: Step names the failing step; Errno is set for exec failures.
	Step  string `json:"step,omitempty"`
	Error string `json:"error,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// MaxPtys bounds the sandbox's private devpts instance. kernel.pty.max
// counts every instance on the host (all but pty.reserve of it is shared
// by the non-initial instances, one per sandbox): without a per-instance
// max one sandbox could take every pty the other sandboxes may get.
const MaxPtys = 64
