package testkit

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// PtyPair opens a pseudo-terminal pair of the host's devpts for a test
// (master and slave, neither a controlling terminal, both closed when the
// test ends). A host without /dev/ptmx is Unavailable.
func PtyPair(t testing.TB) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		Unavailable(t, "no /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		m.Close()
		t.Fatalf("TIOCGPTPEER: %v", errno)
	}
	slave = os.NewFile(s, "pty-slave")
	t.Cleanup(func() { m.Close(); slave.Close() })
	return m, slave
}
