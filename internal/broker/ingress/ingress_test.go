package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// fakeAuthority is a budget in memory: ingress connections and bytes
// against limits, with every receipt kept.
type fakeAuthority struct {
	mu       sync.Mutex
	limits   crossing.Amount
	held     map[int64]crossing.Amount
	settled  crossing.Amount
	next     int64
	deny     error // returned by every Reserve that opens a connection
	asks     []crossing.Ask
	receipts chan crossing.Receipt
}

func newFake(limits crossing.Amount) *fakeAuthority {
	return &fakeAuthority{limits: limits, held: map[int64]crossing.Amount{}, receipts: make(chan crossing.Receipt, 64)}
}

func (f *fakeAuthority) state() crossing.BudgetState {
	u := f.settled
	for _, h := range f.held {
		u = u.Add(h)
	}
	return crossing.BudgetState{Used: u, Limits: f.limits}
}

func (f *fakeAuthority) Reserve(ctx context.Context, id crossing.Identity, broker string, want crossing.Amount, _ int64) (crossing.Reservation, crossing.BudgetState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if broker != Name {
		return crossing.Reservation{}, f.state(), fmt.Errorf("broker %s", broker)
	}
	if want.IngressConnections > 0 {
		ask, _ := crossing.AskFrom(ctx)
		f.asks = append(f.asks, ask)
		if f.deny != nil {
			return crossing.Reservation{Policy: &crossing.PolicyDecision{Determining: []string{"forbid"}}}, f.state(), f.deny
		}
	}
	if want.IngressBytes > 0 {
		// The privileged side allows one byte chunk per open connection.
		conns, chunks := 0, 0
		for _, h := range f.held {
			if h.IngressConnections > 0 {
				conns++
			} else {
				chunks++
			}
		}
		if chunks >= conns {
			return crossing.Reservation{}, f.state(), fmt.Errorf("%w: a byte chunk needs an open connection", crossing.ErrPolicyDenied)
		}
	}
	st := f.state()
	if l := f.limits.IngressConnections; l > 0 && st.Used.IngressConnections+want.IngressConnections > l {
		return crossing.Reservation{}, st, crossing.ErrBudgetExceeded
	}
	if l := f.limits.IngressBytes; l > 0 && st.Used.IngressBytes+want.IngressBytes > l {
		return crossing.Reservation{}, st, crossing.ErrBudgetExceeded
	}
	f.next++
	f.held[f.next] = want
	return crossing.Reservation{ID: f.next, Identity: id, Broker: broker, Held: want}, f.state(), nil
}

func (f *fakeAuthority) Settle(_ context.Context, r crossing.Reservation, used crossing.Amount) (crossing.BudgetState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.held[r.ID]; !ok {
		return f.state(), fmt.Errorf("settle unknown reservation %d", r.ID)
	}
	delete(f.held, r.ID)
	f.settled = f.settled.Add(used)
	return f.state(), nil
}

func (f *fakeAuthority) Record(_ context.Context, rc crossing.Receipt) error {
	f.receipts <- rc
	return nil
}

func (f *fakeAuthority) receipt(t *testing.T) crossing.Receipt {
	t.Helper()
	select {
	case rc := <-f.receipts:
		return rc
	case <-time.After(10 * time.Second):
		t.Fatal("no receipt recorded")
		return crossing.Receipt{}
	}
}

// target is the program inside the sandbox: it echoes each connection
// until EOF, then writes "bye\n"; it counts what it accepted.
type target struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted int
}

func newTarget(t *testing.T) *target {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.mu.Lock()
			tg.accepted++
			tg.mu.Unlock()
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					io.WriteString(c, "bye\n")
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return tg
}

func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.accepted
}

