package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/probeops"
)

// ProbeBin is where Run binds the binary under test inside the sandbox.
const ProbeBin = "/cordon-probe/cordon"

// Env is what a probe works with. Everything it starts is stopped, and
// its directory removed, when the probe ends.
type Env struct {
	// Bin is the absolute path of the cordon binary under test.
	Bin string
	// Provider, Profile and Level are what the suite runs against.
	Provider, Profile, Level string
	// Dir is the probe's own scratch directory: the only place a probe
	// puts "outside" markers and other host files it observes. It is
	// 0711 (a sandbox init must traverse it to its state directories),
	// so what goes in it is found only by name.
	Dir string

	mu       sync.Mutex
	cleanups []func()
	states   int
	daemons  int
}

// RunOpts describes one `cordon run`.
type RunOpts struct {
	// StateDir is the state directory ("": a fresh one, see StateDir).
	StateDir string
	// Flags are extra `cordon run` flags, before "--" (--json and the
	// suite's provider and level are always passed).
	Flags []string
	// Op runs `cordon __probe OP ARGS...` inside, from the binary under
	// test bound read-only at ProbeBin; Argv runs any program instead.
	Op, Argv []string
	Stdin    []byte
	// Env is added to cordon's own environment (PATH=/usr/bin:/bin).
	Env []string
}

// RunResult is what a cordon command did, as its caller saw it.
type RunResult struct {
	Code           int
	Stdout, Stderr string
	// Outcome is `cordon run --json`'s outcome (nil for other commands).
	Outcome json.RawMessage
	// Op is the probe op's report from stdout: a hint, never a verdict.
	Op *probeops.Result
}

// Hint is the op's report as one line, for Outcome.Hint.
func (r RunResult) Hint() string {
	if r.Op == nil {
		return ""
	}
	b, _ := json.Marshal(r.Op)
	return string(b)
}

// Cleanup runs f when the probe ends (last registered, first run).
func (e *Env) Cleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

func (e *Env) close() {
	e.mu.Lock()
	cs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// StateDir makes a fresh state directory: its own store, evidence log and
// lease range.
func (e *Env) StateDir() string {
	e.mu.Lock()
	e.states++
	n := e.states
	e.mu.Unlock()
	d := filepath.Join(e.Dir, "state"+strconv.Itoa(n))
	// Dir is ours and fresh: a failure here is a broken host, and the
	// run that uses d reports it.
	_ = os.Mkdir(d, 0o700)
	// Leave nothing behind: reclaim what a killed run left in this state
	// dir before the dir (and its records) goes away.
	e.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = e.Cordon(ctx, d, "gc")
	})
	return d
}

// runArgs is the command line of o: cordon's global flags, then run.
func (e *Env) runArgs(o RunOpts) ([]string, error) {
	if (o.Op == nil) == (o.Argv == nil) {
		return nil, errors.New("conformance: RunOpts needs exactly one of Op and Argv")
	}
	args := []string{"run", "--json"}
	if e.Level != "" {
		args = append(args, "--level", e.Level)
	}
	args = append(args, o.Flags...)
	if o.Op != nil {
		args = append(args, "--ro", e.Bin+":"+ProbeBin, "--", ProbeBin, "__probe")
		return append(args, o.Op...), nil
	}
	return append(append(args, "--"), o.Argv...), nil
}

func (e *Env) globals(stateDir string) []string {
	g := []string{"--state-dir", stateDir}
	if e.Provider != "" {
		g = append(g, "--provider", e.Provider)
	}
	return g
}

