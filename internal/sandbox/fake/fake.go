package fake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// Name is the provider's name in capabilities and evidence.
const Name = "fake-plain-child"

// Provider runs programs as plain children. The zero value is usable.
type Provider struct {
	// ClaimLevel, when set, is the MaxLevel Probe claims instead of the
	// truth (SHARED): a provider that overstates what it can do. Its
	// evidence still says SHARED, so admission must refuse.
	ClaimLevel sandbox.Level
	// SummaryLevel, when set, is the Admission.Level Start reports
	// instead of the record's: a provider whose summary disagrees with
	// its own evidence record.
	SummaryLevel sandbox.Level

	mu          sync.Mutex
	provisioned int
}

var (
	_ sandbox.Provider = (*Provider)(nil)
	_ sandbox.Resident = (*Provider)(nil)
	_ sandbox.Sandbox  = (*Sandbox)(nil)
	_ sandbox.Process  = (*process)(nil)
)

// Provisioned is how many sandboxes were provisioned (tests observe that
// a refusal came before anything was created).
func (p *Provider) Provisioned() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.provisioned
}

// Probe reports SHARED (or ClaimLevel).
func (p *Provider) Probe(context.Context) (sandbox.Capability, error) {
	c := sandbox.Capability{Schema: sandbox.CapabilitySchema, Provider: Name, Version: "0", MaxLevel: sandbox.Shared,
		Missing: []string{"isolation (a plain child process)"}}
	if p.ClaimLevel != sandbox.LevelUnknown {
		c.MaxLevel = p.ClaimLevel
	}
	return c, nil
}

// Provision records spec; nothing runs until Exec.
func (p *Provider) Provision(_ context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if spec.EngineNet != nil {
		return nil, failure.Failf(failure.KindUnsupported, "provision", "%s cannot join an engine's network namespace", Name)
	}
	if spec.ID == "" {
		spec.ID = p.NewID()
	}
	p.mu.Lock()
	p.provisioned++
	p.mu.Unlock()
	return &Sandbox{p: p, spec: spec, done: make(chan struct{})}, nil
}

// Limits is spec's limits: the fake enforces none.
func (p *Provider) Limits(spec sandbox.Spec) sandbox.Limits { return spec.Limits }

// NewID returns a random id.
func (p *Provider) NewID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Reattach refuses: nothing of a plain child survives its parent here.
func (p *Provider) Reattach(context.Context, string, int, uint64) (sandbox.Sandbox, error) {
	return nil, failure.Failf(failure.KindStart, "attach", "%s: sandboxes do not outlive their process", Name)
}

// Release has nothing to release.
func (p *Provider) Release(context.Context, string) error { return nil }

// Residue is none.
func (p *Provider) Residue([]string) ([]string, error) { return nil, nil }

// Sandbox is one plain child.
type Sandbox struct {
	p    *Provider
	spec sandbox.Spec

	mu      sync.Mutex
	started bool
	cmd     *exec.Cmd
	done    chan struct{} // closed when the main program has ended
	exit    sandbox.Exit
	gone    bool
}

func (s *Sandbox) ID() string { return s.spec.ID }

// Start "builds" nothing and reports evidence that says so: every
// boundary unverified, admitted by the same pure function as the real
// provider's evidence (evidence.Admit).
func (s *Sandbox) Start(context.Context) (sandbox.Admission, error) {
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	b := map[string]evidence.Boundary{}
	for _, name := range evidence.Boundaries() {
		b[name] = evidence.Boundary{Facts: []evidence.Check{{Name: "isolation", Want: "a boundary", Got: "none: a plain child process", Source: Name}}}
	}
	lvl, mode := evidence.Admit(b)
	rec := &evidence.Record{Schema: evidence.Schema, SandboxID: s.spec.ID, Workload: s.spec.Workload, LevelAdmitted: lvl,
		EnforcementMode: mode, Boundaries: b, Provider: evidence.Provider{Name: Name, Version: "0"},
		NonClaims: []string{"no isolation of any kind"}, CreatedAt: time.Now().UTC(), CollectedAt: time.Now().UTC()}
	adm := sandbox.Admission{Level: lvl, Verified: false, Record: rec}
	if s.p.SummaryLevel != sandbox.LevelUnknown {
		adm.Level = s.p.SummaryLevel
	}
	return adm, nil
}

