package egress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

const (
	// budgetChunk is how many egress bytes one extra Reserve holds: a
	// sixteenth of what is left of the budget, between 1 and 16 MiB, so a
	// bulk transfer costs two authority calls per 16 MiB while a nearly spent
	// budget is still shared out finely.
	budgetChunk    = 1 << 20
	budgetChunkMax = 16 << 20
	// leaseSize is the most one copy step moves before asking the meter
	// again: it bounds the overshoot of a byte budget and how long a
	// blocked writer can hide progress from the idle watchdog.
	leaseSize = 256 << 10
)

var errBudget = errors.New("egress byte budget refused")

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// serveConnect handles CONNECT host:port. Port 443 gets "200 Connection
// Established" first, then the ClientHello is read and its SNI checked,
// and only then is the checked address dialed; other allowed ports are
// dialed first, so a dial failure is still an HTTP answer.
func (b *Broker) serveConnect(w http.ResponseWriter, r *http.Request, at *attempt) {
	if r.ProtoMajor != 1 {
		b.refuse(w, r, at, http.StatusBadRequest, ReasonBadRequest)
		return
	}
	authority := r.URL.Host
	if authority == "" {
		authority = r.Host
	}
	host, port, ok := splitHostPort(authority, 0)
	if !ok {
		b.refuse(w, r, at, http.StatusBadRequest, ReasonBadRequest)
		return
	}
	ctx := r.Context()
	addrs, m, release, ok := b.open(w, r, at, host, port)
	if !ok {
		return
	}
	defer release()

	hj, ok := w.(http.Hijacker)
	if !ok {
		at.budget = m.settle(crossing.Amount{})
		b.refuse(w, r, at, http.StatusBadRequest, ReasonBadRequest)
		return
	}
	var up net.Conn
	if port != 443 {
		var err error
		if up, err = b.dialChecked(ctx, addrs, port); err != nil {
			at.budget = m.settle(crossing.Amount{})
			b.log.Debug("egress dial", slog.String("target", at.target), slog.String("error", err.Error()))
			b.refuse(w, r, at, http.StatusBadGateway, ReasonDialFailed)
			return
		}
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		if up != nil {
			up.Close()
		}
		at.budget = m.settle(crossing.Amount{})
		b.finish(ctx, at, crossing.Deny, ReasonBadRequest)
		return
	}
	fail := func(reason string) {
		conn.Close()
		if up != nil {
			up.Close()
		}
		at.budget = m.settle(crossing.Amount{})
		b.finish(ctx, at, crossing.Deny, reason)
	}
	conn.SetDeadline(time.Now().Add(b.connect))
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		fail(ReasonClientGone)
		return
	}
	var prefix []byte
	if port == 443 {
		raw, sni, err := readClientHello(brw.Reader)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				fail(ReasonClientHelloTimeout)
			} else {
				fail(ReasonClientHelloInvalid)
			}
			return
		}
		if sni == "" {
			fail(ReasonSNIMissing)
			return
		}
		if n, why := normalizeHost(sni); why != "" || n != at.host {
			fail(ReasonSNIMismatch)
			return
		}
		if up, err = b.dialChecked(ctx, addrs, port); err != nil {
			b.log.Debug("egress dial", slog.String("target", at.target), slog.String("error", err.Error()))
			fail(ReasonDialFailed)
			return
		}
		prefix = raw
	}
	if n := brw.Reader.Buffered(); n > 0 {
		p, _ := brw.Reader.Peek(n)
		prefix = append(prefix, p...)
	}
	conn.SetDeadline(time.Time{})
	up.SetDeadline(time.Time{})

	t := &tunnel{m: m, client: conn, upstream: up, idle: b.idle, tick: max(b.idle/4, 10*time.Millisecond)}
	cut := t.run(prefix)
	at.bytesIn, at.bytesOut = t.in.Load(), t.out.Load()
	at.usage = crossing.Amount{Connections: 1, EgressBytes: at.bytesIn + at.bytesOut}
	at.budget = m.settle(at.usage)
	at.usage.EgressBytes = m.charged // what the budget was charged
	b.finish(ctx, at, crossing.Allow, cut)
}

