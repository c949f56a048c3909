package hostmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
)

// ExecArgs are the arguments of exec. Without Tty the request carries
// stdin, stdout and stderr as its three descriptors. With Tty the
// process runs on a pseudo-terminal of the sandbox's own, its stdin is
// that terminal, and the request carries only the descriptors that are
// not: stdout unless Tty.Stdout, then stderr unless Tty.Stderr (the
// caller's terminal is never sent).
type ExecArgs struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	Tty  *ExecTty `json:"tty,omitempty"`
}

// ExecTty asks for the exec'd process's own pseudo-terminal: which of
// stdout and stderr are the terminal too (stdin always is) and the
// initial window size (0: unset). Later sizes are the client's to set
// on the master it holds (TIOCSWINSZ).
type ExecTty struct {
	Stdout bool   `json:"stdout,omitempty"`
	Stderr bool   `json:"stderr,omitempty"`
	Rows   uint16 `json:"rows,omitempty"`
	Cols   uint16 `json:"cols,omitempty"`
}

// ExecStarted is exec's first (non-final) response; ExecExit its last.
// With Tty the response carries exactly one descriptor, the terminal's
// master, checked by the daemon to be a pseudo-terminal master; the
// client checks it again before it uses it.
type ExecStarted struct {
	Pid int  `json:"pid"`
	Tty bool `json:"tty,omitempty"`
}

// execStdio is what the request's descriptors are for: the process's
// stdio (nil where the terminal is) and the terminal asked for.
func execStdio(a ExecArgs, files []*os.File) ([3]*os.File, *sandbox.Terminal, error) {
	if a.Tty == nil {
		if len(files) != 3 {
			return [3]*os.File{}, nil, proto.Errorf(proto.KindBadRequest, "exec needs the caller's stdin, stdout and stderr as its three descriptors")
		}
		return [3]*os.File{files[0], files[1], files[2]}, nil, nil
	}
	t := &sandbox.Terminal{Stdin: true, Stdout: a.Tty.Stdout, Stderr: a.Tty.Stderr, Rows: a.Tty.Rows, Cols: a.Tty.Cols}
	var stdio [3]*os.File
	want := 0
	for i, on := range []bool{t.Stdout, t.Stderr} {
		if !on && want < len(files) {
			stdio[i+1] = files[want]
		}
		if !on {
			want++
		}
	}
	if len(files) != want {
		return [3]*os.File{}, nil, proto.Errorf(proto.KindBadRequest, "exec with a terminal takes the caller's stdout and stderr that are not on it (%d here), never stdin: %d sent", want, len(files))
	}
	return stdio, t, nil
}

// ExecExit is how an exec'd process ended.
type ExecExit struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
}

func (d *Daemon) opExec(ctx context.Context, c *call) (any, error) {
	var a ExecArgs
	if err := c.args(&a); err != nil {
		return nil, err
	}
	if len(a.Argv) == 0 {
		return nil, proto.Errorf(proto.KindBadRequest, "exec needs argv")
	}
	stdio, term, err := execStdio(a, c.files)
	if err != nil {
		return nil, err
	}
	for _, s := range append(append([]string{}, a.Argv...), a.Env...) {
		if strings.ContainsRune(s, 0) {
			return nil, proto.Errorf(proto.KindBadRequest, "NUL byte in argv or env")
		}
	}
	b, err := c.authorize(ctx, a.Name)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	state, drain, sb, id, gw := b.rec.State, b.rec.Drain, b.sb, b.rec.ID, b.spec.Gateway != nil
	env := append(append(append([]string{}, b.spec.Env...), a.Env...), b.spec.GatewayEnv...)
	dir := "/home/agent"
	if b.spec.Workspace {
		dir = "/workspace"
	}
	b.mu.Unlock()
	if state != store.DRunning || sb == nil {
		return nil, proto.Errorf(proto.KindConflict, "sandbox %s is %s; exec needs a running sandbox", a.Name, state)
	}
	if drain != "" {
		return nil, proto.Errorf(proto.KindDrain, "sandbox %s is draining: %s; running work continues, new execs are refused until it is re-admitted (cordon sandbox readmit %s)", a.Name, drain, a.Name)
	}
	if gw && len(a.Env) > 0 {
		// As at create (and cordon run --env): no custodied value in
		// the program's environment.
		secrets, err := loadSecrets(d.o.StateDir, id)
		if err != nil {
			return nil, err
		}
		if err := launch.EnvLeaks(a.Env, secrets); err != nil {
			return nil, err
		}
	}
	p, master, err := execIn(ctx, sb, a.Argv, env, dir, stdio, term)
	if err != nil {
		var xe *sandbox.ExecError
		if errors.As(err, &xe) {
			code := 126
			if xe.NotFound() {
				code = 127
			}
			msg := xe.Msg
			if xe.NotFound() {
				b.mu.Lock()
				msg += "; " + visible(b.spec, env, a.Name)
				b.mu.Unlock()
			}
			return ExecExit{Code: code}, proto.Errorf(proto.KindBadRequest, "exec %s: %s", clip(a.Argv[0]), msg)
		}
		return nil, err
	}
	d.crash("exec.after_start")
	b.trackExec(p)
	defer b.untrackExec(p)
	if err := c.started(ExecStarted{Pid: p.Pid(), Tty: master != nil}, master); err != nil {
		d.log.Debug("exec: client gone; the process keeps running", "name", a.Name, "pid", p.Pid())
	}
	// The connection's context ends when the client hangs up: stop
	// watching (the process keeps running, unwatched) and free the slot.
	res, err := p.Wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			_ = p.Close()
			return nil, proto.Errorf(proto.KindUnavailable, "the client went away; the process keeps running")
		}
		return nil, err
	}
	return ExecExit{Code: res.Code, Signal: res.Signal}, nil
}

