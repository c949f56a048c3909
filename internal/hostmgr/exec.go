package hostmgr

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
)

// ExecArgs are the arguments of exec; the request carries stdin, stdout
// and stderr as its three descriptors.
type ExecArgs struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
}

// ExecStarted is exec's first (non-final) response; ExecExit its last.
type ExecStarted struct {
	Pid int `json:"pid"`
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
	if len(a.Argv) == 0 || len(c.files) != 3 {
		return nil, proto.Errorf(proto.KindBadRequest, "exec needs argv and the caller's stdin, stdout and stderr as its three descriptors")
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
	p, err := sb.ExecProcess(ctx, a.Argv, env, dir, [3]*os.File{c.files[0], c.files[1], c.files[2]})
	if err != nil {
		var xe *sandbox.ExecError
		if errors.As(err, &xe) {
			code := 126
			if xe.NotFound() {
				code = 127
			}
			return ExecExit{Code: code}, proto.Errorf(proto.KindBadRequest, "exec %s: %s", clip(a.Argv[0]), xe.Msg)
		}
		return nil, err
	}
	d.crash("exec.after_start")
	b.trackExec(p)
	defer b.untrackExec(p)
	if err := c.progress(ExecStarted{Pid: p.Pid()}); err != nil {
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
