package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/oci"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// accept serves keeper.sock: one request per connection, except an exec,
// whose connection lives as long as its process.
func (k *keeper) accept(ctx context.Context, ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go k.handle(ctx, oci.NewConn(c))
	}
}

func replyErr(err error) oci.Reply {
	return oci.Reply{Error: describe(err), Kind: string(failure.KindOf(err))}
}

func (k *keeper) handle(ctx context.Context, c *oci.Conn) {
	defer c.Close()
	var req oci.Request
	files, err := c.Recv(&req, 3)
	if err != nil {
		return
	}
	switch req.Op {
	case "start":
		closeFiles(files)
		ch := make(chan oci.Reply, 1)
		k.start <- ch
		_ = c.Send(<-ch)
	case "kill":
		closeFiles(files)
		_ = c.Send(k.signal(ctx, req))
	case "exec":
		k.exec(ctx, c, req, files)
	default:
		closeFiles(files)
		_ = c.Send(oci.Reply{Error: "unknown request " + clipText(req.Op), Kind: string(failure.KindUsage)})
	}
}

// signal is `cordon oci kill`: SIGKILL (or any signal before start) ends
// the whole sandbox; other signals go to the program (with --all, to
// every process of the sandbox where the provider can).
func (k *keeper) signal(ctx context.Context, req oci.Request) oci.Reply {
	sig := syscall.Signal(req.Signal)
	if req.Signal <= 0 || req.Signal > 64 {
		return replyErr(failure.Failf(failure.KindUsage, "oci kill", "signal %d is out of range", req.Signal))
	}
	if k.status() == specs.StateCreated {
		select {
		case k.kill <- req.Signal:
		default:
		}
		return oci.Reply{OK: true}
	}
	sb := k.l.Sandbox()
	if sig == syscall.SIGKILL {
		_ = sb.Stop(context.WithoutCancel(ctx))
		return oci.Reply{OK: true}
	}
	if all, ok := sb.(sandbox.AllSignaler); ok && req.All {
		if err := all.SignalAll(sig); err != nil {
			return replyErr(failure.Fail(failure.KindStart, "oci kill --all", err))
		}
		return oci.Reply{OK: true}
	}
	sb.Signal(sig)
	return oci.Reply{OK: true}
}

// execTable is the live execs, so that they end with the container.
type execTable struct {
	mu sync.Mutex
	m  map[sandbox.Process]bool
}

func newExecTable() *execTable { return &execTable{m: map[sandbox.Process]bool{}} }

func (t *execTable) add(p sandbox.Process) {
	t.mu.Lock()
	t.m[p] = true
	t.mu.Unlock()
}

func (t *execTable) remove(p sandbox.Process) {
	t.mu.Lock()
	delete(t.m, p)
	t.mu.Unlock()
}

func (t *execTable) killAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := range t.m {
		_ = p.Signal(syscall.SIGKILL)
	}
}

// exec runs an exec's process in the sandbox with the proxy's stdio (or
// a terminal of the sandbox's own), relays its signals, and reports its
// exit. If the proxy goes away first, the process is killed.
func (k *keeper) exec(ctx context.Context, c *oci.Conn, req oci.Request, files []*os.File) {
	defer closeFiles(files)
	p := req.Process
	if err := k.checkExec(p, files); err != nil {
		_ = c.Send(replyErr(err))
		return
	}
	sb := k.l.Sandbox()
	var proc sandbox.Process
	var err error
	var master *os.File
	if p.Terminal {
		te, ok := sb.(sandbox.TerminalExecer)
		if !ok {
			_ = c.Send(replyErr(failure.Failf(failure.KindUnsupported, "oci exec", "the provider cannot give an exec a terminal")))
			return
		}
		t := sandbox.Terminal{Stdin: true, Stdout: true, Stderr: true}
		if p.ConsoleSize != nil {
			t.Rows, t.Cols = uint16(min(p.ConsoleSize.Height, 0xffff)), uint16(min(p.ConsoleSize.Width, 0xffff))
		}
		proc, master, err = te.ExecProcessTerminal(ctx, p.Args, p.Env, p.Cwd, [3]*os.File{}, t)
	} else {
		proc, err = sb.ExecProcess(ctx, p.Args, p.Env, p.Cwd, [3]*os.File{files[0], files[1], files[2]})
	}
	if err != nil {
		_ = c.Send(replyErr(err))
		return
	}
	k.execs.add(proc)
	defer k.execs.remove(proc)
	defer proc.Close()
	rep := oci.Reply{Started: true, Pid: proc.Pid()}
	if master != nil {
		err = c.Send(rep, master)
		master.Close()
	} else {
		err = c.Send(rep)
	}
	if err != nil {
		_ = proc.Signal(syscall.SIGKILL)
	}
	done := make(chan struct{})
	go func() {
		for {
			var r oci.Request
			fs, err := c.Recv(&r, 0)
			closeFiles(fs)
			select {
			case <-done:
				return
			default:
			}
			if err != nil {
				_ = proc.Signal(syscall.SIGKILL) // the proxy is gone
				return
			}
			if r.Op == "signal" && r.Signal > 0 && r.Signal <= 64 {
				_ = proc.Signal(syscall.Signal(r.Signal))
			}
		}
	}()
	ex, err := proc.Wait(context.WithoutCancel(ctx))
	close(done)
	code := ex.Code
	if err != nil {
		code = failure.ExitRefused
	} else if ex.Signal != 0 {
		code = 128 + ex.Signal
	}
	_ = c.Send(oci.Reply{Exited: true, Code: code})
}

// checkExec refuses what an exec asks that cordon cannot give: another
// identity than the container's (no capability inside can switch to it),
// or missing stdio.
func (k *keeper) checkExec(p *specs.Process, files []*os.File) error {
	if p == nil || len(p.Args) == 0 || p.Args[0] == "" {
		return failure.Failf(failure.KindUsage, "oci exec", "process.args: no program given")
	}
	img := k.m.Spec.Image
	if p.User.UID != img.UID || p.User.GID != img.GID {
		return failure.Failf(failure.KindPolicyRejected, "oci exec", "process.user %d:%d differs from the container's %d:%d; an exec runs as the container's user (nothing inside holds the capability to switch)", p.User.UID, p.User.GID, img.UID, img.GID)
	}
	if p.Cwd != "" && !filepath.IsAbs(p.Cwd) {
		return failure.Failf(failure.KindUsage, "oci exec", "process.cwd %q is not an absolute path", clipText(p.Cwd))
	}
	if !p.Terminal && len(files) != 3 {
		return failure.Failf(failure.KindUsage, "oci exec", "an exec without a terminal needs its three stdio descriptors")
	}
	if k.status() == specs.StateStopped {
		return failure.Failf(failure.KindUsage, "oci exec", "container %s has stopped", k.id)
	}
	return nil
}