// execIn starts argv in sb, on a terminal of the sandbox's own with term.
// The master it forwards is the one the provider checked
// (sandbox.TerminalExecer's contract: a pty master and nothing else); the
// client checks it again before it uses it.
func execIn(ctx context.Context, sb sandbox.Sandbox, argv, env []string, dir string, stdio [3]*os.File, term *sandbox.Terminal) (sandbox.Process, *os.File, error) {
	if term == nil {
		p, err := sb.ExecProcess(ctx, argv, env, dir, stdio)
		return p, nil, err
	}
	te, ok := sb.(sandbox.TerminalExecer)
	if !ok {
		return nil, nil, proto.Errorf(proto.KindBadRequest, "this sandbox cannot give an exec a terminal; run it without one (stdin not a terminal, or --tty never)")
	}
	p, m, err := te.ExecProcessTerminal(ctx, argv, env, dir, stdio, *term)
	if err != nil {
		return nil, nil, err
	}
	// The provider checked the master (TerminalExecer's contract); the
	// client checks it again before it uses it. hostmgr reads no
	// provider's internals.
	if m == nil {
		// Unwatched, the process runs on; without its master it gets
		// SIGHUP from its terminal.
		_ = p.Close()
		return nil, nil, proto.Errorf(proto.KindInternal, "exec: the sandbox gave no terminal for the exec")
	}
	return p, m, nil
}

// started sends exec's started answer, with the terminal's master beside
// it when there is one, and closes the daemon's copy of the master: the
// client's is the only one outside the sandbox from then on.
func (c *call) started(s ExecStarted, master *os.File) error {
	if master == nil {
		return c.progress(s)
	}
	defer master.Close()
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return c.reply(proto.Response{Version: proto.Version, ID: c.req.ID, Result: b, Files: []*os.File{master}})
}

// trackExec and untrackExec keep b's watched exec'd processes, by pid
// in the sandbox, for signal.
func (b *box) trackExec(p sandbox.Process) {
	b.execMu.Lock()
	defer b.execMu.Unlock()
	if b.execs == nil {
		b.execs = map[int]sandbox.Process{}
	}
	b.execs[p.Pid()] = p
}

func (b *box) untrackExec(p sandbox.Process) {
	b.execMu.Lock()
	defer b.execMu.Unlock()
	delete(b.execs, p.Pid())
}

// SignalArgs signal an exec'd process (the CLI forwards ^C).
type SignalArgs struct {
	Name   string `json:"name"`
	Pid    int    `json:"pid"`
	Signal int    `json:"signal"`
}

func (d *Daemon) opSignal(ctx context.Context, c *call) (any, error) {
	var a SignalArgs
	if err := c.args(&a); err != nil {
		return nil, err
	}
	b, err := c.authorize(ctx, a.Name)
	if err != nil {
		return nil, err
	}
	switch syscall.Signal(a.Signal) {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGKILL, syscall.SIGWINCH, syscall.SIGUSR1, syscall.SIGUSR2:
	default:
		return nil, proto.Errorf(proto.KindBadRequest, "signal %d is not forwarded", a.Signal)
	}
	b.execMu.Lock()
	p := b.execs[a.Pid]
	b.execMu.Unlock()
	if p == nil {
		return nil, proto.Errorf(proto.KindNotFound, "no exec with pid %d in %s", a.Pid, a.Name)
	}
	return struct{}{}, p.Signal(syscall.Signal(a.Signal))
}

// visible says, for a program not found, what the sandbox shows and how
// to make more of it visible: its PATH, the workspace, its binds' and
// volumes' targets (never a host path of the daemon's), and that binds
// are fixed when the sandbox is created. One line (the client prints a
// refusal as one escaped line).
func visible(sp Spec, env []string, name string) string {
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	if len(path) > 512 {
		path = path[:512] + "…"
	}
	parts := []string{"not found in the sandbox, which shows the host's /usr, /bin, /sbin and /lib* read-only; its PATH is " + path}
	if sp.Workspace {
		parts = append(parts, "the workspace is at /workspace")
	}
	for _, bd := range sp.Binds {
		mode := "ro"
		if bd.Writable {
			mode = "rw"
		}
		parts = append(parts, fmt.Sprintf("a bind (%s) is at %s", mode, clip(bd.Target)))
	}
	for _, v := range sp.Volumes {
		parts = append(parts, fmt.Sprintf("volume %s is at %s", clip(v.Name), clip(v.Target)))
	}
	parts = append(parts, fmt.Sprintf("binds are fixed at create: give the program's directory with --ro HOST:/opt/x when you create the sandbox (cordon sandbox rm %s, then cordon sandbox create %s --ro HOST:/opt/x …) and exec /opt/x/…", name, name))
	return strings.Join(parts, "; ")
}