func (e *Env) command(ctx context.Context, stateDir string, env []string, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.Bin, append(e.globals(stateDir), args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	// At the deadline cordon gets SIGTERM and stops its sandbox; SIGKILL
	// only if it does not end in time.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	return cmd
}

// Run runs one `cordon run` to its end.
func (e *Env) Run(ctx context.Context, o RunOpts) (RunResult, error) {
	args, err := e.runArgs(o)
	if err != nil {
		return RunResult{}, err
	}
	if o.StateDir == "" {
		o.StateDir = e.StateDir()
	}
	outcome, err := os.CreateTemp(e.Dir, "outcome-")
	if err != nil {
		return RunResult{}, err
	}
	defer outcome.Close()
	cmd := e.command(ctx, o.StateDir, o.Env, args)
	var out, errb bytes.Buffer
	cmd.Stdin = bytes.NewReader(o.Stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.ExtraFiles = []*os.File{outcome}
	if err := cmd.Start(); err != nil {
		return RunResult{}, err
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return RunResult{}, fmt.Errorf("cordon run %v: %w", o.Op, ctx.Err())
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) {
		return RunResult{}, werr
	}
	r := result(cmd.ProcessState.ExitCode(), out.String(), errb.String())
	if b, err := os.ReadFile(outcome.Name()); err == nil && len(bytes.TrimSpace(b)) > 0 {
		r.Outcome = json.RawMessage(bytes.TrimSpace(b))
	}
	return r, nil
}

// Cordon runs any cordon subcommand with the state directory (and the
// suite's provider) and returns what it printed.
func (e *Env) Cordon(ctx context.Context, stateDir string, args ...string) (RunResult, error) {
	return e.cordonWith(ctx, stateDir, nil, args...)
}

// cordonWith is Cordon with env added to cordon's environment. Output goes
// to files, not pipes: a program a command starts in a sandbox (`sandbox
// exec`) may hold cordon's stdio after cordon ends.
func (e *Env) cordonWith(ctx context.Context, stateDir string, env []string, args ...string) (RunResult, error) {
	cmd := e.command(ctx, stateDir, env, args)
	out, err := os.CreateTemp(e.Dir, "stdout-")
	if err != nil {
		return RunResult{}, err
	}
	defer func() { out.Close(); os.Remove(out.Name()) }()
	errf, err := os.CreateTemp(e.Dir, "stderr-")
	if err != nil {
		return RunResult{}, err
	}
	defer func() { errf.Close(); os.Remove(errf.Name()) }()
	cmd.Stdout, cmd.Stderr = out, errf
	werr := cmd.Run()
	if ctx.Err() != nil {
		return RunResult{}, fmt.Errorf("cordon %v: %w", args, ctx.Err())
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) {
		return RunResult{}, werr
	}
	ob, _ := os.ReadFile(out.Name())
	eb, _ := os.ReadFile(errf.Name())
	return result(cmd.ProcessState.ExitCode(), string(ob), string(eb)), nil
}

// HostOp runs op on the host, as a child of the trusted side with no
// sandbox: the positive control showing an attempt works where nothing
// denies it. Its arguments must name only what the probe owns.
func (e *Env) HostOp(ctx context.Context, op string, args ...string) (probeops.Result, error) {
	cmd := exec.CommandContext(ctx, e.Bin, append([]string{"__probe", op}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = e.Dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return probeops.Result{}, fmt.Errorf("host op %s: %v: %s", op, err, strings.TrimSpace(errb.String()))
	}
	r := result(0, out.String(), "")
	if r.Op == nil {
		return probeops.Result{}, fmt.Errorf("host op %s printed no report: %q", op, out.String())
	}
	return *r.Op, nil
}

// Listener starts a counting TCP listener on 127.0.0.1, closed when the
// probe ends.
func (e *Env) Listener() (*fixture.Counter, error) {
	c, err := fixture.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.Cleanup(func() { c.Close() })
	return c, nil
}

// result parses a command's output; the op report is the last stdout
// line that is one.
func result(code int, stdout, stderr string) RunResult {
	r := RunResult{Code: code, Stdout: stdout, Stderr: stderr}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; strings.HasPrefix(l, `{"op"`) {
			var op probeops.Result
			if json.Unmarshal([]byte(l), &op) == nil {
				r.Op = &op
				break
			}
		}
	}
	return r
}

// Held is a `cordon run` whose program holds (op "hold") until released.
type Held struct {
	cmd     *exec.Cmd
	stdin   *os.File
	out     *lockedBuffer
	errb    *lockedBuffer
	outcome *os.File
	waited  chan struct{}
	// Op is the held op's report: a hint.
	Op probeops.Result
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Start starts `cordon run` with o, whose Op must be "hold" (hold OP
// ARGS...), and returns once the op has reported; the program then holds
// until Finish. It is stopped when the probe ends.
func (e *Env) Start(ctx context.Context, o RunOpts) (*Held, error) {
	if len(o.Op) == 0 || o.Op[0] != "hold" {
		return nil, errors.New("conformance: Start needs Op hold OP ARGS...")
	}
	args, err := e.runArgs(o)
	if err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		o.StateDir = e.StateDir()
	}
	h := &Held{out: &lockedBuffer{}, errb: &lockedBuffer{}, waited: make(chan struct{})}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	if h.outcome, err = os.CreateTemp(e.Dir, "outcome-"); err != nil {
		return nil, err
	}
	// Not CommandContext: a held run outlives the call that started it;
	// the probe's cleanup ends it.
	h.cmd = exec.Command(e.Bin, append(e.globals(o.StateDir), args...)...)
	h.cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, o.Env...)
	h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = inR, outW, h.errb
	h.cmd.ExtraFiles = []*os.File{h.outcome}
	h.stdin = inW
	if err := h.cmd.Start(); err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	inR.Close()
	outW.Close()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			h.out.Write([]byte(sc.Text() + "\n"))
			select {
			case lines <- sc.Text():
			default:
			}
		}
		outR.Close()
	}()
	go func() {
		_ = h.cmd.Wait()
		close(h.waited)
	}()
	e.Cleanup(h.stop)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				<-h.waited
				return nil, fmt.Errorf("cordon run ended (exit %d) before the held op reported\nstderr: %s", h.cmd.ProcessState.ExitCode(), h.errb.String())
			}
			if strings.HasPrefix(l, `{"op"`) && json.Unmarshal([]byte(l), &h.Op) == nil {
				return h, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("held op did not report: %w\nstderr: %s", ctx.Err(), h.errb.String())
		}
	}
}

