package sbinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// execRequestTimeout bounds how long a new exec connection may take to send
// its request.
const execRequestTimeout = 10 * time.Second

// execRequest is one exec taken off the exec channel by a connection's
// goroutine and handed to the main loop, which alone forks.
type execRequest struct {
	argv, env []string
	dir       string
	fds       [3]int       // stdin, stdout, stderr (close-on-exec here; the init closes them)
	tty       *Tty         // a pty of the sandbox's own for the process, or nil
	reply     chan Message // "started" or "error", then "exit"; buffered, never blocks the loop
	pid       int          // set by the main loop once started
	// master is the pty master (with tty) once started: the connection's
	// goroutine sends it with "started" and closes it, so it never stays
	// in the sandbox.
	master int
}

// signalRequest asks the main loop to signal a started exec.
type signalRequest struct {
	r   *execRequest
	sig syscall.Signal
}

// superviseDaemon is supervise for a daemon-owned sandbox. It starts the
// main program, if any, then serves until the init is killed: it forwards
// the signals it receives to the main program while that runs, reports the
// main program's exit on the control channel (if the spawner still
// listens) without exiting, starts the execs the exec channel asks for,
// reaps every child and hands each exec's exit status to its connection.
//
// Every fork happens here, on the main goroutine, which has been locked to
// the main thread since package initialisation: capabilities, securebits
// and Landlock are per thread, and this is the thread they were applied to
// and checked on. The connection goroutines only parse and reply.
//
// With Config.Execs (a standalone sandbox that serves execs) the same loop
// runs, but the init keeps its parent-death signal, holds no lease lock
// (the spawner does), may run its main program on a pseudo-terminal
// (console: the one opened at start, or nil) and returns once it has
// reported the main program's exit: the init's exit ends every process in
// the PID namespace, execs included.
func superviseDaemon(c ctl, cfg *Config, console *pty) int {
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)

	if cfg.Daemon {
		// The lease lock is what keeps the UID/GID range claimed while
		// no daemon runs: never start anything without it.
		if cfg.LeaseLockFD <= 2 {
			return c.fail("lease lock", fmt.Errorf("daemon mode without the lease lock descriptor"))
		}
		if _, err := unix.FcntlInt(uintptr(cfg.LeaseLockFD), unix.F_GETFD, 0); err != nil {
			return c.fail("lease lock", err)
		}
	}
	var ln *net.UnixListener
	if cfg.ExecFD > 0 {
		var err error
		if ln, err = execListener(cfg.ExecFD); err != nil {
			return c.fail("exec channel", err)
		}
	}
	d := &daemonLoop{c: c, cfg: cfg, live: map[int]*execRequest{}}
	if len(cfg.Argv) > 0 {
		// startMain reports "started" (or the failure) itself; a
		// spawner gone between "go" and here never learnt the sandbox
		// runs, so nothing may.
		pid, err := startMain(c, cfg, console)
		if err != nil {
			return 125
		}
		d.mainPid = pid
	} else if err := c.send(Message{Type: "started"}); err != nil {
		return 125
	}
	execs := make(chan *execRequest)
	sigReqs := make(chan signalRequest)
	if ln != nil {
		go acceptExecs(ln, execs, sigReqs)
	}
	for {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				if d.mainPid > 0 {
					_ = unix.Kill(d.mainPid, sig.(syscall.Signal))
				}
				continue
			}
			if d.reap() && cfg.Execs {
				return 0
			}
		case r := <-execs:
			d.startExec(r)
		case q := <-sigReqs:
			d.signalExec(q)
		}
	}
}

// daemonLoop is the state of superviseDaemon's loop. Only the main
// goroutine uses it: its methods fork and reap.
type daemonLoop struct {
	c       ctl
	cfg     *Config
	mainPid int                  // the main program while it runs, else 0
	live    map[int]*execRequest // started execs not reaped yet, by pid
}

// reap collects every exited child: the main program's exit goes to the
// control channel, an exec's to its connection. It reports whether the
// main program was among them.
func (d *daemonLoop) reap() (mainEnded bool) {
	for {
		var ws unix.WaitStatus
		p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if p <= 0 || err != nil {
			return mainEnded
		}
		switch r := d.live[p]; {
		case p == d.mainPid:
			d.mainPid, mainEnded = 0, true
			if d.cfg.Execs {
				// The spawner lives (else the parent-death signal
				// would have ended the init): it must learn this.
				_ = d.c.send(exitMessage(ws))
				continue
			}
			// Best effort: after a daemon restart nobody listens.
			d.c.trySend(exitMessage(ws))
		case r != nil:
			delete(d.live, p)
			r.reply <- exitMessage(ws)
		}
	}
}

