package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

// The client side of a daemon-mode sandbox's exec channel: starting a
// process in the live sandbox (on a pty of the sandbox's own when asked),
// watching it and signalling it. The channel is described in
// daemon_linux.go and sbinit/proto.go.

// ExecProcess starts argv in the live sandbox, under the same boundary as
// the main program: the sandbox's own init forks it from its hardened main
// thread in a new session, with stdio as its descriptors 0, 1 and 2 (nil
// means /dev/null; the caller keeps and may close its files once this
// returns). env is added to the sandbox defaults, like Spec.Env; dir is
// the working directory inside ("" for the main program's). It works the
// same whether this process spawned the sandbox or adopted it (Attach):
// it connects to the sandbox's exec socket. Exec failures are *ExecError,
// as for Exec. The sandbox must serve execs (daemon mode, or Spec.Execs)
// and be started (Exec done).
func (sb *linuxSandbox) ExecProcess(ctx context.Context, argv, env []string, dir string, stdio [3]*os.File) (sandbox.Process, error) {
	if !sb.servesExecs() {
		return nil, failure.Failf(failure.KindUsage, "exec", errNoExecs)
	}
	sb.mu.Lock()
	running := sb.running
	sb.mu.Unlock()
	if !running {
		return nil, failure.Failf(failure.KindUsage, "exec", "sandbox %s has not been started (Start, then Exec)", sb.spec.ID)
	}
	select {
	case <-sb.done:
		return nil, failure.Fail(failure.KindExec, "exec", ErrInitGone)
	default:
	}
	p, _, err := execProcess(ctx, sb.p.runSockPath(sb.spec.ID), argv, sb.execEnv(env), dir, stdio, nil)
	return asProcess(p, err)
}

// execEnv is an exec's environment: image mode's exactly as given (with
// the default PATH), else over cordon's defaults.
func (sb *linuxSandbox) execEnv(env []string) []string {
	if sb.spec.Image != nil {
		return imageEnv(env)
	}
	return mergeEnv(env)
}

// errNoExecs is the refusal of an exec into a sandbox that serves none.
const errNoExecs = "exec into a live sandbox needs a daemon-mode provider or a sandbox provisioned with Execs"

// ExecProcessTerminal is ExecProcess on a pseudo-terminal of the
// sandbox's own (sandbox.TerminalExecer): the init opens it in the
// sandbox's devpts, and its master comes back checked (checkMaster).
func (sb *linuxSandbox) ExecProcessTerminal(ctx context.Context, argv, env []string, dir string, stdio [3]*os.File, t sandbox.Terminal) (sandbox.Process, *os.File, error) {
	if !sb.servesExecs() {
		return nil, nil, failure.Failf(failure.KindUsage, "exec", errNoExecs)
	}
	sb.mu.Lock()
	running := sb.running
	sb.mu.Unlock()
	if !running {
		return nil, nil, failure.Failf(failure.KindUsage, "exec", "sandbox %s has not been started (Start, then Exec)", sb.spec.ID)
	}
	return execTerminal(ctx, sb.p.runSockPath(sb.spec.ID), argv, sb.execEnv(env), dir, stdio, t)
}

// execTerminal is execProcess with a terminal, as the seam's types.
func execTerminal(ctx context.Context, sock string, argv, env []string, dir string, stdio [3]*os.File, t sandbox.Terminal) (sandbox.Process, *os.File, error) {
	p, m, err := execProcess(ctx, sock, argv, env, dir, stdio, ttyConfig(&t))
	if err != nil {
		return nil, nil, err
	}
	return p, m, nil
}

// asProcess returns p as the seam's Process, and never a nil *Process in
// a non-nil interface.
func asProcess(p *Process, err error) (sandbox.Process, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Process is a process started in a live sandbox by its init
// (ExecProcess). It holds the exec connection until the exit status
// arrives; closing it (Close) does not kill the process.
type Process struct {
	pid  int
	conn *net.UnixConn
	wmu  sync.Mutex
	done chan struct{} // closed once exit or err is set
	exit sandbox.Exit
	err  error
}

// Pid is the process's pid inside the sandbox's PID namespace.
func (p *Process) Pid() int { return p.pid }

// Wait waits for the process to end and reports how. If the sandbox is
// stopped first (or Close was called) it returns an error matching
// ErrNoExitStatus.
func (p *Process) Wait(ctx context.Context) (sandbox.Exit, error) {
	select {
	case <-p.done:
		return p.exit, p.err
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
}

// Signal asks the init to send sig to the process. The process leads its
// own session and process group, and the init signals the group, as a
// terminal would: children that stayed in the group get it too. After
// the exit it returns os.ErrProcessDone.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	if sig < 1 || sig > 64 {
		return failure.Failf(failure.KindUsage, "signal", "invalid signal %d", int(sig))
	}
	b, _ := json.Marshal(sbinit.Message{Type: "signal", Signal: int(sig)})
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := p.conn.Write(b); err != nil {
		select {
		case <-p.done:
			return os.ErrProcessDone
		default:
		}
		return failure.Fail(failure.KindExec, "signal", err)
	}
	return nil
}

// Close gives up the process's exec connection: the process runs on
// (until it ends or the sandbox stops) and Wait no longer learns its exit.
func (p *Process) Close() error {
	return p.conn.Close()
}