// start serves one route to tg through a broker over auth; it returns the
// route's address.
func start(t *testing.T, auth crossing.Authority, tg *target, maxConc int, chunk int64, log ...*slog.Logger) string {
	t.Helper()
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tport := tg.ln.Addr().(*net.TCPAddr).Port
	var d net.Dialer
	b, err := New(Options{
		Routes:    []Route{{Name: "ui", Port: 8080, Listen: host.Addr().String(), MaxConcurrent: maxConc}},
		Listeners: []net.Listener{host}, Identity: crossing.Identity{Workload: "w", SandboxID: "s"}, Authority: auth, Chunk: chunk, Logger: first(log),
		// The checked dialer's part: the declared port inside the sandbox
		// is the target's here.
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != "127.0.0.1:8080" {
				return nil, fmt.Errorf("dial %s: not the route's target", addr)
			}
			return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", tport))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return host.Addr().String()
}

// exchange writes msg, half-closes and reads everything back.
func exchange(t *testing.T, addr, msg string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		io.WriteString(c, msg)
		c.(*net.TCPConn).CloseWrite()
	}()
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestRelayAndReceipt(t *testing.T) {
	auth, tg := newFake(crossing.Amount{}), newTarget(t)
	addr := start(t, auth, tg, 4, 0)
	msg := strings.Repeat("x", 100<<10)
	if got := exchange(t, addr, msg); got != msg+"bye\n" {
		t.Fatalf("relayed %d bytes back, want %d and bye", len(got), len(msg))
	}
	rc := auth.receipt(t)
	if rc.Broker != Name || rc.Target != "ui" || rc.Decision != crossing.Allow || rc.Reason != ReasonOK || rc.BytesOut != int64(len(msg)) ||
		rc.BytesIn != int64(len(msg)+4) || !strings.HasPrefix(rc.Client, "127.0.0.1:") || rc.Usage.IngressConnections != 1 {
		t.Errorf("receipt = %+v", rc)
	}
	if len(auth.asks) != 1 || auth.asks[0] != (crossing.Ask{Action: Action, Resource: Resource, Target: "ui", Port: 8080}) {
		t.Errorf("asks = %+v, want one ingress.connect on Route ui port 8080", auth.asks)
	}
	if st := auth.state(); st.Used.IngressConnections != 1 || st.Used.IngressBytes != int64(2*len(msg)+4) || len(auth.held) != 0 {
		t.Errorf("budget after = %+v (held %v), want 1 connection and every byte settled", st.Used, auth.held)
	}
}

// refusingLog is the fake with the store's one-step SettleRecord, over an
// evidence log that refuses every append: SettleRecord fails whole (the
// settlement rolls back with the receipt) and Record fails.
type refusingLog struct{ *fakeAuthority }

var errLogRefused = fmt.Errorf("%w: append receipt to the evidence log: refused", crossing.ErrUnavailable)

func (refusingLog) SettleRecord(context.Context, crossing.Reservation, crossing.Amount, crossing.Receipt) (crossing.BudgetState, error) {
	return crossing.BudgetState{}, errLogRefused
}

func (refusingLog) Record(context.Context, crossing.Receipt) error { return errLogRefused }

// An ingress connection's bytes flow before its receipt can be written (a
// TCP relay has no terminator to hold back): when the receipt cannot be
// recorded the connection is still charged what it moved, never left
// held or released as unused. The control is the same exchange over a
// working log (TestRelayAndReceipt).
func TestReceiptRefusedStillCharged(t *testing.T) {
	auth, tg := newFake(crossing.Amount{}), newTarget(t)
	addr := start(t, refusingLog{auth}, tg, 4, 0)
	msg := strings.Repeat("y", 10<<10)
	if got := exchange(t, addr, msg); got != msg+"bye\n" {
		t.Fatalf("relayed %d bytes back, want %d and bye", len(got), len(msg))
	}
	want := crossing.Amount{IngressConnections: 1, IngressBytes: int64(2*len(msg) + 4)}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		auth.mu.Lock()
		st, held := auth.state(), len(auth.held)
		auth.mu.Unlock()
		if st.Used == want && held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget %+v with %d reservations held, want %+v settled", st.Used, held, want)
		}
	}
	select {
	case rc := <-auth.receipts:
		t.Errorf("a receipt was recorded by a log that refuses appends: %+v", rc)
	default:
	}
}

// A refusal by the authority closes the connection before the target is
// dialled; an unreachable authority does too (fail closed). Control: the
// same route with the authority allowing reaches the target.
func TestRefusedNeverReachesTarget(t *testing.T) {
	for _, c := range []struct {
		deny   error
		reason string
	}{
		{crossing.ErrPolicyDenied, ReasonPolicyDenied},
		{crossing.ErrBudgetExceeded, ReasonBudgetExceeded},
		{crossing.ErrApprovalPending, ReasonApprovalPending},
		{errors.New("store gone"), ReasonAuthorityUnavailable},
		{nil, ReasonOK}, // control
	} {
		auth, tg := newFake(crossing.Amount{}), newTarget(t)
		auth.deny = c.deny
		addr := start(t, auth, tg, 4, 0)
		got := exchange(t, addr, "hello")
		rc := auth.receipt(t)
		if rc.Reason != c.reason {
			t.Errorf("deny %v: receipt reason %q, want %q", c.deny, rc.Reason, c.reason)
		}
		want, wantCount := "", 0
		if c.deny == nil {
			want, wantCount = "hellobye\n", 1
		} else if rc.Decision != crossing.Deny {
			t.Errorf("deny %v: decision %q", c.deny, rc.Decision)
		}
		if got != want || tg.count() != wantCount {
			t.Errorf("deny %v: client got %q, target accepted %d; want %q and %d", c.deny, got, tg.count(), want, wantCount)
		}
	}
}

// The byte budget cuts a connection before a byte past it is relayed.
func TestByteBudgetCuts(t *testing.T) {
	auth, tg := newFake(crossing.Amount{IngressBytes: 64 << 10}), newTarget(t)
	addr := start(t, auth, tg, 4, 16<<10)
	got := exchange(t, addr, strings.Repeat("y", 256<<10))
	rc := auth.receipt(t)
	if rc.Reason != ReasonBytesExceeded || rc.BytesIn+rc.BytesOut > 64<<10 {
		t.Errorf("receipt = %+v, want cut at ingress_bytes (64KiB both ways)", rc)
	}
	if int64(len(got)) != rc.BytesIn {
		t.Errorf("client got %d bytes, receipt says %d from the sandbox", len(got), rc.BytesIn)
	}
	if st := auth.state(); st.Used.IngressBytes > 64<<10 || len(auth.held) != 0 {
		t.Errorf("budget after = %+v (held %v)", st.Used, auth.held)
	}
}

// max_concurrent: a connection past it is refused with its receipt while
// the others stay open.
func TestMaxConcurrent(t *testing.T) {
	auth, tg := newFake(crossing.Amount{}), newTarget(t)
	addr := start(t, auth, tg, 1, 0)
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	first.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(first, "a")
	buf := make([]byte, 1)
	if _, err := io.ReadFull(first, buf); err != nil { // admitted and relaying
		t.Fatal(err)
	}
	if got := exchange(t, addr, "b"); got != "" {
		t.Errorf("second connection got %q, want refused", got)
	}
	if rc := auth.receipt(t); rc.Reason != ReasonConcurrencyLimit || rc.Decision != crossing.Deny {
		t.Errorf("receipt = %+v, want concurrency-limit", rc)
	}
	if tg.count() != 1 {
		t.Errorf("target accepted %d, want 1", tg.count())
	}
}

func first(l []*slog.Logger) *slog.Logger {
	if len(l) == 0 {
		return nil
	}
	return l[0]
}
