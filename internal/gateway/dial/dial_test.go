package dial

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/failure"
)

// pair returns a connected server/client over a SOCK_SEQPACKET socketpair,
// the server serving with p.
func pair(t *testing.T, broker string, p Policy, tweak func(*Server)) *Client {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "chan")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	sc, cc := conn(fds[0]), conn(fds[1])
	s := &Server{Broker: broker, Policy: p, Timeout: 2 * time.Second}
	if tweak != nil {
		tweak(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, sc); close(done) }()
	c := NewClient(broker, cc)
	t.Cleanup(func() { c.Close(); cancel(); <-done; sc.Close() })
	return c
}

// upstream is a host TCP listener that counts what it accepted and echoes.
type upstream struct {
	ln       net.Listener
	accepted atomic.Int64
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepted.Add(1)
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return u
}

func (u *upstream) addr() string { return u.ln.Addr().String() }

func (u *upstream) port() int { return u.ln.Addr().(*net.TCPAddr).Port }

func echo(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
		t.Fatalf("echo = %q, %v, want ping", b, err)
	}
}

func reason(err error) string {
	var r *Refused
	if errors.As(err, &r) {
		return r.Why
	}
	return ""
}

// TestFixed: the declared upstream is dialled and handed over (positive
// control); an undeclared one — another port on the same host, another
// broker's upstream — is refused and its listener accepts nothing.
func TestFixed(t *testing.T) {
	own, other := newUpstream(t), newUpstream(t)
	c := pair(t, "model", NewFixed("model", []string{own.addr(), "localhost:" + strconv.Itoa(own.port())}, nil), nil)
	conn, err := c.DialContext(context.Background(), "tcp", own.addr())
	if err != nil {
		t.Fatalf("DialContext(%q) = %v, want a connection", own.addr(), err)
	}
	echo(t, conn)
	if conn, err := c.DialContext(context.Background(), "tcp", "LOCALHOST:"+strconv.Itoa(own.port())); err != nil {
		t.Errorf("DialContext(declared name) = %v", err)
	} else {
		echo(t, conn)
	}
	for _, addr := range []string{other.addr(), "127.0.0.2:" + strconv.Itoa(own.port()), "[::1]:" + strconv.Itoa(own.port())} {
		_, err := c.DialContext(context.Background(), "tcp", addr)
		if reason(err) != ReasonNotDeclared {
			t.Errorf("DialContext(%q) = %v, want a %s refusal", addr, err, ReasonNotDeclared)
		}
		if k := failure.KindOf(err); k != failure.KindPolicyRejected {
			t.Errorf("KindOf(%v) = %v, want %v", err, k, failure.KindPolicyRejected)
		}
	}
	if _, err := c.DialContext(context.Background(), "udp", own.addr()); reason(err) != ReasonNotDeclared {
		t.Errorf("DialContext(udp) = %v, want refused", err)
	}
	if _, err := c.LookupNetIP(context.Background(), "ip", "localhost"); reason(err) != ReasonNotDeclared {
		t.Errorf("LookupNetIP on a fixed policy = %v, want refused", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := own.accepted.Load(); n != 2 {
		t.Errorf("own upstream accepted %d, want 2", n)
	}
	if n := other.accepted.Load(); n != 0 {
		t.Errorf("undeclared upstream accepted %d, want 0", n)
	}
}

// TestFixedCheckedAddrs: a configuration from a daemon client other than
// root declares its model upstream at the host's loopback; with the egress
// address checks the privileged side refuses to dial it, by IP and by a
// name that resolves there, and the listener sees nothing. Control: the
// same policy without the checks dials it.
func TestFixedCheckedAddrs(t *testing.T) {
	own := newUpstream(t)
	dests := []string{own.addr(), "localhost:" + strconv.Itoa(own.port())}
	strict, err := egress.NewDestinations(nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := pair(t, "model", NewFixed("model", dests, nil).CheckAddrs(strict.Addr), nil)
	for _, addr := range dests {
		if _, err := c.DialContext(context.Background(), "tcp", addr); reason(err) != egress.ReasonAddressDenied {
			t.Errorf("DialContext(%q) with checked addresses = %v, want a %s refusal", addr, err, egress.ReasonAddressDenied)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := own.accepted.Load(); n != 0 {
		t.Fatalf("loopback upstream accepted %d through the checked policy, want 0", n)
	}
	open := pair(t, "model", NewFixed("model", dests, nil), nil)
	conn, err := open.DialContext(context.Background(), "tcp", own.addr())
	if err != nil {
		t.Fatalf("control: DialContext(%q) without the checks = %v", own.addr(), err)
	}
	echo(t, conn)
}

// TestNone: the state broker's policy refuses every destination.
func TestNone(t *testing.T) {
	u := newUpstream(t)
	c := pair(t, "state", None{Broker: "state"}, nil)
	if _, err := c.DialContext(context.Background(), "tcp", u.addr()); reason(err) != ReasonNotDeclared {
		t.Errorf("DialContext = %v, want refused", err)
	}
	if n := u.accepted.Load(); n != 0 {
		t.Errorf("accepted %d, want 0", n)
	}
}

type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if as, ok := r[host]; ok {
		return as, nil
	}
	return nil, errors.New("no such host")
}

// TestEgress: the egress policy resolves an allowed name, then dials only
// an address it resolved for a name whose rule allows the port; loopback
// is refused unless an unsafe range re-allows it.
func TestEgress(t *testing.T) {
	u, other := newUpstream(t), newUpstream(t)
	lo := netip.MustParseAddr("127.0.0.1")
	mk := func(unsafe []netip.Prefix) *Client {
		d, err := egress.NewDestinations([]egress.Rule{{Host: "allowed.test", Ports: []int{u.port()}}, {Host: "other.test", Ports: []int{other.port()}}},
			unsafe, map[string][]netip.Addr{"allowed.test": {lo}}, staticResolver{"other.test": {lo}})
		if err != nil {
			t.Fatal(err)
		}
		return pair(t, "egress", NewEgress(d), nil)
	}
	c := mk([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	ip := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	// Not resolved yet: the address is not vouched for.
	if _, err := c.DialContext(context.Background(), "tcp", ip(u.port())); reason(err) != egress.ReasonHostNotAllowed {
		t.Errorf("dial before resolve = %v, want %s", err, egress.ReasonHostNotAllowed)
	}
	as, err := c.LookupNetIP(context.Background(), "ip", "Allowed.Test.")
	if err != nil || len(as) != 1 || as[0] != lo {
		t.Fatalf("LookupNetIP(allowed) = %v, %v, want [%v]", as, err, lo)
	}
	conn, err := c.DialContext(context.Background(), "tcp", ip(u.port()))
	if err != nil {
		t.Fatalf("dial resolved = %v", err)
	}
	echo(t, conn)
	// allowed.test's rule does not allow other's port; other.test was
	// not resolved.
	if _, err := c.DialContext(context.Background(), "tcp", ip(other.port())); err == nil {
		t.Errorf("dial of a port no resolved name allows succeeded")
	}
	if _, err := c.LookupNetIP(context.Background(), "ip", "denied.test"); reason(err) != egress.ReasonHostNotAllowed {
		t.Errorf("LookupNetIP(denied) = %v, want %s", err, egress.ReasonHostNotAllowed)
	}
	if _, err := c.DialContext(context.Background(), "tcp", "denied.test:443"); reason(err) != egress.ReasonHostNotAllowed {
		t.Errorf("dial denied name = %v", err)
	}
	// By name: checked and resolved on this side.
	if conn, err := c.DialContext(context.Background(), "tcp", "allowed.test:"+strconv.Itoa(u.port())); err != nil {
		t.Errorf("dial allowed name = %v", err)
	} else {
		echo(t, conn)
	}
	// Without the unsafe range, loopback is denied at resolve and at dial.
	safe := mk(nil)
	if _, err := safe.LookupNetIP(context.Background(), "ip", "allowed.test"); reason(err) != egress.ReasonAddressDenied {
		t.Errorf("LookupNetIP(loopback answer) = %v, want %s", err, egress.ReasonAddressDenied)
	}
	if _, err := safe.DialContext(context.Background(), "tcp", ip(u.port())); reason(err) != egress.ReasonAddressDenied {
		t.Errorf("dial loopback = %v, want %s", err, egress.ReasonAddressDenied)
	}
	time.Sleep(50 * time.Millisecond)
	if n := u.accepted.Load(); n != 2 {
		t.Errorf("allowed upstream accepted %d, want 2", n)
	}
	if n := other.accepted.Load(); n != 0 {
		t.Errorf("other upstream accepted %d, want 0", n)
	}
}

// blocking holds every Plan until released.
type blocking struct {
	release chan struct{}
	entered atomic.Int64
}

func (b *blocking) Plan(ctx context.Context, host string, port int) ([]netip.AddrPort, error) {
	b.entered.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return nil, &Refused{Why: ReasonNotDeclared}
}

func (b *blocking) Resolve(context.Context, string) ([]netip.Addr, error) {
	return nil, &Refused{Why: ReasonNotDeclared}
}

// TestBounded: at most MaxConcurrent requests are under way on the
// privileged side; while they are, further ones wait unread in the channel
// (the policy is not entered for them), and they are served once a slot is
// free — none is refused.
func TestBounded(t *testing.T) {
	b := &blocking{release: make(chan struct{})}
	c := pair(t, "model", b, func(s *Server) { s.MaxConcurrent = 2 })
	const n = 7
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.DialContext(context.Background(), "tcp", "a.test:1")
			errs <- err
		}()
	}
	for b.entered.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got := b.entered.Load(); got != 2 {
		t.Errorf("policy entered %d times with both slots taken, want 2", got)
	}
	close(b.release)
	for range n {
		if err := <-errs; reason(err) != ReasonNotDeclared {
			t.Errorf("dial = %v, want the policy's own %s answer", err, ReasonNotDeclared)
		}
	}
	if got := b.entered.Load(); got != n {
		t.Errorf("policy entered %d times, want %d", got, n)
	}
}

// TestClientWaitsForASlot: a broker's HTTP transport may open many
// connections at once (64 concurrent model streams); the client keeps at
// most DefaultMaxConcurrent requests under way and the rest wait, so none
// is refused as busy. The server's own bound is what TestBounded shows.
func TestClientWaitsForASlot(t *testing.T) {
	b := &blocking{release: make(chan struct{})}
	c := pair(t, "model", b, nil)
	const n = 3 * DefaultMaxConcurrent
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.DialContext(context.Background(), "tcp", "a.test:1")
			errs <- err
		}()
	}
	for b.entered.Load() < DefaultMaxConcurrent {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got := b.entered.Load(); got != DefaultMaxConcurrent {
		t.Errorf("policy entered %d times with every slot taken, want %d", got, DefaultMaxConcurrent)
	}
	close(b.release)
	for range n {
		if err := <-errs; reason(err) != ReasonNotDeclared {
			t.Errorf("dial = %v, want the policy's own %s answer (never %s)", err, ReasonNotDeclared, ReasonBusy)
		}
	}
	if got := b.entered.Load(); got != n {
		t.Errorf("policy entered %d times, want %d", got, n)
	}
}

// TestTimeout: a request is bounded in time on the privileged side.
func TestTimeout(t *testing.T) {
	b := &blocking{release: make(chan struct{})}
	c := pair(t, "model", b, func(s *Server) { s.Timeout = 100 * time.Millisecond })
	start := time.Now()
	if _, err := c.DialContext(context.Background(), "tcp", "a.test:1"); err == nil {
		t.Fatal("dial succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("refusal took %v", d)
	}
}

// TestGarbageStopsServing: a request that does not parse ends the
// channel; the client sees the dialer unavailable.
func TestGarbageStopsServing(t *testing.T) {
	u := newUpstream(t)
	c := pair(t, "model", NewFixed("model", []string{u.addr()}, nil), nil)
	if _, _, err := c.conn.WriteMsgUnix([]byte(`{"op":"dial","host":"x","port":0}`), nil, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.DialContext(context.Background(), "tcp", u.addr()); reason(err) == ReasonUnavailable {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("the channel kept serving after a malformed request")
}

// TestSocketSupplied: with Server.Socket, the server connects the socket
// it is given (the gateway's socket source) to the checked address and
// hands that socket over; without a socket, nothing is dialled.
func TestSocketSupplied(t *testing.T) {
	u := newUpstream(t)
	var supplied atomic.Int64
	c := pair(t, "model", NewFixed("model", []string{u.addr()}, nil), func(s *Server) {
		s.Socket = func(_ context.Context, v6 bool) (int, error) {
			supplied.Add(1)
			fam := unix.AF_INET
			if v6 {
				fam = unix.AF_INET6
			}
			return unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		}
	})
	conn, err := c.DialContext(context.Background(), "tcp", u.addr())
	if err != nil {
		t.Fatalf("DialContext = %v", err)
	}
	echo(t, conn)
	if n := supplied.Load(); n != 1 {
		t.Errorf("sockets supplied = %d, want 1", n)
	}
	none := pair(t, "model", NewFixed("model", []string{u.addr()}, nil), func(s *Server) {
		s.Socket = func(context.Context, bool) (int, error) { return -1, errors.New("no socket") }
	})
	if _, err := none.DialContext(context.Background(), "tcp", u.addr()); reason(err) != ReasonDialFailed {
		t.Errorf("DialContext without a socket = %v, want %s", err, ReasonDialFailed)
	}
	if n := u.accepted.Load(); n != 1 {
		t.Errorf("upstream accepted %d, want 1", n)
	}
}
