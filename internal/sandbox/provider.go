package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// CapabilitySchema versions the capability descriptor.
const CapabilitySchema = "cordon.capability/v1"

// Capability is what a provider says it can do on this host, found by
// probing. It is a claim about the provider, not evidence about a sandbox.
type Capability struct {
	Schema   string `json:"schema"`
	Provider string `json:"provider"`
	Version  string `json:"version"`
	// MaxLevel is the highest level this provider could evidence here.
	MaxLevel Level `json:"max_level"`
	// Missing names host prerequisites that are absent; each lowers MaxLevel.
	Missing []string `json:"missing,omitempty"`
	// Features are host facts found while probing (kernel, cgroups, Landlock ABI…).
	Features map[string]string `json:"features,omitempty"`
}

// Bind is a host path made visible inside the sandbox.
type Bind struct {
	Source   string `json:"source"` // absolute host path ("" with File)
	Target   string `json:"target"` // absolute sandbox path
	Writable bool   `json:"writable"`
	// File, instead of Source, is the directory or file the caller
	// opened itself (the daemon gets it over SCM_RIGHTS): bound by this
	// descriptor, never by a path. The provider checks what it is as for
	// a path; the caller keeps and closes File.
	File *os.File `json:"-"`
	// ImageIDs: the source holds files with an image's ids (an engine's
	// volume, which the engine filled from the image): idmapped as an
	// image's root is — host id k is the sandbox's id k — and writable
	// whatever its owner. Image mode only; `cordon oci` sets it for
	// sources under a directory the host operator declared
	// (--volume-root), never from a bundle.
	ImageIDs bool `json:"image_ids,omitempty"`
	// VolumeRoot, with ImageIDs, is the directory the host operator
	// declared (--volume-root) that Source is strictly below. The
	// provider resolves Source beneath it, following no symlink and
	// crossing no mount: a source on a mount of its own below the root
	// (a local volume driver's bind of a host directory, a share) is not
	// known to hold the image's ids and is bound as any other bind is.
	VolumeRoot string `json:"volume_root,omitempty"`
}

// Limits bound the sandbox's resources. Zero means the provider default.
type Limits struct {
	MemoryBytes int64         `json:"memory_bytes"`
	Pids        int64         `json:"pids"`
	CPUs        float64       `json:"cpus"`
	TmpBytes    int64         `json:"tmp_bytes"`
	Timeout     time.Duration `json:"timeout"`
}

// Spec is a request for one sandbox running one program.
type Spec struct {
	ID        string
	Workload  string
	Argv      []string // argv only, never a shell string
	Env       []string // K=V, added to the sandbox defaults
	Workspace string   // host dir bound at /workspace, "" for none
	// WorkspaceFile, instead of Workspace, is a directory the caller
	// opened itself (the daemon gets it over SCM_RIGHTS): bound at
	// /workspace by this descriptor, never by a path.
	WorkspaceFile       *os.File
	UnsafeRootWorkspace bool
	Binds               []Bind
	Rootfs              string // explicit read-only root, "" for the synthesized base
	// RootfsFile, instead of Rootfs, is a root directory the caller
	// opened itself (the daemon's): bound by this descriptor.
	RootfsFile     *os.File
	Limits         Limits
	Level          Level // the claim that must be evidenced
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Terminal, when set, runs the program on a pseudo-terminal the
	// provider allocates inside the sandbox (see Terminal); nil runs it
	// on Stdin, Stdout and Stderr as they are.
	Terminal *Terminal
	// InSitu is the in-situ set the provider attempts at start and
	// judges from outside (InSituDefault when empty; InSituFull runs the
	// longer set). A provider that can attempt none records none, and
	// its record says so.
	InSitu string
	// Image, when set, runs the program as an OCI bundle describes it
	// (cordon oci): its identity, a writable root, its environment and
	// directory exactly as given, no synthesized home. nil: cordon run's
	// defaults (uid 1000, a read-only root, HOME on a scratch tmpfs).
	Image *Image
	// Execs makes a standalone sandbox serve ExecProcess (and
	// TerminalExecer) while its spawner lives, as a resident one does. It
	// still ends with its spawner (parent-death signal), its record is a
	// standalone run's (reclaimed once the spawner is provably gone), and
	// it ends when its main program ends: every process in it is killed.
	Execs bool
	// EngineNet, when set, is a network namespace an engine made for this
	// sandbox (a CRI pod's), which the host operator accepted in place of
	// the sandbox's own (cordon oci --engine-network=accept). The sandbox
	// joins it; its network boundary is then not verified (the evidence
	// names the namespace and what it holds), so the level admitted is at
	// most DEDICATED_RUNTIME. Only a launcher whose operator asked for it
	// sets it (cordon oci); cordon run never does. Refused in daemon mode.
	EngineNet *EngineNet
}

