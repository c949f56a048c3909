package cli

import (
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// --tty values.
const (
	ttyAuto   = "auto"
	ttyAlways = "always"
	ttyNever  = "never"
)

// isTTY reports whether fd is a terminal.
func isTTY(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// terminalRequest is the pseudo-terminal cordon run asks the sandbox
// for: with --tty auto (the default) when any of stdin, stdout and stderr
// is a terminal, with always in any case, never with never. Each of the
// program's descriptors 0, 1 and 2 is the sandbox's terminal where
// cordon's own is a terminal (stdin always with --tty always); the others
// stay cordon's (cordon run -- prog > file keeps the file, echo x |
// cordon run -- prog keeps the pipe). So with auto the program never
// holds the user's terminal, whichever of its descriptors is one: what it
// does to a terminal it holds (termios, exclusive mode, flow control)
// stays after it ends.
func terminalRequest(mode string) (*sandbox.Terminal, error) {
	in, out, errOut := isTTY(0), isTTY(1), isTTY(2)
	switch mode {
	case ttyNever:
		return nil, nil
	case ttyAuto:
		if !in && !out && !errOut {
			return nil, nil
		}
	case ttyAlways:
		in = true
	default:
		return nil, failure.Failf(failure.KindUsage, "run", "--tty %q: want auto, always or never", mode)
	}
	t := &sandbox.Terminal{Stdin: in, Stdout: out, Stderr: errOut}
	if ws, ok := hostWinsize(); ok {
		t.Rows, t.Cols = ws.Row, ws.Col
	}
	return t, nil
}

// hostWinsize is the window size of cordon's own terminal.
func hostWinsize() (*unix.Winsize, bool) {
	for _, fd := range []int{0, 1, 2} {
		if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
			return ws, true
		}
	}
	return nil, false
}

// terminal is cordon run's side of the program's pseudo-terminal: the
// host terminal in raw mode, input copied to the master, the master's
// output copied out, and the window size followed. Its stop restores the
// host terminal on every path (it is deferred where the terminal is
// made raw, so it runs on returns and panics alike).
type terminal struct {
	master *os.File
	out    io.Writer
	in     int           // cordon's terminal: descriptor 0
	saved  *unix.Termios // its settings before raw mode; nil if not raw
	winch  chan os.Signal
	copied chan struct{} // closed when the master's output is drained
	quit   *os.File      // closed by stop: copyIn takes no more input
	inDone chan struct{} // closed when copyIn has returned
	once   sync.Once
}

// rawTerminal puts cordon's terminal (descriptor 0, when it is one) in
// raw mode before the program starts: from its first instant Ctrl-C,
// Ctrl-Z and Ctrl-\ are bytes queued for its terminal, never a signal to
// cordon (which forwards SIGINT and ends the sandbox). The caller defers
// stop, which restores it on every path.
func rawTerminal() (*terminal, error) {
	t := &terminal{in: 0}
	if isTTY(0) {
		saved, err := makeRaw(0)
		if err != nil {
			return nil, failure.Fail(failure.KindStart, "terminal raw mode", err)
		}
		t.saved = saved
	}
	return t, nil
}

// attach takes the program's pty master from the sandbox and connects it
// to cordon's own descriptors. It fails closed: a sandbox that was asked
// for a terminal and has none to give is an error, never a fallback to
// cordon's terminal.
func (t *terminal) attach(sb sandbox.Sandbox, req *sandbox.Terminal, stdout, stderr io.Writer) error {
	th, ok := sb.(sandbox.TerminalHolder)
	var m *os.File
	if ok {
		m = th.Master()
	}
	if m == nil {
		return failure.Failf(failure.KindStart, "terminal", "the sandbox gave no pseudo-terminal for the program")
	}
	return t.connect(m, req.Stdin, stdout, stderr)
}

// attachMaster is attach for a pty master that crossed a socket (sandbox
// exec's, checked by whoever handed it over): cordon's terminal is made
// raw and connected to m, stdin included. m is the terminal's from then
// on, closed by its stop (or here, on error).
func attachMaster(m *os.File, stdout, stderr io.Writer) (*terminal, error) {
	t, err := rawTerminal()
	if err != nil {
		m.Close()
		return nil, err
	}
	if err := t.connect(m, true, stdout, stderr); err != nil {
		t.stop() // connect set t.master: stop closes it
		return nil, err
	}
	return t, nil
}

// connect relays between the master m and cordon's own descriptors, and
// cordon's input to m when stdin is on the terminal.
func (t *terminal) connect(m *os.File, stdin bool, stdout, stderr io.Writer) error {
	t.master, t.out, t.winch, t.copied = m, stdout, make(chan os.Signal, 1), make(chan struct{})
	if !isTTY(1) && isTTY(2) {
		// The program's stdout goes elsewhere (a file): the terminal's
		// echo and what the program writes on it belong on the terminal.
		t.out = stderr
	}
	signal.Notify(t.winch, syscall.SIGWINCH)
	go t.followWinch()
	go func() {
		relayOut(t.out, m)
		close(t.copied)
	}()
	if !stdin {
		// The program reads cordon's stdin itself (a pipe, a file).
		return nil
	}
	qr, qw, err := os.Pipe()
	if err != nil {
		return failure.Fail(failure.KindStart, "terminal", err)
	}
	t.quit, t.inDone = qw, make(chan struct{})
	go t.copyIn(qr)
	return nil
}

// copyIn copies cordon's input (t.in) to the master until it ends or stop
// closes t.quit. It waits in poll(2) for either, never in a read: once
// stop has run nothing more is taken from the user's terminal, so a
// command typed while cordon tears down stays queued for the user's
// shell instead of going to a master that is gone. It never closes the
// master (its end is the program's, not cordon's stdin's).
func (t *terminal) copyIn(quit *os.File) {
	defer func() {
		quit.Close()
		if t.inDone != nil {
			close(t.inDone)
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(t.in), Events: unix.POLLIN}, {Fd: int32(quit.Fd()), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return // stop
		}
		n, err := unix.Read(t.in, buf)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err != nil:
			return
		case n == 0:
			if t.saved == nil {
				// --tty always with stdin a pipe or a file: its end is an
				// end-of-file character for the line discipline (^D).
				_, _ = t.master.Write([]byte{4})
			}
			return
		}
		if _, err := t.master.Write(buf[:n]); err != nil {
			return
		}
	}
}

