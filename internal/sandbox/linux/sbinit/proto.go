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
)

// MaxMessage bounds one control message.
const MaxMessage = 1 << 20

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
	// TestSkip names hardening layers to leave out; honoured only in test
	// builds (build tag cordon_testhooks), for positive controls.
	TestSkip []string `json:"test_skip,omitempty"`
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
	Type string `json:"type"` // "ready", "go", "started", "exit", "error", "signal"

	// ready: hints only; the trusted side verifies everything itself.
	LandlockABI int `json:"landlock_abi,omitempty"`
	// Timings are the init's own step durations in microseconds (for the
	// benchmark's per-phase breakdown; not evidence).
	Timings map[string]int64 `json:"timings,omitempty"`

	// started
	Pid int `json:"pid,omitempty"`

	// exit
	Code   int `json:"code,omitempty"`
	Signal int `json:"signal,omitempty"`

	// error: Step names the failing step; Errno is set for exec failures.
	Step  string `json:"step,omitempty"`
	Error string `json:"error,omitempty"`
	Errno int    `json:"errno,omitempty"`
}
