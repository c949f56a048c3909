package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

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
	Source   string `json:"source"` // absolute host path
	Target   string `json:"target"` // absolute sandbox path
	Writable bool   `json:"writable"`
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
	Limits              Limits
	Level               Level // the claim that must be evidenced
	Stdin               io.Reader
	Stdout, Stderr      io.Writer
}

// Admission is the outcome of evidence collection at start.
type Admission struct {
	Level    Level // highest level the evidence supports
	Verified bool  // all six boundaries verified
	Record   any   // the provider's evidence record, JSON-encodable
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

// Provider creates sandboxes. Probe is cheap and side-effect free.
type Provider interface {
	Probe(ctx context.Context) (Capability, error)
	Provision(ctx context.Context, spec Spec) (Sandbox, error)
}

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
