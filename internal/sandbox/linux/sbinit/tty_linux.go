package sbinit

import (
	"encoding/json"
	"fmt"

	"golang.org/x/sys/unix"
)

// pty is a pseudo-terminal the init opened in the sandbox's own devpts
// instance for the program (Config.Tty).
type pty struct{ master, slave int }

// openPty opens a pseudo-terminal in the sandbox's devpts instance. It
// runs after hardening, exactly as the program itself could: /dev/ptmx is
// the private instance's ptmx (bounded by MaxPtys), the slave is owned by
// the program's uid, and Landlock and seccomp already apply.
func openPty(t *Tty) (*pty, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fail := func(op string, err error) (*pty, error) {
		unix.Close(m)
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlock the pty", err)
	}
	if t.Rows > 0 && t.Cols > 0 {
		if err := unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: t.Rows, Col: t.Cols}); err != nil {
			return fail("set the window size", err)
		}
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return fail("open the pty slave (TIOCGPTPEER)", errno)
	}
	return &pty{master: m, slave: int(s)}, nil
}

// files are the program's descriptors 0, 1 and 2: the slave where the
// trusted side asked for it, else the init's own.
func (p *pty) files(t *Tty) []uintptr {
	f := []uintptr{0, 1, 2}
	for i, on := range []bool{t.Stdin, t.Stdout, t.Stderr} {
		if on {
			f[i] = uintptr(p.slave)
		}
	}
	return f
}

// ctty is the program's descriptor that is the slave, made its
// controlling terminal (Setctty), or -1 when none is.
func (t *Tty) ctty() int {
	for i, on := range []bool{t.Stdin, t.Stdout, t.Stderr} {
		if on {
			return i
		}
	}
	return -1
}

// close closes what is still open of the pair (-1: already closed).
func (p *pty) close() {
	for _, fd := range []*int{&p.master, &p.slave} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// sendFD sends m with exactly one descriptor attached (SCM_RIGHTS).
func (c ctl) sendFD(m Message, fd int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return unix.Sendmsg(c.fd, b, unix.UnixRights(fd), nil, 0)
}
