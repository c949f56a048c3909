package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/gateway/dial"
	"github.com/cordon-project/cordon/internal/setns"
)

// The declared inbound routes (internal/broker/ingress): the one
// exception to "every listener is inside the sandbox". Each route's
// listener is opened here, in the HOST's network namespace, on the
// address the configuration declares (loopback unless unsafe_listen);
// the ingress broker process accepts on it and, for each connection the
// authority admits, asks the checked dialer for a connection to
// 127.0.0.1:<port> INSIDE the sandbox: the socket is created on a thread
// that joined the sandbox's network namespace (held open by descriptor
// from the start, so a recycled pid never redirects it), then connected
// by the dialer. Nothing routes from the host's namespace into the
// sandbox's; only the declared ports on its loopback are dialled.

// ErrIngressListen is a route whose host address cannot be listened on
// (in use, not an address of this host, no permission).
var ErrIngressListen = errors.New("ingress: cannot listen on the route's host address")

// listenIngress opens each route's listener on the host and returns the
// files (for the ingress broker process) and the bound addresses (port 0
// resolved). On any failure nothing stays open.
func listenIngress(routes []ingress.Route) ([]*os.File, []string, error) {
	var files []*os.File
	var addrs []string
	fail := func(err error) ([]*os.File, []string, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	for _, r := range routes {
		ap, err := netip.ParseAddrPort(r.Listen)
		if err != nil {
			return fail(fmt.Errorf("%w: route %s: %q is not an address and port", ErrIngressListen, r.Name, r.Listen))
		}
		l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
		if err != nil {
			why := err
			if errors.Is(err, syscall.EADDRINUSE) {
				why = errors.New("address already in use (another program, or another sandbox's route, listens there)")
			}
			return fail(fmt.Errorf("%w: route %s on %s: %v", ErrIngressListen, r.Name, r.Listen, why))
		}
		f, err := l.File()
		bound := l.Addr().String()
		l.Close()
		if err != nil {
			return fail(fmt.Errorf("%w: route %s: %v", ErrIngressListen, r.Name, err))
		}
		files, addrs = append(files, f), append(addrs, bound)
	}
	return files, addrs, nil
}

// ingressDial is the ingress broker's dial policy: 127.0.0.1 at a
// declared route's port, nothing else, never a name — and only for a
// connection the authority admitted (gate: one dial per admission).
type ingressDial struct {
	ports map[int]bool
	gate  *ingressGate
}

func newIngressDial(routes []ingress.Route, gate *ingressGate) ingressDial {
	d := ingressDial{ports: map[int]bool{}, gate: gate}
	for _, r := range routes {
		// Never the gateway's own listeners inside the sandbox (80–83,
		// and nothing but them below 1024: the program cannot listen
		// there); the configuration refuses such a route too.
		if r.Port >= 1024 {
			d.ports[r.Port] = true
		}
	}
	return d
}

// ReasonNotAdmitted refuses an ingress dial no admitted connection
// holds: the ingress broker process dialled without asking the authority.
const ReasonNotAdmitted = "not-admitted"

var loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// Plan allows 127.0.0.1:<declared port> only, once per connection the
// authority admitted to that port.
func (d ingressDial) Plan(_ context.Context, host string, port int) ([]netip.AddrPort, error) {
	a, err := netip.ParseAddr(host)
	if err != nil || a.Unmap() != loopback4 || !d.ports[port] {
		return nil, &dial.Refused{Broker: ingress.Name, Target: net.JoinHostPort(host, strconv.Itoa(port)), Why: dial.ReasonNotDeclared}
	}
	if !d.gate.take(port) {
		return nil, &dial.Refused{Broker: ingress.Name, Target: net.JoinHostPort(host, strconv.Itoa(port)), Why: ReasonNotAdmitted}
	}
	return []netip.AddrPort{netip.AddrPortFrom(loopback4, uint16(port))}, nil
}

// Resolve refuses: the ingress broker dials addresses only.
func (d ingressDial) Resolve(_ context.Context, host string) ([]netip.Addr, error) {
	return nil, &dial.Refused{Broker: ingress.Name, Target: host, Why: dial.ReasonNotDeclared}
}

// sandboxNetns holds the sandbox's network namespace open for the
// gateway's life and makes unconnected TCP sockets in it.
type sandboxNetns struct{ f *os.File }

func openSandboxNetns(pid int) (*sandboxNetns, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("ingress: the sandbox's network namespace: %w", err)
	}
	return &sandboxNetns{f: f}, nil
}

// socket makes one non-blocking TCP socket inside the sandbox's network
// namespace (IPv4 only: routes dial 127.0.0.1).
func (n *sandboxNetns) socket(_ context.Context, v6 bool) (int, error) {
	if v6 {
		return -1, errors.New("ingress: IPv6 socket refused")
	}
	fd := -1
	rc, err := n.f.SyscallConn()
	if err != nil {
		return -1, err
	}
	// Control holds the descriptor for the whole setns: a close (the
	// gateway stopping while a dial is in flight) waits for it, so the
	// number never names another file — in a daemon, another sandbox's
	// namespace opened meanwhile. Once closed, Control fails.
	var serr error
	err = rc.Control(func(nsfd uintptr) {
		serr = setns.Do(fmt.Sprintf("/proc/self/fd/%d", nsfd), unix.CLONE_NEWNET, func() error {
			var err error
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			return err
		})
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}

func (n *sandboxNetns) close() {
	if n != nil && n.f != nil {
		n.f.Close()
	}
}