// meter holds a connection's reservation and budgets its bytes: bytes in
// either direction are claimed from egress bytes reserved in chunks; when
// the authority refuses a chunk the connection is cut.
type meter struct {
	b    *Broker
	ctx  context.Context
	id   crossing.Identity
	main crossing.Reservation

	mu      sync.Mutex
	avail   int64 // reserved, not yet claimed
	state   crossing.BudgetState
	chunks  []crossing.Reservation // at most one: the chunk being claimed from
	settled int64                  // bytes already settled as used with used-up chunks
	charged int64                  // egress bytes charged in all, known after settle
	refused bool                   // the authority refused, or the meter is settled
}

// claim returns how many bytes (1..want) the caller may move now. With
// less than a chunk left it hands out at most half, so one direction
// blocked in a read cannot starve the other.
func (m *meter) claim(want int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state.Limits.EgressBytes <= 0 && !m.refused {
		// No byte budget: nothing to hold; the bytes are settled at close.
		return want, nil
	}
	if m.avail == 0 {
		if err := m.reserveLocked(); err != nil {
			return 0, err
		}
	}
	k := min(want, m.avail)
	if k > 4096 && m.avail < budgetChunk {
		k = min(k, max(m.avail/2, 4096))
	}
	m.avail -= k
	return k, nil
}

func (m *meter) reserveLocked() error {
	if m.refused {
		return errBudget
	}
	// The chunk in hand is used up: settle it as used at once rather than
	// hold it, so a long tunnel holds one chunk, not one per MiB moved
	// (every authority call of the workload sums the holds).
	for _, c := range m.chunks {
		ctx, cancel := context.WithTimeout(m.ctx, authorityTimeout)
		st, err := m.b.authority.Settle(ctx, c, crossing.Amount{EgressBytes: c.Held.EgressBytes})
		cancel()
		if err != nil {
			m.b.log.Error("egress authority settle", slog.String("workload", m.id.Workload), slog.String("error", err.Error()))
			m.refused = true
			return errBudget
		}
		m.settled += c.Held.EgressBytes
		m.state = st
	}
	m.chunks = nil
	size := int64(budgetChunk)
	if left := m.state.Limits.EgressBytes - m.state.Used.EgressBytes; left/16 > size {
		size = min(left/16, budgetChunkMax)
	}
	for try := 0; try < 2; try++ {
		if lim := m.state.Limits.EgressBytes; lim > 0 {
			size = min(size, lim-m.state.Used.EgressBytes)
		}
		if size <= 0 {
			break
		}
		ctx, cancel := context.WithTimeout(m.ctx, authorityTimeout)
		r, st, err := m.b.authority.Reserve(ctx, m.id, Name, crossing.Amount{EgressBytes: size}, 0)
		cancel()
		if err == nil {
			m.chunks = append(m.chunks, r)
			m.state, m.avail = st, size
			return nil
		}
		if !errors.Is(err, crossing.ErrBudgetExceeded) {
			m.b.log.Error("egress authority reserve", slog.String("workload", m.id.Workload), slog.String("error", err.Error()))
			break
		}
		// The state we sized from was stale; retry once with what is left.
		m.state = st
	}
	m.refused = true
	return errBudget
}

func (m *meter) refund(n int64) {
	if n > 0 {
		m.mu.Lock()
		m.avail += n
		m.mu.Unlock()
	}
}

// settle releases the byte chunks and settles the connection with what it
// used; it runs on a detached context so a gone client cannot leak a hold.
func (m *meter) settle(used crossing.Amount) crossing.BudgetState {
	ctx, cancel := detached(m.ctx)
	defer cancel()
	m.mu.Lock()
	chunks := m.chunks
	settled := m.settled
	m.chunks, m.avail, m.refused = nil, 0, true // a late claim must not hold new budget
	m.mu.Unlock()
	for _, c := range chunks {
		if _, err := m.b.authority.Settle(ctx, c, crossing.Amount{}); err != nil {
			m.b.log.Error("egress authority settle", slog.String("workload", m.id.Workload), slog.String("error", err.Error()))
		}
	}
	// Bytes of used-up chunks were settled already (a used-up chunk is
	// charged whole, so the charge may exceed the bytes moved by less than
	// a chunk); count only the rest.
	m.charged = max(used.EgressBytes, settled)
	used.EgressBytes = max(0, used.EgressBytes-settled)
	st, err := m.b.authority.Settle(ctx, m.main, used)
	if err != nil {
		m.b.log.Error("egress authority settle", slog.String("workload", m.id.Workload), slog.String("error", err.Error()))
	}
	return st
}