// EngineNet is an engine's network namespace a sandbox joins (Spec.EngineNet).
type EngineNet struct {
	// File is the namespace file, opened and checked by the launcher
	// (setns.OpenEngineNet); the provider checks it again and joins this
	// descriptor, never a path. The caller keeps and closes it.
	File *os.File
	// Path is where the engine named it (for the record).
	Path string
	// Reason is who accepted it and how, for the record (e.g. "the host
	// operator's --engine-network=accept").
	Reason string
}

// Image is what an OCI bundle's config.json asks of the program's
// environment (package oci maps it; the provider enforces it). Nothing
// here can widen the boundary: identities are inside the sandbox's own
// user namespace (uid 0 holds no capability), limits only lower, and
// mounts are scratch tmpfs.
type Image struct {
	// UID and GID are the program's identity inside the sandbox (0 is the
	// namespace's root, without capabilities); AdditionalGIDs its
	// supplementary groups. Each must be inside the leased range's size.
	UID, GID       uint32
	AdditionalGIDs []uint32
	// Writable mounts the explicit root (Spec.Rootfs or RootfsFile)
	// read-write, idmapped so that files the image's uid N owns are owned
	// by uid N inside the sandbox (and what the sandbox writes is stored
	// with the image's ids). Landlock then allows writes under the root's
	// own directories, never under /proc, /dev or /sys.
	Writable bool
	// Hostname is the sandbox's hostname ("" the provider's default).
	Hostname string
	// Dir is the working directory inside ("" is /).
	Dir string
	// Rlimits lower the sandbox's limits (never raise above the
	// provider's own).
	Rlimits []Rlimit
	// Tmpfs are scratch tmpfs mounts the program may write (docker
	// --tmpfs, /run), each bounded by Bytes (0: Limits.TmpBytes).
	Tmpfs []Tmpfs
	// TerminalAtStart, with Spec.Terminal, makes the pseudo-terminal's
	// master available right after Start (TerminalHolder.Master), before
	// Exec: an OCI runtime hands the console to the engine at create,
	// before start runs the program.
	TerminalAtStart bool
}

