package proc

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox/linux/filter"
)

// SocketSource is the argument (after Argv0) that makes the process the
// sandbox's socket source.
const SocketSource = "sockets"

// Requests of the socket source's channel: one byte each.
const (
	SourceTCP4 = '4'
	SourceTCP6 = '6'
)

// sourceMain is the socket source: the one helper process per sandbox in
// the host's network namespace and the gateway's cgroups. The checked
// dialer (root) asks it for an unconnected TCP socket and connects that
// socket itself: a socket's memory is charged to the cgroup of the task
// that created it, so the upstream sockets a broker process uses are
// charged to the sandbox's gateway group (which the trusted side
// watches), as they were when the gateway dialled them itself, not to the
// privileged side. It reads only one-byte requests from the privileged
// side, never agent or upstream bytes; its filter lets it create IP
// sockets and refuses connect, bind, listen and accept.
func sourceMain() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "gateway", "broker", SocketSource)
	fail := func(step string, err error) int {
		log.Error("gateway failed", "step", step, "err", err)
		return 1
	}
	if err := hardenEarly(); err != nil {
		return fail("harden", err)
	}
	if err := hardenFS(); err != nil {
		return fail("harden", err)
	}
	p, err := filter.BuildSocketSource()
	if err == nil {
		err = filter.Install(p)
	}
	if err != nil {
		return fail("seccomp", err)
	}
	c, err := net.FileConn(os.NewFile(ConfigFD, "source"))
	if err != nil {
		return fail("channel", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fail("channel", fmt.Errorf("not a Unix socket"))
	}
	buf := make([]byte, 1)
	for {
		n, _, _, _, err := uc.ReadMsgUnix(buf, nil)
		if err != nil || n != 1 {
			return 0 // the privileged side closed the channel
		}
		family := unix.AF_INET
		if buf[0] == SourceTCP6 {
			family = unix.AF_INET6
		} else if buf[0] != SourceTCP4 {
			return fail("request", fmt.Errorf("unknown request %q", buf[0]))
		}
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			// An empty answer: the privileged side refuses the dial.
			_, _, _ = uc.WriteMsgUnix([]byte{0}, nil, nil)
			continue
		}
		_, _, err = uc.WriteMsgUnix([]byte{1}, unix.UnixRights(fd), nil)
		unix.Close(fd)
		if err != nil {
			return 0
		}
	}
}
