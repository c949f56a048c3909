package probes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"golang.org/x/sys/unix"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.tty.tiocsti",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: the user's terminal (keystroke injection)",
		Title:  "TIOCSTI from the program, on the user's terminal (--tty never) or its own pty, queues nothing on the user's terminal",
		Run:    tiocsti,
	})
}

// termPty is a pseudo-terminal the probe owns, standing for the user's
// terminal: the slave is the child's stdin/stdout/stderr and controlling
// terminal; peek, a second non-blocking slave descriptor, reads its input
// queue.
type termPty struct {
	master, slave *os.File
	peek          int
}

func newTermPty(e *conformance.Env) (*termPty, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	p := &termPty{master: os.NewFile(uintptr(m), "ptmx"), peek: -1}
	e.Cleanup(p.close)
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return nil, err
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	s, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	p.slave = os.NewFile(uintptr(s), name)
	if p.peek, err = unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
		return nil, err
	}
	// Raw: an injected byte is readable at once, not held for a newline.
	tio, err := unix.IoctlGetTermios(s, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag = tio.Cflag&^(unix.CSIZE|unix.PARENB) | unix.CS8
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	return p, unix.IoctlSetTermios(s, unix.TCSETS, tio)
}

func (p *termPty) close() {
	p.master.Close()
	if p.slave != nil {
		p.slave.Close()
	}
	if p.peek >= 0 {
		unix.Close(p.peek)
	}
}

// run starts cmd in a new session with the pty as its controlling
// terminal and stdio, drains what it writes, and waits (up to 60 s).
func (p *termPty) run(cmd *exec.Cmd) (string, error) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var out []byte
	buf := make([]byte, 4096)
	for deadline := time.Now().Add(60 * time.Second); ; {
		_ = p.master.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, _ := p.master.Read(buf)
		out = append(out, buf[:n]...)
		select {
		case <-done:
			if n == 0 {
				return string(out), nil
			}
			continue
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return string(out), fmt.Errorf("%v on the pty did not end in 60s", cmd.Args)
		}
	}
}

// queued is what waits in the terminal's input queue (what a shell
// reading the terminal would get next), read without blocking.
func (p *termPty) queued() (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Read(p.peek, buf)
	if err == unix.EAGAIN || n <= 0 {
		return "", nil
	}
	return string(buf[:n]), err
}

// tiocsti: cordon runs the program with a probe-owned pty as the user's
// terminal, once holding it itself (--tty never) and once on the
// sandbox's own pty (the default); the program pushes 'X' into every
// terminal it has. The host reads the user's terminal's input queue:
// empty. Control: the same op on the host, as an ordinary uid whose
// controlling terminal is a second pty, queues its 'X' there.
func tiocsti(ctx context.Context, e *conformance.Env) conformance.Outcome {
	var facts []record.Fact
	var hint string
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"--tty never", []string{"--tty", "never"}}, {"its own pty", nil}} {
		p, err := newTermPty(e)
		if err != nil {
			return conformance.Outcome{NotEvidenced: "cannot open a pseudo-terminal on this host: " + err.Error()}
		}
		args := []string{"--state-dir", e.StateDir()}
		if e.Provider != "" {
			args = append(args, "--provider", e.Provider)
		}
		args = append(args, "run")
		if e.Level != "" {
			args = append(args, "--level", e.Level)
		}
		args = append(append(args, mode.flags...), "--ro", e.Bin+":"+conformance.ProbeBin, "--", conformance.ProbeBin, "__probe", "tiocsti")
		cmd := exec.CommandContext(ctx, e.Bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "TERM=xterm"}
		out, err := p.run(cmd)
		if err != nil {
			return broke(err)
		}
		q, err := p.queued()
		if err != nil {
			return broke(err)
		}
		report := opLine(out)
		hint += mode.name + ": " + report + "\n"
		code := cmd.ProcessState.ExitCode()
		// A run that never ran the op would leave the queue empty too.
		facts = append(facts, fact("cordon run ("+mode.name+") ran the op to a normal end", "exit 0 and the op's report", fmt.Sprintf("exit %d, report %v", code, report != ""), code == 0 && report != "", "cordon's exit status; the terminal's output"))
		facts = append(facts, fact("bytes queued on the user's terminal after the program's TIOCSTI ("+mode.name+")", "none", fmt.Sprintf("%q", q), q == "", "read of the probe's pty (the user's terminal) on the host"))
	}
	c, err := newTermPty(e)
	if err != nil {
		return broke(err)
	}
	cmd := exec.CommandContext(ctx, e.Bin, "__probe", "tiocsti")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = e.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: wsOwnerUID, Gid: wsOwnerUID, Groups: []uint32{}}}
	if _, err := c.run(cmd); err != nil {
		return broke(err)
	}
	cq, err := c.queued()
	if err != nil {
		return broke(err)
	}
	facts = append(facts, control("bytes the same op, on the host as uid 2345, queued on its controlling terminal", "X", fmt.Sprintf("%q", cq), len(cq) > 0 && cq[0] == 'X', "read of the probe's second pty on the host"))
	return conformance.Outcome{Hint: hint, Facts: facts}
}

// opLine is the probe op's report line in a terminal's output ("" if none).
func opLine(out string) string {
	for _, l := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
		if strings.HasPrefix(l, `{"op"`) {
			return l
		}
	}
	return ""
}