// tunnel copies both ways between the agent and the upstream.
type tunnel struct {
	m                *meter
	client, upstream net.Conn
	idle, tick       time.Duration

	progress atomic.Int64 // unix nanos of the last byte moved
	in, out  atomic.Int64 // bytes from / to the agent
	closed   atomic.Bool
	once     sync.Once
	mu       sync.Mutex
	reason   string // why the tunnel was cut, "" for a normal close
}

// run copies until both directions end and returns why the tunnel was
// cut ("" when it closed normally).
func (t *tunnel) run(prefix []byte) string {
	t.touch()
	done := make(chan struct{})
	go t.watch(done)
	var wg sync.WaitGroup
	wg.Go(func() { t.pump(t.client, t.upstream, nil, &t.out) })
	t.pump(t.upstream, t.client, prefix, &t.in)
	wg.Wait()
	close(done)
	t.closeAll()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reason
}

func (t *tunnel) touch() { t.progress.Store(time.Now().UnixNano()) }

// watch cuts the tunnel once nothing has moved either way for idle.
// Progress inside a copy step is published at least every tick (the
// read deadline), so an active trickle is never mistaken for idleness.
func (t *tunnel) watch(done <-chan struct{}) {
	tk := time.NewTicker(t.tick)
	defer tk.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tk.C:
			if now.Sub(time.Unix(0, t.progress.Load())) >= t.idle {
				t.cut(ReasonIdleTimeout)
				return
			}
		}
	}
}

func (t *tunnel) cut(reason string) {
	t.mu.Lock()
	if t.reason == "" {
		t.reason = reason
	}
	t.mu.Unlock()
	t.closeAll()
}

func (t *tunnel) closeAll() {
	t.once.Do(func() {
		t.closed.Store(true)
		t.client.Close()
		t.upstream.Close()
	})
}

// halfCloser is a connection whose write side closes alone (TCP, Unix
// stream): the peer reads EOF while the other direction goes on.
type halfCloser interface{ CloseWrite() error }

// pump copies src to dst; a clean EOF half-closes dst, anything else
// tears the whole tunnel down so the other direction cannot linger.
func (t *tunnel) pump(dst, src net.Conn, prefix []byte, count *atomic.Int64) {
	err := t.copy(dst, src, prefix, count)
	if err == nil {
		if cw, ok := dst.(halfCloser); ok && cw.CloseWrite() == nil {
			return
		}
	}
	if errors.Is(err, errBudget) {
		t.cut(ReasonBudgetExceeded)
		return
	}
	t.closeAll()
}

// copy moves prefix then src to dst in leases claimed from the meter.
// Between TCP connections the copy is TCPConn.ReadFrom of an
// io.LimitedReader, which the runtime turns into splice(2): the bytes
// never enter user space. A read deadline of one tick makes each step
// return to publish progress; a timed-out splice read has an empty pipe,
// so nothing is lost by continuing.
func (t *tunnel) copy(dst, src net.Conn, prefix []byte, count *atomic.Int64) error {
	for len(prefix) > 0 {
		k, err := t.m.claim(int64(len(prefix)))
		if err != nil {
			return err
		}
		dst.SetWriteDeadline(time.Now().Add(t.idle))
		n, err := dst.Write(prefix[:k])
		dst.SetWriteDeadline(time.Time{})
		count.Add(int64(n))
		t.m.refund(k - int64(n))
		t.touch()
		if err != nil {
			return err
		}
		prefix = prefix[k:]
	}
	var w io.Writer = dst
	switch src.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		w = writerOnly{dst} // no splice possible: use the pooled buffer
	}
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	for {
		k, err := t.m.claim(leaseSize)
		if err != nil {
			return err
		}
		lr := &io.LimitedReader{R: src, N: k}
		for lr.N > 0 {
			src.SetReadDeadline(time.Now().Add(t.tick))
			n, err := io.CopyBuffer(w, lr, *bufp)
			if n > 0 {
				count.Add(n)
				t.touch()
			}
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && !t.closed.Load() {
					continue
				}
				t.m.refund(lr.N)
				return err
			}
			if lr.N > 0 { // EOF
				t.m.refund(lr.N)
				return nil
			}
		}
	}
}

// writerOnly hides a ReaderFrom so io.CopyBuffer uses the given buffer.
type writerOnly struct{ io.Writer }
