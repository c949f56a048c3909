package ingress

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/cordon-project/cordon/internal/crossing"
)

// relayBuffer is one read of either direction.
const relayBuffer = 32 << 10

// relay copies client→up and up→client until both directions ended
// (each end's EOF is passed on as a half-close), ctx ends, or the byte
// budget refuses more (cut is then ReasonBytesExceeded). It returns the
// bytes written each way.
func relay(ctx context.Context, client, up net.Conn, m *meter) (toSandbox, fromSandbox int64, cut string) {
	var to, from atomic.Int64
	var cutOnce sync.Once
	stop := func(why string) {
		cutOnce.Do(func() {
			cut = why
			client.Close()
			up.Close()
		})
	}
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			stop("")
		case <-done:
		}
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(up, client, m, &to, stop) }()
	go func() { defer wg.Done(); pipe(client, up, m, &from, stop) }()
	wg.Wait()
	close(done)
	<-watched // no stop after this: cut is read below
	return to.Load(), from.Load(), cut
}

// halfCloser is a connection whose write side closes alone (TCP, Unix
// stream): the peer reads EOF while the other direction goes on.
type halfCloser interface{ CloseWrite() error }

// pipe copies src to dst, metering each read before it is written. At
// src's EOF it half-closes dst; on any other error, or when the meter
// refuses, it ends the whole connection through stop.
func pipe(dst, src net.Conn, m *meter, n *atomic.Int64, stop func(string)) {
	buf := make([]byte, relayBuffer)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if !m.take(int64(k)) {
				stop(ReasonBytesExceeded)
				return
			}
			w, werr := dst.Write(buf[:k])
			n.Add(int64(w))
			if werr != nil {
				stop("")
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if cw, ok := dst.(halfCloser); ok && cw.CloseWrite() == nil {
					return
				}
			}
			stop("")
			return
		}
	}
}

// meter holds the connection's bytes against budgets.ingress_bytes: when
// the budget is limited, no byte is relayed before a reservation holds
// it. It holds one chunk (Options.Chunk bytes, never more than is left)
// at a time, as the privileged side allows (one per open connection):
// when the next read does not fit, the current chunk is settled with
// what it carried and the next one reserved. When the budget is not
// limited the bytes are counted only and charged when the connection
// settles.
type meter struct {
	b     *Broker
	ctx   context.Context
	mu    sync.Mutex
	state crossing.BudgetState
	used  int64 // bytes relayed
	cur   *crossing.Reservation
	// curUsed are the bytes cur carried; charged those settled with
	// earlier chunks.
	curUsed, charged int64
	// refused: the budget said no once; every later take refuses.
	refused bool
	// chunks is how many chunks this connection has reserved: each one
	// is twice the last (Options.Chunk, then 2x, 4x … up to maxGrowth x),
	// so a long transfer pays few authority round trips while a short
	// one holds little.
	chunks int
}

// maxGrowth bounds how far a connection's chunk grows: 64 x the 256 KiB
// default is 16 MiB held at once, still never more than an eighth of
// what is left.
const maxGrowth = 64

// take admits n more bytes, reserving more of the budget if needed.
func (m *meter) take(n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state.Limits.IngressBytes <= 0 {
		m.used += n
		return true
	}
	if m.refused {
		return false
	}
	if m.cur == nil || m.curUsed+n > m.cur.Held.IngressBytes {
		m.settleCur()
		if !m.reserve(n) {
			m.refused = true
			return false
		}
	}
	m.curUsed += n
	m.used += n
	return true
}

// reserve holds the next chunk, big enough for n: Options.Chunk doubled
// for each chunk the connection already held (up to maxGrowth times), or
// an eighth of what is left when that is less (so that connections open at
// once share a small budget instead of the first holding all of it),
// never more than is left. A refusal computed from a stale state is
// retried once with the state it returned.
func (m *meter) reserve(n int64) bool {
	for try := 0; try < 2; try++ {
		left := m.state.Limits.IngressBytes - m.state.Used.IngressBytes
		if left < n {
			return false
		}
		chunk := m.b.o.Chunk * int64(min(1<<min(m.chunks, 30), maxGrowth))
		size := min(max(n, min(chunk, left/8)), left)
		rctx, cancel := context.WithTimeout(m.ctx, authorityTimeout)
		r, st, err := m.b.o.Authority.Reserve(rctx, m.b.o.Identity, Name, crossing.Amount{IngressBytes: size}, 0)
		cancel()
		if err == nil {
			m.state, m.cur = st, &r
			m.chunks++
			return true
		}
		if !errors.Is(err, crossing.ErrBudgetExceeded) {
			m.b.log.Warn("ingress: reserve bytes", "err", err)
			return false
		}
		m.state = st
	}
	return false
}

// settleCur settles the current chunk with the bytes it carried (the
// rest goes back to the budget).
func (m *meter) settleCur() {
	if m.cur == nil {
		return
	}
	part := min(m.curUsed, m.cur.Held.IngressBytes)
	sctx, cancel := detached(m.ctx)
	st, err := m.b.o.Authority.Settle(sctx, *m.cur, crossing.Amount{IngressBytes: part})
	cancel()
	if err != nil {
		m.b.log.Warn("ingress: settle a byte reservation", "err", err)
	} else {
		m.state = st
	}
	m.charged += part
	m.cur, m.curUsed = nil, 0
}

// finish settles the last chunk and returns what the connection's own
// settlement charges: the bytes no chunk held (all of them when the
// budget is unlimited).
func (m *meter) finish(total int64) crossing.Amount {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settleCur()
	return crossing.Amount{IngressBytes: max(total-m.charged, 0)}
}