// read waits for the exit message; anything else on the channel is ignored.
func (p *Process) read() {
	defer close(p.done)
	defer p.conn.Close()
	buf := make([]byte, 4096)
	for {
		n, err := p.conn.Read(buf)
		if err != nil {
			p.err = failure.Fail(failure.KindExec, "wait", fmt.Errorf("%w (%v)", ErrNoExitStatus, err))
			return
		}
		var m sbinit.Message
		if json.Unmarshal(buf[:n], &m) != nil || m.Type != "exit" {
			continue
		}
		p.exit = sandbox.Exit{Code: m.Code, Signal: m.Signal}
		return
	}
}

// execProcess is the client side of the exec channel at sock. With tty
// the init runs the process on a pty of the sandbox's own and its
// "started" answer must carry exactly one descriptor, a pty master
// (checkMaster), which is returned; without, it must carry none.
func execProcess(ctx context.Context, sock string, argv, env []string, dir string, stdio [3]*os.File, tty *sbinit.Tty) (*Process, *os.File, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, nil, failure.Failf(failure.KindUsage, "exec", "no program given")
	}
	for _, s := range append(append(append([]string{}, argv...), env...), dir) {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, nil, failure.Failf(failure.KindUsage, "exec", "NUL byte in argv, env or dir")
		}
	}
	if dir != "" && !filepath.IsAbs(dir) {
		return nil, nil, failure.Failf(failure.KindUsage, "exec", "%s: the working directory must be absolute", dir)
	}
	req, err := json.Marshal(sbinit.Message{Type: "exec", Argv: argv, Env: env, Dir: dir, Pty: tty})
	if err != nil {
		return nil, nil, failure.Fail(failure.KindUsage, "exec", err)
	}
	if len(req) > sbinit.MaxExecMessage {
		return nil, nil, failure.Failf(failure.KindUsage, "exec", "argv and env take %d bytes; at most %d", len(req), sbinit.MaxExecMessage)
	}
	var fds []int
	for _, f := range stdio {
		if f == nil {
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return nil, nil, failure.Fail(failure.KindExec, "exec", err)
			}
			defer null.Close()
			f = null
		}
		fds = append(fds, int(f.Fd()))
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", sock)
	if err != nil {
		return nil, nil, failure.Fail(failure.KindExec, "exec", fmt.Errorf("the sandbox init does not answer on its exec socket (sandbox stopped?): %w", err))
	}
	conn := c.(*net.UnixConn)
	// Until the reply: ctx's deadline, its cancellation, or readyTimeout.
	dl := time.Now().Add(readyTimeout)
	if t, ok := ctx.Deadline(); ok && t.Before(dl) {
		dl = t
	}
	conn.SetDeadline(dl)
	var mu sync.Mutex
	replied := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !replied {
			conn.SetDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	fail := func(err error) (*Process, *os.File, error) {
		conn.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, failure.Fail(failure.KindExec, "exec", err)
	}
	if _, _, err := conn.WriteMsgUnix(req, unix.UnixRights(fds...), nil); err != nil {
		return fail(fmt.Errorf("send request: %w", err))
	}
	m, got, err := readExecReply(conn)
	mu.Lock()
	replied = true
	mu.Unlock()
	if err != nil {
		return fail(err)
	}
	switch m.Type {
	case "started":
		master, err := startedMaster(tty, m, got)
		if err != nil {
			// The process runs on, unwatched: its terminal's master
			// is gone, so it gets SIGHUP from its line discipline.
			return fail(err)
		}
		conn.SetDeadline(time.Time{})
		p := &Process{pid: m.Pid, conn: conn, done: make(chan struct{})}
		go p.read()
		return p, master, nil
	case "error":
		closeAll(got)
		conn.Close()
		if m.Step == "exec" {
			return nil, nil, &ExecError{Errno: syscall.Errno(m.Errno), Msg: m.Error}
		}
		return nil, nil, failure.Failf(failure.KindExec, "exec", "%s: %s", m.Step, m.Error)
	default:
		closeAll(got)
		return fail(fmt.Errorf("unexpected answer %q from the sandbox init", m.Type))
	}
}

// readExecReply reads the init's first answer on an exec connection and
// the descriptors that came with it (close-on-exec; at most
// maxControlFDs, else it is an error and they are closed).
func readExecReply(conn *net.UnixConn) (sbinit.Message, []*os.File, error) {
	var m sbinit.Message
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(maxControlFDs*4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return m, nil, fmt.Errorf("no answer from the sandbox init: %w", err)
	}
	var got []*os.File
	if oobn > 0 {
		if got, err = parseRights(oob[:oobn]); err != nil {
			return m, nil, err
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(got)
		return m, nil, errors.New("truncated answer from the sandbox init")
	}
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(got)
		return m, nil, fmt.Errorf("malformed answer from the sandbox init: %w", err)
	}
	return m, got, nil
}

// startedMaster checks what came with "started": nothing without a
// terminal request, exactly one pty master with one (checkMaster).
func startedMaster(tty *sbinit.Tty, m sbinit.Message, fds []*os.File) (*os.File, error) {
	if tty == nil || !m.Tty {
		closeAll(fds)
		if tty != nil || m.Tty || len(fds) > 0 {
			return nil, fmt.Errorf("the sandbox init answered an exec's terminal request wrongly (requested %t, reported %t, %d descriptors)", tty != nil, m.Tty, len(fds))
		}
		return nil, nil
	}
	return checkMaster(fds)
}