// relayOut copies the program's terminal output to out until the master
// reads EIO (every process inside has closed the terminal). A write error
// on out (the reader of a pipe gone: cordon run -- prog 2>&1 | head)
// neither ends cordon nor stalls the program: the Go runtime kills a
// process whose write to descriptor 1 or 2 meets a broken pipe (SIGPIPE),
// which would leave the user's terminal raw and the sandbox to the
// reclaimer, so out is written through a descriptor of its own; after a
// failed write the rest is read and dropped.
func relayOut(out io.Writer, m io.Reader) {
	if f, ok := out.(*os.File); ok {
		if fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3); err == nil {
			dup := os.NewFile(uintptr(fd), f.Name())
			defer dup.Close()
			out = dup
		}
	}
	_, _ = io.Copy(&dropAfterError{w: out}, m)
}

// dropAfterError writes to w until a write fails, then drops everything.
type dropAfterError struct {
	w      io.Writer
	failed bool
}

func (d *dropAfterError) Write(p []byte) (int, error) {
	if !d.failed {
		if _, err := d.w.Write(p); err != nil {
			d.failed = true
		}
	}
	return len(p), nil
}

// makeRaw puts fd in raw mode (cfmakeraw(3)) and returns its settings
// before. In raw mode Ctrl-C, Ctrl-Z and Ctrl-\ are bytes: they reach
// the sandbox's line discipline, which signals the program's foreground
// process group, and never cordon.
func makeRaw(fd int) (*unix.Termios, error) {
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return saved, nil
}

// followWinch copies cordon's window size to the master on every
// SIGWINCH; the kernel then signals the pty's foreground process group.
func (t *terminal) followWinch() {
	for range t.winch {
		if ws, ok := hostWinsize(); ok {
			_ = unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
		}
	}
}

// drainWait bounds how long stop waits for the master's output after the
// program ended (every process inside is gone by then: EIO comes at once).
const drainWait = 2 * time.Second

// stop drains the master's output, restores cordon's terminal and closes
// the master. Safe to call more than once and on every path.
func (t *terminal) stop() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		if t.quit != nil {
			t.quit.Close()
			if t.inDone != nil {
				// copyIn returns at once (it waits in poll on quit): after
				// stop nothing more is read from the user's terminal.
				select {
				case <-t.inDone:
				case <-time.After(drainWait):
				}
			}
		}
		if t.master != nil {
			signal.Stop(t.winch)
			close(t.winch)
			select {
			case <-t.copied:
			case <-time.After(drainWait):
			}
		}
		t.restore()
		if t.master != nil {
			t.master.Close()
		}
	})
}

// restore puts cordon's terminal back as it was.
func (t *terminal) restore() {
	if t.saved != nil {
		_ = unix.IoctlSetTermios(t.in, unix.TCSETS, t.saved)
	}
}