// Rlimit is one resource limit (RLIMIT_* number, soft and hard values).
type Rlimit struct {
	Type int    `json:"type"`
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// Tmpfs is a scratch tmpfs mount inside the sandbox.
type Tmpfs struct {
	Target string `json:"target"`
	Bytes  int64  `json:"bytes,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
}

// The in-situ sets (Spec.InSitu).
const (
	InSituDefault = "default"
	InSituFull    = "full"
)

// Terminal asks for a pseudo-terminal allocated inside the sandbox, its
// own (never one of the host's), as the program's controlling terminal.
// Stdin, Stdout and Stderr say which of the program's descriptors 0, 1
// and 2 are the terminal; the others stay Spec.Stdin, Spec.Stdout and
// Spec.Stderr. Rows and Cols are the initial window size (0: unset).
type Terminal struct {
	Stdin, Stdout, Stderr bool
	Rows, Cols            uint16
}

// TerminalHolder is a sandbox that can run its program on a terminal
// (Spec.Terminal). A caller that asked for a terminal type-asserts it and
// refuses when the sandbox is not one: there is no fallback to the host's
// terminal.
//
// Contract: after Exec returned nil for a Spec with Terminal set (with
// Image.TerminalAtStart: already after Start returned nil), Master
// returns the terminal's master side, checked by the provider to be a
// pseudo-terminal master and nothing else, and never left inside the
// sandbox. The caller owns it (reads the program's output, writes its
// input, sets its window size) and closes it; a second call returns nil.
// Reads fail with EIO once every process inside has closed the terminal.
// Before Exec (before Start with TerminalAtStart), or without Terminal,
// Master returns nil.
type TerminalHolder interface {
	Master() *os.File
}

// TerminalExecer is a resident sandbox whose execs can run on a
// pseudo-terminal of the sandbox's own, as Spec.Terminal does for the
// main program. ExecProcessTerminal is ExecProcess with t: the process's
// descriptors that t names are the terminal (stdio's entries for them are
// not used and may be nil) and it is the process's controlling terminal.
// It returns the terminal's master, checked by the provider to be a
// pseudo-terminal master and never left inside the sandbox; the caller
// owns it and closes it. A caller that asked for a terminal and holds a
// sandbox that is not a TerminalExecer refuses: there is no fallback to
// the caller's terminal.
type TerminalExecer interface {
	ExecProcessTerminal(ctx context.Context, argv, env []string, dir string, stdio [3]*os.File, t Terminal) (Process, *os.File, error)
}

// AllSignaler is a sandbox that can signal every process in it, not only
// its main program (Sandbox.Signal): what an OCI runtime's `kill --all`
// needs. SignalAll(SIGKILL) ends the whole sandbox, as Stop does without
// waiting; any other signal goes once to each process the provider finds
// in the sandbox from the host (its resource groups, never a list the
// sandbox reports), except the provider's own init. A process forked
// while the signals go out may miss it. Before Start it fails with
// failure.KindUsage; once the sandbox has ended it does nothing. A caller
// that needs it and holds a sandbox that is not one refuses.
type AllSignaler interface {
	SignalAll(sig syscall.Signal) error
}

// Admission is the outcome of evidence collection at start.
type Admission struct {
	Level    Level // highest level the evidence supports
	Verified bool  // all six boundaries verified
	// Record is the evidence record the trusted side read (nil only when
	// Start failed before any evidence was collected). Its LevelAdmitted
	// is the evidence; Level repeats it.
	Record *evidence.Record
}

// Exit is how the program ended.
type Exit struct {
	Code     int  // exit code when it exited normally
	Signal   int  // signal number when it was killed, else 0
	OOM      bool // the kernel's OOM killer acted in the sandbox
	TimedOut bool
	// SocketMemory: the trusted side ended the sandbox because its TCP
	// socket memory passed its bound (cgroup v1, where the kernel does
	// not); OOM is set too.
	SocketMemory bool
}

// Provider creates sandboxes on this host. Probe is cheap and side-effect
// free. A provider's methods are safe for concurrent use.
type Provider interface {
	Probe(ctx context.Context) (Capability, error)
	// Provision reserves what spec needs on the host (identity, resource
	// groups, the binds' descriptors) and runs nothing. The sandbox it
	// returns must be deprovisioned.
	Provision(ctx context.Context, spec Spec) (Sandbox, error)
	// Limits is spec's limits with this provider's defaults filled in:
	// what a sandbox of spec actually gets.
	Limits(spec Spec) Limits
}

// Resident is what a provider offers, beyond Provider, to host long-lived
// sandboxes (the daemon, package hostmgr): sandboxes that outlive the
// process that made them and are found again after it restarts. The
// daemon takes a Resident, so a provider without these cannot be handed
// to it: the check is the compiler's, and there is no fallback.
type Resident interface {
	Provider
	// NewID returns a fresh sandbox id; the daemon records it before it
	// provisions (Spec.ID).
	NewID() string
	// Reattach returns a handle on the live sandbox id that an earlier
	// process spawned, from its host record and its init's pid and start
	// time (Sandbox.InitPid, InitStartTime). It refuses unless the init is
	// provably that sandbox's. The handle's Start, Exec and Wait belong to
	// the spawner and fail with failure.KindUsage.
	Reattach(ctx context.Context, id string, initPid int, initStart uint64) (Sandbox, error)
	// Release frees sandbox id's host resources from its record alone,
	// when no handle on it exists. Idempotent; a missing record is no
	// error.
	Release(ctx context.Context, id string) error
	// Residue names host residue this provider made (resource groups…)
	// that belongs to none of the sandboxes ids.
	Residue(ids []string) ([]string, error)
}

// Lease is the host identity range a sandbox was given.
type Lease struct {
	UID, GID, Size uint32
}

// Top is the range's last uid and gid: unique to the sandbox, owning
// nothing, and used by no process inside it. ok is false for the zero
// Lease (a provider that leases no identity).
func (l Lease) Top() (uid, gid uint32, ok bool) {
	if l.Size == 0 || l.UID == 0 || l.GID == 0 {
		return 0, 0, false
	}
	return l.UID + l.Size - 1, l.GID + l.Size - 1, true
}

// HelperFacts are a sandbox's helper group (its gateway's cgroup) as read
// back: its limits and the OOM kills in it.
type HelperFacts struct {
	MemoryBytes int64
	Pids        int64
	OOMKills    int64
}

// Phase is the time one step of provisioning or starting took (--trace).
type Phase struct {
	Name string        `json:"name"`
	Dur  time.Duration `json:"ns"`
	// Nested phases are parts of the phase before them, not added to totals.
	Nested bool `json:"nested,omitempty"`
}

// Process is a process started in a live sandbox (Sandbox.ExecProcess).
// Closing it stops watching it and does not kill it.
type Process interface {
	Pid() int // in the sandbox's pid namespace
	Wait(ctx context.Context) (Exit, error)
	Signal(sig syscall.Signal) error
	Close() error
}

// ExecError is an exec failure inside the sandbox (Exec, ExecProcess).
type ExecError struct {
	Errno syscall.Errno
	Msg   string
}

func (e *ExecError) Error() string { return "exec_failed: " + e.Msg }

// NotFound reports whether the program does not exist (exit 127 rather than 126).
func (e *ExecError) NotFound() bool { return e.Errno == syscall.ENOENT || e.Errno == 0 }

// Sandbox is one provisioned sandbox. The lifecycle is Start (build the
// boundary and admit from evidence), Exec (run the program), Wait, Stop
// and Deprovision. Deprovision is idempotent and always safe to call.
type Sandbox interface {
	ID() string
	Start(ctx context.Context) (Admission, error)
	Exec(ctx context.Context) error
	Wait(ctx context.Context) (Exit, error)
	Stop(ctx context.Context) error
	Deprovision(ctx context.Context) error
	// Signal sends sig to the program (the init forwards it).
	Signal(sig syscall.Signal)
	// InitPid is the host pid of the sandbox's init, 0 before Start.
	InitPid() int
	// ScanTraps reports what the program left in its writable binds that
	// can trap a host user (trapscan). Call it once the program has ended
	// and before Deprovision; a sandbox that holds no bind descriptors
	// (one adopted after a daemon restart) reports nothing.
	ScanTraps() []trapscan.Report

	// Lease is the sandbox's host identity range; its Top is the identity
	// the sandbox's gateway runs as. A provider that leases none returns
	// the zero Lease, and a caller that needs one refuses (package launch
	// fails the gateway with failure.KindStart): never a shared uid.
	Lease() Lease
	// Adopt places a trusted helper process of this sandbox (its
	// gateway), by host pid, in the sandbox's helper resource group: it
	// is then bounded by, and killed with, the sandbox.
	Adopt(pid int) error
	// HelperFacts reads the helper group back (see Adopt).
	HelperFacts() (HelperFacts, error)
	// InitStartTime, with InitPid, identifies the init across a restart
	// of the process that spawned it (Resident.Reattach); 0 before Start
	// or where the provider has no resident sandboxes.
	InitStartTime() uint64
	// WaitMain waits until the main program has ended and reports how; a
	// resident sandbox lives on (ExecProcess still works) until Stop.
	WaitMain(ctx context.Context) (Exit, error)
	// ExecProcess starts argv in the started sandbox under the same
	// boundary as the main program, with stdio as its descriptors 0, 1
	// and 2 (nil: /dev/null). env is added to the sandbox defaults; dir is
	// the working directory inside. It fails with failure.KindUsage where
	// the sandbox cannot (not started, or not resident); exec failures
	// are *ExecError.
	ExecProcess(ctx context.Context, argv, env []string, dir string, stdio [3]*os.File) (Process, error)
	// Phases is the time each step of Provision and Start took, for
	// --trace; nil when the provider does not measure.
	Phases() []Phase
}

// ErrNoProvider is returned by Select when no provider can offer the level.
var ErrNoProvider = errors.New("no provider can evidence the requested level")

// Candidate is a provider with its probed capability.
type Candidate struct {
	Provider   Provider
	Capability Capability
}

// Select returns the first candidate whose probed MaxLevel reaches want.
// It fails closed: it never returns a candidate below want, and there is no
// fallback to a weaker provider.
func Select(want Level, cands []Candidate) (Candidate, error) {
	if want == LevelUnknown {
		return Candidate{}, failure.Failf(failure.KindUsage, "select provider", "no level requested")
	}
	for _, c := range cands {
		if c.Capability.MaxLevel >= want {
			return c, nil
		}
	}
	return Candidate{}, failure.Fail(failure.KindPolicyRejected, "select provider", ErrNoProvider)
}
