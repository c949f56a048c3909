package evidence

import (
	"time"

	"github.com/cordon-project/cordon/internal/sandbox/level"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// Schema identifies the evidence record format.
const Schema = "cordon.evidence/v1"

// The six boundaries; all must be verified for enforcement_mode VERIFIED.
const (
	Process    = "process"
	Filesystem = "filesystem"
	IPC        = "ipc"
	Network    = "network"
	Resource   = "resource"
	Credential = "credential"
)

// Boundaries lists the six boundary names.
func Boundaries() []string {
	return []string{Process, Filesystem, IPC, Network, Resource, Credential}
}

// Enforcement modes.
const (
	Verified   = "VERIFIED"
	Unverified = "UNVERIFIED"
)

// Check is one fact with its verdict.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Want   string `json:"want,omitempty"`
	Got    string `json:"got"`
	Source string `json:"source"` // where the trusted side read it
	// Boundary (in-situ checks) names the boundary the check is a fact of.
	Boundary string `json:"boundary,omitempty"`
	// Control marks a positive control: a permitted attempt whose trace
	// shows that the observation would see the denied one had it worked.
	Control bool `json:"control,omitempty"`
}

// Boundary is the verdict for one boundary and the facts behind it. The
// zero value is not verified.
type Boundary struct {
	Verified bool    `json:"verified"`
	Facts    []Check `json:"facts"`
}

// Host describes the machine the evidence was read on.
type Host struct {
	Kernel      string            `json:"kernel"`
	BootID      string            `json:"boot_id"`
	Cgroups     map[string]string `json:"cgroup_controllers"` // controller -> "v1"/"v2"
	LandlockABI int               `json:"landlock_abi"`
	Seccomp     bool              `json:"seccomp_filter"`
}

// Provider names the provider that built the sandbox.
type Provider struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Record is the evidence record for one sandbox.
type Record struct {
	Schema          string              `json:"schema"`
	SandboxID       string              `json:"sandbox_id"`
	Workload        string              `json:"workload,omitempty"`
	LevelRequested  level.Level         `json:"level_requested"`
	LevelAdmitted   level.Level         `json:"level_admitted"`
	EnforcementMode string              `json:"enforcement_mode"`
	Boundaries      map[string]Boundary `json:"boundaries"`
	Host            Host                `json:"host"`
	Provider        Provider            `json:"provider"`
	CordonSHA256    string              `json:"cordon_sha256"`
	SeccompSHA256   string              `json:"seccomp_sha256"`
	Lease           LeaseFacts          `json:"lease"`
	TCB             []string            `json:"tcb"`
	Assumptions     []string            `json:"assumptions"`
	NonClaims       []string            `json:"non_claims"`
	CreatedAt       time.Time           `json:"created_at"`
	CollectedAt     time.Time           `json:"collected_at"`
	FinishedAt      *time.Time          `json:"finished_at,omitempty"`
	Outcome         *Outcome            `json:"outcome,omitempty"`
	// WorkspaceTraps is what the program left in each writable bind that
	// can trap a host user (symlinks leaving it, FIFOs, sockets, devices),
	// read by the trusted side after the program ended.
	WorkspaceTraps []trapscan.Report `json:"workspace_traps,omitempty"`
	// InSitu is the in-situ set the init attempted at start, after every
	// layer was in place, judged by the trusted side from the traces
	// (insitu_linux.go); nil when the provider ran none.
	InSitu *InSitu `json:"in_situ,omitempty"`
}

// LeaseFacts is the UID/GID range the sandbox was given.
type LeaseFacts struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Size uint32 `json:"size"`
}

// Outcome is how the program ended, filled in after it ran.
type Outcome struct {
	ExitCode int  `json:"exit_code"`
	Signal   int  `json:"signal,omitempty"`
	OOM      bool `json:"oom,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
}

// TCB is what the claim rests on (contract section 4).
var TCB = []string{
	"the cordon binary on the host (trusted side and sandbox init), identified by cordon_sha256",
	"the host Linux kernel: namespaces, cgroups, seccomp, Landlock, mount and idmapped-mount code",
	"the host's root account and everything running as host root",
	"the embedded store under the state directory (leases, write-ahead records)",
	"the host binaries and libraries bound read-only into the sandbox (/usr and the /bin, /lib layout)",
	"the host's /usr/bin/nsenter and /bin/cat, run by the trusted side to read the sandbox's /proc/sys/user limits",
}

// Assumptions are what must hold for the claim (contract section 2).
var Assumptions = []string{
	"the host kernel is not compromised and has no exploitable defect in the enforcing subsystems",
	"no other process on the host acts against the sandbox with host root privileges",
	"the leased UID/GID range owns no host files and is used by no other process",
	"the state directory is writable only by root",
}

// NonClaims are what this record does not claim (contract section 11).
var NonClaims = []string{
	"no claim against kernel, firmware or hardware vulnerabilities, or a compromised host",
	"no claim about covert or side channels (timing, cache, CPU contention, /proc/loadavg-style global counters)",
	"no VM-grade isolation: the kernel is shared with the host",
	"no bound on disk filled through a read-write bind beyond RLIMIT_FSIZE per file; the root filesystem has no quota",
	"host-wide pools bounded only through other limits: fs.file-max (open files are charged to the memory limit), kernel.pid_max (the pids limit), kernel.pty.max beyond 64 per sandbox, tcp_max_orphans (docs/host-pools.md)",
	"no claim about what the program does inside its own boundary, nor about prompt or tool injection",
	"the facts hold at collected_at, read before the program's first instruction; later changes are not observed by this record",
	"no claim that a program reachable through the gateway (later issues) is safe; this record covers the sandbox only",
	"host-wide figures stay readable in the sandbox's /proc: /proc/stat (CPU times, boot time, interrupt totals), /proc/meminfo, /proc/cpuinfo, /proc/loadavg, /proc/uptime, /proc/vmstat, /proc/version and the kernel release; the host facts masked are listed as mask:PATH facts (docs/masked-paths.md)",
	"/proc/self/mountinfo shows, for every bind, its path within the host filesystem it comes from (the workspace's and each --ro/--rw bind's host path)",
	"inotify and access times on the read-only host binds (/usr, the /bin and /lib layout, --ro binds) reveal which host programs and files are used while the sandbox runs",
	"live host-wide counters stay readable: /proc/cgroups (cgroups per hierarchy), /proc/sys/fs/file-nr, inode-nr, dentry-state and /proc/sys/kernel/random/entropy_avail; so do the kernel's driver and build lists (/proc/devices, /proc/misc, /proc/filesystems, /proc/crypto, /proc/tty)",
}

// Admit returns the highest level the boundary verdicts support and the
// enforcement mode. Only DEDICATED_CONTAINER requires all six boundaries;
// DEDICATED_VM is never admitted by this provider's evidence.
func Admit(b map[string]Boundary) (level.Level, string) {
	ok := func(names ...string) bool {
		for _, n := range names {
			if !b[n].Verified {
				return false
			}
		}
		return true
	}
	mode := Unverified
	if ok(Boundaries()...) {
		mode = Verified
	}
	switch {
	case mode == Verified:
		return level.DedicatedContainer, mode
	case ok(Credential, Process, Filesystem):
		return level.DedicatedRuntime, mode
	case ok(Credential):
		return level.DomainIsolated, mode
	default:
		return level.Shared, mode
	}
}