// startExec forks the program an exec request asks for, with the
// sandbox's environment and directory unless it gives its own, on a pty of
// the sandbox's own when it asks for one, and answers "started" or
// "error".
func (d *daemonLoop) startExec(r *execRequest) {
	files := []uintptr{uintptr(r.fds[0]), uintptr(r.fds[1]), uintptr(r.fds[2])}
	env, dir := r.env, r.dir
	if len(env) == 0 {
		env = d.cfg.Env
	}
	if dir == "" {
		dir = d.cfg.Dir
	}
	defer closeFDs(r.fds[:])
	ctty := -1
	var p *pty
	if r.tty != nil {
		var err error
		if p, err = openPty(r.tty); err != nil {
			r.reply <- errorMessage("pty", err)
			return
		}
		// The slave is the process's; the master goes to the
		// connection's goroutine, which sends and closes it.
		defer unix.Close(p.slave)
		for i, on := range []bool{r.tty.Stdin, r.tty.Stdout, r.tty.Stderr} {
			if on {
				files[i] = uintptr(p.slave)
			}
		}
		ctty = r.tty.ctty()
	}
	pid, err := startProcess(r.argv, env, dir, files, ctty)
	if err != nil {
		if p != nil {
			unix.Close(p.master)
		}
		r.reply <- errorMessage("exec", err)
		return
	}
	r.pid = pid
	d.live[pid] = r
	m := Message{Type: "started", Pid: pid}
	if p != nil {
		r.master, m.Tty = p.master, true
	}
	r.reply <- m
}

// signalExec delivers a connection's signal to its exec.
func (d *daemonLoop) signalExec(q signalRequest) {
	// Only a pid this loop has not reaped yet: it is this exec's
	// process (alive or a zombie), never a reused pid. The process
	// leads its own session and group, so the group is signalled,
	// as a terminal would: its children that stayed in the group
	// get the signal too.
	if q.r.pid > 0 && d.live[q.r.pid] == q.r {
		if err := unix.Kill(-q.r.pid, q.sig); err != nil {
			_ = unix.Kill(q.r.pid, q.sig)
		}
	}
}

// startProcess forks and execs argv in its own session with the given
// descriptors as 0, 1 and 2; ctty >= 0 makes that descriptor (a pty
// slave) its controlling terminal, else it has none. Call it only from
// the main loop.
func startProcess(argv, env []string, dir string, files []uintptr, ctty int) (int, error) {
	// Fail closed should a change ever move this off the hardened thread.
	if unix.Gettid() != unix.Getpid() {
		return 0, fmt.Errorf("refusing to start a program from thread %d: only the init's main thread is hardened for exec", unix.Gettid())
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		return 0, err
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if ctty >= 0 {
		sys.Setctty, sys.Ctty = true, ctty
	}
	return syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: files,
		Sys:   sys,
	})
}

func exitMessage(ws unix.WaitStatus) Message {
	m := Message{Type: "exit"}
	if ws.Signaled() {
		m.Signal = int(ws.Signal())
	} else {
		m.Code = ws.ExitStatus()
	}
	return m
}

func errorMessage(step string, err error) Message {
	m := Message{Type: "error", Step: step, Error: err.Error()}
	var e syscall.Errno
	if errors.As(err, &e) {
		m.Errno = int(e)
	}
	return m
}

// trySend sends m without blocking and without SIGPIPE; a spawner that is
// gone (or not reading) just misses it.
func (c ctl) trySend(m Message) {
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	_ = unix.Sendto(c.fd, b, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
}

// execListener wraps the inherited listening socket. It must be an AF_UNIX
// SOCK_SEQPACKET socket; the original descriptor is closed (the listener
// holds a close-on-exec duplicate).
func execListener(fd int) (*net.UnixListener, error) {
	f := os.NewFile(uintptr(fd), "exec-listener")
	defer f.Close()
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	if typ != unix.SOCK_SEQPACKET {
		return nil, fmt.Errorf("exec socket: type %d, want SOCK_SEQPACKET", typ)
	}
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("exec socket: not a Unix socket")
	}
	return ul, nil
}

