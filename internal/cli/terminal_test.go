package cli

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// pair opens a pty pair for the test; the slave stands in for cordon's
// terminal.
func pair(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.Fatalf("TIOCGPTPEER: %v", errno)
	}
	t.Cleanup(func() { m.Close() })
	return m, os.NewFile(s, "slave")
}

func lflag(t *testing.T, fd int) uint32 {
	t.Helper()
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio.Lflag
}

// The terminal is restored on a normal stop, on a second stop, and when
// the code holding it panics. Positive control: makeRaw did clear
// ICANON, ECHO and ISIG (so restoring is what sets them again).
func TestTerminalRestored(t *testing.T) {
	for _, how := range []string{"return", "panic"} {
		t.Run(how, func(t *testing.T) {
			_, host := pair(t)
			defer host.Close()
			const cooked = unix.ICANON | unix.ECHO | unix.ISIG
			if lflag(t, int(host.Fd()))&cooked != cooked {
				t.Fatalf("a fresh pty is not in cooked mode")
			}
			inner, innerSlave := pair(t)
			defer innerSlave.Close()
			func() {
				defer func() { _ = recover() }()
				saved, err := makeRaw(int(host.Fd()))
				if err != nil {
					t.Fatal(err)
				}
				term := &terminal{master: inner, in: int(host.Fd()), saved: saved, winch: make(chan os.Signal, 1), copied: make(chan struct{})}
				close(term.copied)
				defer term.stop()
				if lflag(t, int(host.Fd()))&cooked != 0 {
					t.Fatalf("makeRaw left %#x of ICANON|ECHO|ISIG set", lflag(t, int(host.Fd()))&cooked)
				}
				if how == "panic" {
					panic("boom")
				}
				term.stop()
			}()
			if got := lflag(t, int(host.Fd())); got&cooked != cooked {
				t.Errorf("after %s the terminal's lflag = %#x, want ICANON|ECHO|ISIG restored", how, got)
			}
		})
	}
}

func TestTerminalRequestFlag(t *testing.T) {
	if _, err := terminalRequest("sometimes"); err == nil {
		t.Errorf("--tty sometimes accepted")
	}
	if r, err := terminalRequest(ttyNever); r != nil || err != nil {
		t.Errorf("--tty never = %+v, %v; want no terminal", r, err)
	}
	if r, err := terminalRequest(ttyAlways); r == nil || !r.Stdin || err != nil {
		t.Errorf("--tty always = %+v, %v; want a terminal on stdin", r, err)
	}
}
