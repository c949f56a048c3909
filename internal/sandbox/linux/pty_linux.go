package linux

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

var _ sandbox.TerminalHolder = (*linuxSandbox)(nil)

// ttyConfig is the init's part of a terminal request.
func ttyConfig(t *sandbox.Terminal) *sbinit.Tty {
	if t == nil {
		return nil
	}
	return &sbinit.Tty{Stdin: t.Stdin, Stdout: t.Stdout, Stderr: t.Stderr, Rows: t.Rows, Cols: t.Cols}
}

// maxControlFDs is room for more descriptors than any message may carry,
// so that one too many is seen (and refused) rather than cut off.
const maxControlFDs = 4

// recvControl reads one control message and the descriptors attached to
// it (received close-on-exec). A truncated message or descriptor list is
// an error; the descriptors received are closed then.
func recvControl(ctl *os.File, buf []byte) (n int, fds []*os.File, err error) {
	rc, err := ctl.SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	oob := make([]byte, unix.CmsgSpace(maxControlFDs*4))
	var oobn, flags int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			if rerr != unix.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, nil, err
	}
	if rerr != nil {
		return 0, nil, rerr
	}
	if oobn > 0 {
		if fds, err = parseRights(oob[:oobn]); err != nil {
			return 0, nil, err
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(fds)
		return 0, nil, errors.New("truncated control message")
	}
	return n, fds, nil
}

// parseRights returns the descriptors of SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var out []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("control message: %w", err)
		}
		for _, fd := range fds {
			out = append(out, os.NewFile(uintptr(fd), "pty-master"))
		}
	}
	return out, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// ptmxMinor is the minor number of /dev/ptmx (major 5, TTYAUX_MAJOR):
// every pty master, of any devpts instance, is an open of it.
const ptmxMajor, ptmxMinor = 5, 2

// checkMaster fails closed unless fds is exactly one descriptor and that
// descriptor is a pseudo-terminal master: a character device 5:2 that
// answers TIOCGPTN (only a master does). Anything else is closed.
func checkMaster(fds []*os.File) (*os.File, error) {
	if len(fds) != 1 {
		closeAll(fds)
		return nil, fmt.Errorf("the sandbox init sent %d descriptors with its terminal, want exactly 1", len(fds))
	}
	f := fds[0]
	if err := isPtyMaster(int(f.Fd())); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CheckPtyMaster fails unless f is a pseudo-terminal master (character
// device 5:2 that answers TIOCGPTN): for a master that crossed a socket
// from elsewhere (the daemon's exec with a terminal, its client).
func CheckPtyMaster(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = isPtyMaster(int(fd)) }); err != nil {
		return err
	}
	return cerr
}

func isPtyMaster(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat the terminal descriptor: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != ptmxMajor || unix.Minor(st.Rdev) != ptmxMinor {
		return fmt.Errorf("the terminal descriptor is not a pty master (mode %#o, device %d:%d)", st.Mode&unix.S_IFMT, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if _, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN); err != nil {
		return fmt.Errorf("the terminal descriptor is not a pty master (TIOCGPTN: %v)", err)
	}
	return nil
}

// Master returns the program's pty master once (sandbox.TerminalHolder).
func (sb *linuxSandbox) Master() *os.File {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	m := sb.master
	sb.master = nil
	return m
}

// takeMaster checks what came with the "started" message: nothing
// without a terminal request, exactly one pty master with one — and
// nothing when the console was handed out at Start (receiveConsole).
func (sb *linuxSandbox) takeMaster(m sbinit.Message, fds []*os.File) error {
	if sb.consoleAtStart() {
		closeAll(fds)
		if m.Tty || len(fds) > 0 {
			return fmt.Errorf("the sandbox init sent a terminal with \"started\" (%d descriptors) after it had handed out the console", len(fds))
		}
		return nil
	}
	if sb.spec.Terminal == nil || !m.Tty {
		closeAll(fds)
		if sb.spec.Terminal != nil || m.Tty || len(fds) > 0 {
			return fmt.Errorf("the sandbox init answered a terminal request wrongly (requested %t, reported %t, %d descriptors)", sb.spec.Terminal != nil, m.Tty, len(fds))
		}
		return nil
	}
	f, err := checkMaster(fds)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	sb.master = f
	sb.mu.Unlock()
	return nil
}

// initStdio is what the init's descriptors 0, 1 and 2 are. Where the
// program gets the terminal instead (Spec.Terminal), the init gets
// /dev/null (exec.Cmd's nil): it never holds the descriptor the terminal
// replaces, so nothing in the sandbox can reach the caller's own
// terminal through it (/proc/1/fd).
func initStdio(spec sandbox.Spec) (stdin io.Reader, stdout, stderr io.Writer) {
	stdin, stdout, stderr = spec.Stdin, spec.Stdout, spec.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	if t := spec.Terminal; t != nil {
		if t.Stdin {
			stdin = nil
		}
		if t.Stdout {
			stdout = nil
		}
		if t.Stderr {
			stderr = nil
		}
	}
	return stdin, stdout, stderr
}
