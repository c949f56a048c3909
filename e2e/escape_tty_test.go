package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

// pty is a pseudo-terminal in raw mode: the master, a slave descriptor
// for the process under test, and a second, non-blocking slave descriptor
// of the test's own, to look at the terminal's input queue.
type pty struct {
	master *os.File
	slave  *os.File // blocking, handed to the child as stdin/stdout/stderr
	peek   int      // non-blocking, never a controlling terminal
}

func newPty(t *testing.T) *pty {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	s, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	peek, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	// Raw: an injected byte is readable at once, not held for a newline.
	tio, err := unix.IoctlGetTermios(s, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag &^= unix.CSIZE | unix.PARENB
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(s, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	p := &pty{master: os.NewFile(uintptr(m), "ptmx"), slave: os.NewFile(uintptr(s), name), peek: peek}
	t.Cleanup(func() {
		p.master.Close()
		p.slave.Close()
		unix.Close(p.peek)
	})
	return p
}

// session is the SysProcAttr of a process that starts a new session with
// the pty (its stdin) as the controlling terminal, as a login shell has.
func (p *pty) session() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
}

// run starts cmd on the pty as its controlling terminal, waits for it, and
// returns what it wrote to the terminal.
func (p *pty) run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = p.session()
	} else {
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var out bytes.Buffer
	buf := make([]byte, 4096)
	deadline := time.Now().Add(90 * time.Second)
	for {
		_ = p.master.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, _ := p.master.Read(buf)
		out.Write(buf[:n])
		select {
		case <-done:
			if n == 0 {
				return strings.ReplaceAll(out.String(), "\r", "")
			}
			continue
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("%v on the pty did not end in 90s; output so far: %s", cmd.Args, out.String())
		}
	}
}

// queued returns what is waiting in the terminal's input queue (what a
// shell reading the terminal would get next), without blocking.
func (p *pty) queued(t *testing.T) string {
	t.Helper()
	n, err := unix.IoctlGetInt(p.peek, unix.TIOCINQ)
	if err != nil {
		t.Fatalf("TIOCINQ: %v", err)
	}
	buf := make([]byte, 256)
	r, err := unix.Read(p.peek, buf)
	if err != nil && err != unix.EAGAIN {
		t.Fatalf("read the terminal's input: %v", err)
	}
	if r < 0 {
		r = 0
	}
	if n > 0 && r == 0 {
		t.Fatalf("TIOCINQ says %d bytes are queued but none could be read", n)
	}
	return string(buf[:r])
}

// ttyNever runs the program on cordon's own descriptors (the user's
// terminal), as without a terminal on stdin.
var ttyNever = []string{"--tty", "never"}

// TestEscapeTIOCSTI: the program, whose stdin/stdout are the user's
// terminal (--tty never), cannot push keystrokes into it: nothing reaches the terminal's
// input queue. Two layers deny it, each shown alone: seccomp (root on the
// host, on its own controlling terminal, with the filter: EPERM) and the
// program's own session (without seccomp: not its controlling terminal,
// EPERM). The probe on the host, on its controlling terminal as an
// ordinary user, does inject, and the test sees it.
func TestEscapeTIOCSTI(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	cordonCmd := func(bin, state string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"--state-dir", state}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		return cmd
	}
	for _, tc := range []struct {
		name string
		bin  string
		args []string
		want map[string]string
	}{
		// --tty never: the program holds the user's terminal itself.
		{"production", cordonBin, probeArgs(ttyNever, "tiocsti"),
			map[string]string{"fd0": "EPERM", "fd1": "EPERM", "fd2": "EPERM", "dev_tty": "ENXIO"}},
		{"without seccomp", hooksBin, withoutLayer("seccomp", probeArgs(append(ttyNever, lowerLevel...), "tiocsti")),
			map[string]string{"tiocsctty": "EPERM", "fd0": "EPERM", "fd1": "EPERM", "fd2": "EPERM", "dev_tty": "ENXIO"}},
		// The default: the program's terminal is a pty of the sandbox's
		// own (docs/terminals.md). Seccomp still denies TIOCSTI on it.
		{"own pty", cordonBin, probeArgs(nil, "tiocsti"),
			map[string]string{"fd0": "EPERM", "fd1": "EPERM", "fd2": "EPERM", "dev_tty": "EPERM"}},
		// Without seccomp the injection succeeds, into the sandbox's own
		// pty (its echo comes back as the program's output): the user's
		// terminal's queue stays empty, checked below for every case.
		{"own pty, without seccomp", hooksBin, withoutLayer("seccomp", probeArgs(lowerLevel, "tiocsti")),
			map[string]string{"fd0": "ok", "dev_tty": "ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPty(t)
			out := p.run(t, cordonCmd(tc.bin, newStateDir(t), tc.args...))
			got := attempts(t, parseProbe(out))
			if q := p.queued(t); q != "" {
				t.Errorf("%s: the terminal's input queue holds %q after the attempt, want nothing", tc.name, q)
			}
			wantAttempts(t, tc.name, got, tc.want)
		})
	}

	t.Run("host probe on its controlling terminal injects", func(t *testing.T) {
		t.Parallel()
		p := newPty(t)
		cmd := exec.Command(probeDir+"/probe", "tiocsti")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: wsOwner, Gid: wsOwner, Groups: []uint32{}}}
		got := attempts(t, parseProbe(p.run(t, cmd)))
		if q := p.queued(t); got["fd0"] != "ok" || !strings.Contains(q, "X") {
			t.Errorf("host probe: TIOCSTI = %v, queue %q; want ok and an X queued", got, q)
		}
	})
	t.Run("seccomp alone denies it to root on its terminal", func(t *testing.T) {
		t.Parallel()
		for _, withFilter := range []bool{false, true} {
			p := newPty(t)
			res := runFilterChild(t, "tiocsti", withFilter, "", p.slave, p.session())
			q := p.queued(t)
			switch {
			case !withFilter && (!res.OK || q != "X"):
				t.Errorf("root without the filter: TIOCSTI = %+v, queue %q; want ok and X", res, q)
			case withFilter && (res.OK || res.Errno != "EPERM" || q != ""):
				t.Errorf("root with the filter: TIOCSTI = %+v, queue %q; want EPERM and nothing", res, q)
			}
		}
	})
}
