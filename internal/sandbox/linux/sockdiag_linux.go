package linux

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cordon-project/cordon/internal/setns"
	"golang.org/x/sys/unix"
)

// A sock_diag socket opened in the sandbox's network namespace answers
// "how many connections wait in the accept queues of its TCP listeners"
// by walking only the listening hash (states = LISTEN), where reading
// /proc/PID/net/tcp walks the host's whole established hash (~4 ms here,
// for every look). Those waiting connections are the only TCP memory no
// cgroup is charged for (see watchTCP), and only this count sees them all:
// one reset while it waits is in no socket table.

// Kernel ABI (linux/sock_diag.h, linux/inet_diag.h, net/tcp_states.h).
const (
	sockDiagByFamily    = 20 // SOCK_DIAG_BY_FAMILY
	sizeofInetDiagReqV2 = 56
	sizeofInetDiagMsg   = 72
	tcpfListen          = 1 << 10 // 1 << TCP_LISTEN
)

// listenDiag is a NETLINK_SOCK_DIAG socket bound to one network namespace.
type listenDiag struct{ fd int }

// openListenDiag opens the socket in the network namespace of pid (a
// locked thread enters it and comes back: package setns).
func openListenDiag(pid int) (*listenDiag, error) {
	fd := -1
	err := setns.Do(fmt.Sprintf("/proc/%d/ns/net", pid), unix.CLONE_NEWNET, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		return err
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	return &listenDiag{fd: fd}, nil
}

func (d *listenDiag) Close() error { return unix.Close(d.fd) }

// waiting returns the connections waiting in the accept queues of the
// namespace's TCP listeners (IPv4 and IPv6) and the number of listeners.
func (d *listenDiag) waiting() (conns, listeners int, err error) {
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		c, l, err := d.dump(fam)
		if err != nil {
			return 0, 0, err
		}
		conns, listeners = conns+c, listeners+l
	}
	return conns, listeners, nil
}

func (d *listenDiag) dump(family uint8) (conns, listeners int, err error) {
	req := make([]byte, unix.NLMSG_HDRLEN+sizeofInetDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], tcpfListen)
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, fmt.Errorf("sock_diag request: %w", err)
	}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("sock_diag answer: %w", err)
		}
		c, l, done, err := parseListenDiag(buf[:n])
		if err != nil {
			return 0, 0, err
		}
		conns, listeners = conns+c, listeners+l
		if done {
			return conns, listeners, nil
		}
	}
}

var errDiagAnswer = errors.New("sock_diag answer malformed")

// parseListenDiag reads one datagram of a sock_diag dump of listeners:
// the accept-queue lengths (idiag_rqueue of a listener) summed, the
// listeners counted, and whether the dump is over.
func parseListenDiag(b []byte) (conns, listeners int, done bool, err error) {
	ne := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < unix.NLMSG_HDRLEN {
			return 0, 0, false, errDiagAnswer
		}
		l := int(ne.Uint32(b[0:]))
		typ := ne.Uint16(b[4:])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return 0, 0, false, errDiagAnswer
		}
		body := b[unix.NLMSG_HDRLEN:l]
		switch typ {
		case unix.NLMSG_DONE:
			return conns, listeners, true, nil
		case unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if e := int32(ne.Uint32(body)); e != 0 {
					return 0, 0, false, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
				}
			}
			return 0, 0, false, errDiagAnswer
		case sockDiagByFamily:
			if len(body) < sizeofInetDiagMsg {
				return 0, 0, false, errDiagAnswer
			}
			// family, state, timer, retrans, the 48-byte id, expires, rqueue.
			if body[1] == 10 { // TCP_LISTEN
				conns += int(ne.Uint32(body[4+48+4:]))
				listeners++
			}
		}
		b = b[min(nlmsgAlign(l), len(b)):]
	}
	return conns, listeners, false, nil
}

func nlmsgAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }
