package dial

import (
	"context"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// connect asks the policy for the checked addresses and connects a socket
// from s.Socket to each in turn, until one answers; it checks the peer is
// the address it connected to. It returns the connected descriptor.
func (s *Server) connect(ctx context.Context, req Request) (int, netip.AddrPort, string) {
	plan, err := s.Policy.Plan(ctx, req.Host, req.Port)
	if err != nil {
		return -1, netip.AddrPort{}, reasonOf(err)
	}
	if len(plan) == 0 {
		return -1, netip.AddrPort{}, ReasonNotDeclared
	}
	for i, ap := range plan {
		if i == maxAddrs || ctx.Err() != nil {
			break
		}
		a := ap.Addr().Unmap()
		fd, err := s.Socket(ctx, a.Is6())
		if err != nil {
			return -1, netip.AddrPort{}, ReasonDialFailed
		}
		if connectFD(ctx, fd, netip.AddrPortFrom(a, ap.Port())) != nil {
			unix.Close(fd)
			continue
		}
		peer, ok := peerOf(fd)
		if !ok || peer.Addr().Unmap() != a || peer.Port() != ap.Port() {
			unix.Close(fd)
			return -1, netip.AddrPort{}, ReasonPeer
		}
		return fd, peer, ""
	}
	return -1, netip.AddrPort{}, ReasonDialFailed
}

// connectFD connects the non-blocking socket fd to ap, waiting at most
// until ctx ends.
func connectFD(ctx context.Context, fd int, ap netip.AddrPort) error {
	var sa unix.Sockaddr
	if ap.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	err := unix.Connect(fd, sa)
	if err == nil {
		return nil
	}
	if err != unix.EINPROGRESS && err != unix.EINTR {
		return err
	}
	for {
		wait := 100 * time.Millisecond
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			wait = max(time.Until(d), time.Millisecond)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, int(wait/time.Millisecond))
		if err != nil && err != unix.EINTR {
			return err
		}
		if n > 0 {
			soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err != nil {
				return err
			}
			if soerr != 0 {
				return unix.Errno(soerr)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// peerOf is a connected socket's peer address.
func peerOf(fd int) (netip.AddrPort, bool) {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return netip.AddrPort{}, false
	}
	switch v := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(v.Addr), uint16(v.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(v.Addr), uint16(v.Port)), true
	}
	return netip.AddrPort{}, false
}