// Exec starts the main program (none: an idle sandbox).
func (s *Sandbox) Exec(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return failure.Failf(failure.KindUsage, "exec", "not started")
	}
	if len(s.spec.Argv) == 0 {
		return nil
	}
	cmd := s.command(s.spec.Argv, nil)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.spec.Stdin, s.spec.Stdout, s.spec.Stderr
	if err := cmd.Start(); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			errno, _ := pe.Err.(syscall.Errno)
			return &sandbox.ExecError{Errno: errno, Msg: err.Error()}
		}
		return &sandbox.ExecError{Errno: syscall.ENOENT, Msg: err.Error()}
	}
	s.cmd = cmd
	go func() {
		ex := exitOf(cmd.Wait())
		s.mu.Lock()
		s.exit = ex
		s.mu.Unlock()
		close(s.done)
	}()
	return nil
}

func (s *Sandbox) command(argv, env []string) *exec.Cmd {
	cmd := exec.Command(s.hostPath(argv[0]), argv[1:]...)
	cmd.Env = append(append([]string{"PATH=/usr/bin:/bin"}, s.spec.Env...), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// hostPath maps a program path inside a bind's target to the bind's host
// source: a plain child sees the host's filesystem, where nothing is
// bound, so a program the caller bound in (`cordon run --ro
// BIN:/x/bin -- /x/bin`) runs from where it lives. Only the program
// path is mapped; its arguments and everything it opens are host paths.
func (s *Sandbox) hostPath(prog string) string {
	for _, b := range s.spec.Binds {
		if b.Source == "" || b.Target == "" {
			continue
		}
		if prog == b.Target {
			return b.Source
		}
		if rest, ok := strings.CutPrefix(prog, strings.TrimSuffix(b.Target, "/")+"/"); ok {
			return filepath.Join(b.Source, rest)
		}
	}
	return prog
}

func exitOf(err error) sandbox.Exit {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return sandbox.Exit{Signal: int(ws.Signal())}
		}
		return sandbox.Exit{Code: ee.ExitCode()}
	}
	return sandbox.Exit{}
}

// Wait waits for the main program.
func (s *Sandbox) Wait(ctx context.Context) (sandbox.Exit, error) { return s.WaitMain(ctx) }

// WaitMain waits for the main program.
func (s *Sandbox) WaitMain(ctx context.Context) (sandbox.Exit, error) {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if !running {
		return sandbox.Exit{}, failure.Failf(failure.KindUsage, "wait", "no main program is running")
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exit, nil
}

// Stop kills the main program's process group.
func (s *Sandbox) Stop(context.Context) error {
	s.Signal(syscall.SIGKILL)
	return nil
}

// Deprovision stops; idempotent.
func (s *Sandbox) Deprovision(ctx context.Context) error {
	s.mu.Lock()
	gone := s.gone
	s.gone = true
	s.mu.Unlock()
	if !gone {
		_ = s.Stop(ctx)
	}
	return nil
}

// Signal signals the main program's process group.
func (s *Sandbox) Signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}

// InitPid is the main program's pid (there is no init).
func (s *Sandbox) InitPid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Sandbox) ScanTraps() []trapscan.Report { return nil }

// Lease is the zero Lease: the fake leases no identity, so no gateway
// may run for it.
func (s *Sandbox) Lease() sandbox.Lease { return sandbox.Lease{} }

// Adopt refuses: there is no helper group.
func (s *Sandbox) Adopt(int) error {
	return failure.Failf(failure.KindUnsupported, "adopt", "%s has no helper resource group", Name)
}

func (s *Sandbox) HelperFacts() (sandbox.HelperFacts, error) {
	return sandbox.HelperFacts{}, failure.Failf(failure.KindUnsupported, "helper facts", "%s has no helper resource group", Name)
}

func (s *Sandbox) InitStartTime() uint64   { return 0 }
func (s *Sandbox) Phases() []sandbox.Phase { return nil }

// ExecProcess runs argv as another plain child.
func (s *Sandbox) ExecProcess(_ context.Context, argv, env []string, dir string, stdio [3]*os.File) (sandbox.Process, error) {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started || len(argv) == 0 {
		return nil, failure.Failf(failure.KindUsage, "exec", "not started, or no program")
	}
	cmd := s.command(argv, env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio[0], stdio[1], stdio[2]
	if dir != "" {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			cmd.Dir = dir
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, &sandbox.ExecError{Errno: syscall.ENOENT, Msg: err.Error()}
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { p.exit = exitOf(cmd.Wait()); close(p.done) }()
	return p, nil
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	exit sandbox.Exit
}

func (p *process) Pid() int { return p.cmd.Process.Pid }
func (p *process) Wait(ctx context.Context) (sandbox.Exit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
}
func (p *process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }
func (p *process) Close() error                    { return nil }