// stop releases the program and, if cordon does not end in 30 s, kills it.
func (h *Held) stop() {
	h.stdin.Close()
	select {
	case <-h.waited:
	case <-time.After(30 * time.Second):
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.waited:
		case <-time.After(15 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.waited
		}
	}
	h.outcome.Close()
}

// Pid is cordon's own pid.
func (h *Held) Pid() int { return h.cmd.Process.Pid }

// Pids returns the host pids of the sandbox init and of the program, read
// from /proc on the host: cordon's one child is the init, whose one child
// is the program.
func (h *Held) Pids() (initPid, progPid int, err error) {
	inits := ChildPids(h.cmd.Process.Pid)
	if len(inits) != 1 {
		return 0, 0, fmt.Errorf("cordon %d has children %v, want exactly the sandbox init", h.cmd.Process.Pid, inits)
	}
	progs := ChildPids(inits[0])
	if len(progs) != 1 {
		return 0, 0, fmt.Errorf("sandbox init %d has children %v, want exactly the program", inits[0], progs)
	}
	return inits[0], progs[0], nil
}

// Finish releases the program and waits for cordon to end.
func (h *Held) Finish(ctx context.Context) (RunResult, error) {
	h.stdin.Close()
	select {
	case <-h.waited:
	case <-ctx.Done():
		return RunResult{}, fmt.Errorf("cordon did not end after the program was released: %w", ctx.Err())
	}
	r := result(h.cmd.ProcessState.ExitCode(), h.out.String(), h.errb.String())
	if b, err := os.ReadFile(h.outcome.Name()); err == nil && len(bytes.TrimSpace(b)) > 0 {
		r.Outcome = json.RawMessage(bytes.TrimSpace(b))
	}
	op := h.Op
	r.Op = &op
	return r, nil
}

// ChildPids lists the processes whose parent is pid, from /proc.
func ChildPids(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, n)
			}
		}
	}
	return out
}