// acceptExecs serves the exec channel: one goroutine per connection, at
// most MaxExecs at once.
func acceptExecs(ln *net.UnixListener, execs chan<- *execRequest, sigReqs chan<- signalRequest) {
	slots := make(chan struct{}, MaxExecs)
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off rather than spin.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		select {
		case slots <- struct{}{}:
			go func() {
				defer func() { <-slots }()
				serveExec(conn, execs, sigReqs)
			}()
		default:
			go func() {
				// Drop whatever descriptors it sent, then refuse.
				conn.SetDeadline(time.Now().Add(time.Second))
				if fds, err := readRequest(conn, &Message{}); err == nil {
					closeFDs(fds)
				}
				writeMessage(conn, Message{Type: "error", Step: "exec", Error: fmt.Sprintf("too many concurrent execs (%d)", MaxExecs), Errno: int(unix.EAGAIN)})
				conn.Close()
			}()
		}
	}
}

// serveExec serves one exec connection: it reads the request and its three
// descriptors, has the main loop start the process, replies, forwards the
// client's signals, and sends the exit status. Closing the connection
// does not kill the process.
func serveExec(conn *net.UnixConn, execs chan<- *execRequest, sigReqs chan<- signalRequest) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(execRequestTimeout))
	var req Message
	fds, err := readRequest(conn, &req)
	if err == nil && len(fds) != 3 {
		err = fmt.Errorf("an exec carries exactly 3 descriptors (stdin, stdout, stderr), got %d", len(fds))
	}
	if err == nil {
		err = checkRequest(&req)
	}
	if err != nil {
		closeFDs(fds)
		writeMessage(conn, Message{Type: "error", Step: "request", Error: err.Error(), Errno: int(unix.EINVAL)})
		return
	}
	r := &execRequest{argv: req.Argv, env: req.Env, dir: req.Dir, fds: [3]int{fds[0], fds[1], fds[2]}, tty: req.Pty, reply: make(chan Message, 2), master: -1}
	execs <- r
	m := <-r.reply
	if m.Tty {
		// The master leaves the sandbox with this message and is
		// closed here whatever happens.
		err = writeMessageFD(conn, m, r.master)
		unix.Close(r.master)
	} else {
		err = writeMessage(conn, m)
	}
	if err != nil || m.Type != "started" {
		if m.Type == "started" {
			<-r.reply // the loop's exit report; nobody to tell
		}
		return
	}
	conn.SetDeadline(time.Time{})
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return // closed by the client or by the exit below
			}
			var m Message
			if json.Unmarshal(buf[:n], &m) != nil || m.Type != "signal" || m.Signal < 1 || m.Signal > 64 {
				continue
			}
			sigReqs <- signalRequest{r: r, sig: syscall.Signal(m.Signal)}
		}
	}()
	m = <-r.reply
	conn.SetWriteDeadline(time.Now().Add(execRequestTimeout))
	writeMessage(conn, m)
}

// readRequest reads one message and the descriptors that came with it.
// Descriptors arrive close-on-exec (MSG_CMSG_CLOEXEC). A truncated message
// or control block is an error (its descriptors are closed).
func readRequest(conn *net.UnixConn, v *Message) ([]int, error) {
	buf := make([]byte, MaxExecMessage)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	if oobn > 0 {
		cms, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return nil, fmt.Errorf("control message: %w", perr)
		}
		for _, cm := range cms {
			if got, err := unix.ParseUnixRights(&cm); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		closeFDs(fds)
		return nil, fmt.Errorf("an exec carries exactly 3 descriptors (more were sent)")
	}
	if flags&unix.MSG_TRUNC != 0 {
		closeFDs(fds)
		return nil, fmt.Errorf("request larger than %d bytes", MaxExecMessage)
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeFDs(fds)
		return nil, fmt.Errorf("malformed request: %w", err)
	}
	return fds, nil
}

func checkRequest(m *Message) error {
	if m.Type != "exec" {
		return fmt.Errorf("unexpected message %q, want \"exec\"", m.Type)
	}
	if len(m.Argv) == 0 || m.Argv[0] == "" {
		return fmt.Errorf("no program given")
	}
	if m.Pty != nil && m.Pty.ctty() < 0 {
		return fmt.Errorf("a pty for none of stdin, stdout and stderr")
	}
	return nil
}

func writeMessage(conn *net.UnixConn, m Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = conn.Write(b)
	return err
}

// writeMessageFD writes m with exactly one descriptor attached.
func writeMessageFD(conn *net.UnixConn, m Message, fd int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, _, err = conn.WriteMsgUnix(b, unix.UnixRights(fd), nil)
	return err
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
