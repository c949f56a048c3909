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
// for: with --tty auto (the default) when stdin is a terminal, with
// always in any case, never with never. Each of the program's
// descriptors 0, 1 and 2 is the sandbox's terminal where cordon's own is
// a terminal (stdin always, when one is asked for); the others stay
// cordon's (cordon run -- prog > file keeps the file).
func terminalRequest(mode string) (*sandbox.Terminal, error) {
	switch mode {
	case ttyNever:
		return nil, nil
	case ttyAuto:
		if !isTTY(0) {
			return nil, nil
		}
	case ttyAlways:
	default:
		return nil, failure.Failf(failure.KindUsage, "run", "--tty %q: want auto, always or never", mode)
	}
	t := &sandbox.Terminal{Stdin: true, Stdout: isTTY(1), Stderr: isTTY(2)}
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
	once   sync.Once
}

// attachTerminal takes the program's pty master from the sandbox and
// connects it to cordon's own descriptors. It fails closed: a sandbox that
// was asked for a terminal and has none to give is an error, never a
// fallback to cordon's terminal.
func attachTerminal(sb sandbox.Sandbox, stdout, stderr io.Writer) (*terminal, error) {
	th, ok := sb.(sandbox.TerminalHolder)
	var m *os.File
	if ok {
		m = th.Master()
	}
	if m == nil {
		return nil, failure.Failf(failure.KindStart, "terminal", "the sandbox gave no pseudo-terminal for the program")
	}
	t := &terminal{master: m, out: stdout, in: 0, winch: make(chan os.Signal, 1), copied: make(chan struct{})}
	if !isTTY(1) && isTTY(2) {
		// The program's stdout goes elsewhere (a file): the terminal's
		// echo and what the program writes on it belong on the terminal.
		t.out = stderr
	}
	if isTTY(0) {
		saved, err := makeRaw(0)
		if err != nil {
			m.Close()
			return nil, failure.Fail(failure.KindStart, "terminal raw mode", err)
		}
		t.saved = saved
	}
	signal.Notify(t.winch, syscall.SIGWINCH)
	go t.followWinch()
	go func() {
		// Until EIO: every process inside has closed the terminal.
		_, _ = io.Copy(t.out, m)
		close(t.copied)
	}()
	go func() {
		// Blocks in read(0) until input comes; never closes the master
		// (its end is the program's, not cordon's stdin's).
		if _, err := io.Copy(m, os.Stdin); err == nil && t.saved == nil {
			// --tty always with stdin a pipe or a file: its end is an
			// end-of-file character for the line discipline (^D).
			_, _ = m.Write([]byte{4})
		}
	}()
	return t, nil
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
		signal.Stop(t.winch)
		close(t.winch)
		select {
		case <-t.copied:
		case <-time.After(drainWait):
		}
		t.restore()
		t.master.Close()
	})
}

// restore puts cordon's terminal back as it was.
func (t *terminal) restore() {
	if t.saved != nil {
		_ = unix.IoctlSetTermios(t.in, unix.TCSETS, t.saved)
	}
}
