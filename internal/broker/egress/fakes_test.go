package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"

	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/testkit"
)

var testID = crossing.Identity{Workload: "w1", Tenant: "t1", SandboxID: "sb-1"}

// fakeAuthority is an in-memory Authority with limits, holds and receipts.
type fakeAuthority struct {
	mu       sync.Mutex
	limits   crossing.Amount
	settled  crossing.Amount
	held     map[int64]crossing.Amount
	next     int64
	reserves int
	settles  int
	fail     error // returned by every Reserve when set
	refuse   bool  // Record fails: the evidence log refuses appends
	receipts chan crossing.Receipt
}

func newFakeAuthority(limits crossing.Amount) *fakeAuthority {
	return &fakeAuthority{limits: limits, held: map[int64]crossing.Amount{}, receipts: make(chan crossing.Receipt, 1024)}
}

func (l *fakeAuthority) stateLocked() crossing.BudgetState {
	used := l.settled
	for _, h := range l.held {
		used = used.Add(h)
	}
	return crossing.BudgetState{Used: used, Limits: l.limits}
}

func over(used, lim int64) bool { return lim > 0 && used > lim }

func (l *fakeAuthority) Reserve(_ context.Context, id crossing.Identity, broker string, want crossing.Amount, _ int64) (crossing.Reservation, crossing.BudgetState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reserves++
	st := l.stateLocked()
	if l.fail != nil {
		return crossing.Reservation{}, st, l.fail
	}
	u := st.Used.Add(want)
	if over(u.Connections, l.limits.Connections) {
		return crossing.Reservation{}, st, fmt.Errorf("connections: %w", crossing.ErrBudgetExceeded)
	}
	if over(u.EgressBytes, l.limits.EgressBytes) {
		return crossing.Reservation{}, st, fmt.Errorf("egress bytes: %w", crossing.ErrBudgetExceeded)
	}
	l.next++
	l.held[l.next] = want
	return crossing.Reservation{ID: l.next, Identity: id, Broker: broker, Held: want, At: time.Now()}, l.stateLocked(), nil
}

func (l *fakeAuthority) Settle(_ context.Context, r crossing.Reservation, used crossing.Amount) (crossing.BudgetState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[r.ID]; !ok {
		return l.stateLocked(), fmt.Errorf("settle unknown reservation %d", r.ID)
	}
	delete(l.held, r.ID)
	l.settles++
	l.settled = l.settled.Add(used)
	return l.stateLocked(), nil
}

func (l *fakeAuthority) Record(_ context.Context, rc crossing.Receipt) error {
	l.mu.Lock()
	refuse := l.refuse
	l.mu.Unlock()
	if refuse {
		return fmt.Errorf("%w: append receipt to the evidence log: refused", crossing.ErrUnavailable)
	}
	l.receipts <- rc
	return nil
}

// receipt waits for the next receipt.
func (l *fakeAuthority) receipt(t testing.TB) crossing.Receipt {
	t.Helper()
	select {
	case rc := <-l.receipts:
		return rc
	case <-time.After(10 * time.Second):
		t.Fatal("no receipt recorded")
		return crossing.Receipt{}
	}
}

func (l *fakeAuthority) outstanding() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

func (l *fakeAuthority) used() crossing.Amount {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settled
}

// fakeResolver answers from a sequence (the last answer repeats) and
// records every call; with t set and no answers, any call fails the test.
type fakeResolver struct {
	t       testing.TB
	mu      sync.Mutex
	calls   []string
	answers [][]netip.Addr
	err     error
}

func (r *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, host)
	if r.err != nil {
		return nil, r.err
	}
	if len(r.answers) == 0 {
		r.t.Errorf("resolver called for %q (%s); no lookup expected", host, network)
		return nil, errors.New("unexpected lookup")
	}
	a := r.answers[min(len(r.calls), len(r.answers))-1]
	return a, nil
}

func (r *fakeResolver) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// recordingDialer records every address dialed and connects to target
// (a loopback test server) instead; with no target any dial fails the test.
type recordingDialer struct {
	t      testing.TB
	target string
	mu     sync.Mutex
	addrs  []string
}

func (d *recordingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	if d.target == "" {
		d.t.Errorf("dial(%s, %s): no dial expected", network, addr)
		return nil, errors.New("unexpected dial")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.target)
}

func (d *recordingDialer) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// startProxy serves b on a loopback listener whose connections carry
// testID, as the gateway binds it, and returns its address.
func startProxy(t testing.TB, b *Broker) string {
	t.Helper()
	return testkit.ServeAs(t, b, testID).Listener.Addr().String()
}

// bufConn reads through the bufio.Reader that read the CONNECT answer.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connect sends CONNECT authority to the proxy and returns the answer and
// the connection, positioned after the answer's header.
func connect(t testing.TB, proxy, authority string) (*http.Response, net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, &bufConn{Conn: c, r: br}
}

// echoServer accepts loopback connections and echoes them back.
func echoServer(t testing.TB) (addr string, port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
}

// sourceServer writes n bytes to every connection, then closes it.
func sourceServer(t testing.TB, n int) (addr string, port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	payload := make([]byte, n)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write(payload)
			}()
		}
	}()
	return ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
}

var loopback = netip.MustParsePrefix("127.0.0.1/32")

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
