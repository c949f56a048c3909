package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// hopHeaders are removed in both directions (RFC 9110 7.6.1), with
// Proxy-Authorization and Proxy-Connection: nothing the agent says to the
// proxy travels on. Headers named in Connection are removed as well.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// planKey carries the checked dial plan of one request to the Transport.
type planKey struct{}

type dialPlan struct {
	addrs []netip.Addr
	port  int
	m     *meter
	in    atomic.Int64 // bytes written upstream: from the agent
	out   atomic.Int64 // bytes read from upstream: to the agent
	cut   atomic.Bool  // the byte budget refused a claim
}

// newTransport returns the one Transport for absolute-form requests. Its
// DialContext ignores the address the Transport asks for and dials the
// request's checked addresses; keep-alives are off, so every request is
// one budgeted, receipted connection and no connection outlives the check
// that admitted it or is shared between workloads.
func (b *Broker) newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			p, _ := ctx.Value(planKey{}).(*dialPlan)
			if p == nil {
				return nil, errors.New("egress: dial without a checked plan")
			}
			c, err := b.dialChecked(ctx, p.addrs, p.port)
			if err != nil {
				return nil, err
			}
			return &meteredConn{Conn: c, p: p, idle: b.idle}, nil
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 1 << 20,
		ResponseHeaderTimeout:  b.idle,
		ExpectContinueTimeout:  time.Second,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// serveForward handles an absolute-form request (GET http://host/path).
func (b *Broker) serveForward(w http.ResponseWriter, r *http.Request, at *attempt) {
	if r.URL.Scheme != "http" || r.URL.User != nil || r.URL.Opaque != "" {
		b.refuse(w, r, at, http.StatusBadRequest, ReasonBadRequest)
		return
	}
	host, port, ok := splitHostPort(r.URL.Host, 80)
	if !ok {
		b.refuse(w, r, at, http.StatusBadRequest, ReasonBadRequest)
		return
	}
	// net/http's server already replaces the Host header by the URI's
	// authority (RFC 9112 3.2.2); a request built any other way must agree.
	if !sameAuthority(r.Host, host, port) {
		b.refuse(w, r, at, http.StatusBadRequest, ReasonHostMismatch)
		return
	}
	for _, h := range r.Header.Values("Host") {
		if !sameAuthority(h, host, port) {
			b.refuse(w, r, at, http.StatusBadRequest, ReasonHostMismatch)
			return
		}
	}
	ctx := r.Context()
	addrs, m, release, ok := b.open(w, r, at, host, port)
	if !ok {
		return
	}
	defer release()

	p := &dialPlan{addrs: addrs, port: port, m: m}
	out := r.Clone(context.WithValue(ctx, planKey{}, p))
	out.RequestURI = ""
	out.Host = ""
	out.URL.Host = at.host
	if port != 80 {
		out.URL.Host = at.target
	}
	removeHop(out.Header)
	out.Header.Del("Host")
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := b.transport.RoundTrip(out)
	settle := func(decision, reason string) error {
		at.bytesIn, at.bytesOut = p.in.Load(), p.out.Load()
		at.usage = crossing.Amount{EgressBytes: at.bytesIn + at.bytesOut}
		if at.bytesIn > 0 || at.bytesOut > 0 {
			at.usage.Connections = 1
		}
		at.budget = m.settle(at.usage)
		at.usage.EgressBytes = m.charged
		return b.finish(ctx, at, decision, reason)
	}
	if err != nil {
		reason := ReasonUpstreamError
		if p.cut.Load() {
			reason = ReasonBudgetExceeded
		}
		b.log.Debug("egress forward", slog.String("target", at.target), slog.String("error", err.Error()))
		w.Header().Set("X-Cordon-Reason", reason)
		status := http.StatusBadGateway
		if reason == ReasonBudgetExceeded {
			status = http.StatusForbidden
		}
		http.Error(w, "cordon egress: "+http.StatusText(status)+": "+reason, status)
		settle(crossing.Deny, reason)
		return
	}
	defer resp.Body.Close()
	at.upstream = resp.StatusCode
	removeHop(resp.Header)
	for k := range resp.Header {
		if strings.HasPrefix(k, "X-Cordon-") { // only the proxy speaks for cordon
			delete(resp.Header, k)
		}
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	cut := streamBody(w, resp.Body, b.idle)
	resp.Body.Close()
	if p.cut.Load() {
		cut = ReasonBudgetExceeded
	}
	if err := settle(crossing.Allow, cut); err != nil {
		// The body's bytes already went (a proxied response is relayed
		// as it arrives, its size unbounded), but its end has not: the
		// connection is dropped without the chunked encoding's last
		// chunk, so the client sees a truncated response, not a
		// complete one. A response with a Content-Length was complete
		// on the wire; the limit is stated in docs/evidence-log.md.
		panic(http.ErrAbortHandler)
	}
}

// streamBody copies the response body, flushing after each read so
// streamed responses (SSE) reach the agent as they arrive. It returns a
// cut reason, "" when the body ended normally.
func streamBody(w http.ResponseWriter, body io.Reader, idle time.Duration) string {
	rc := http.NewResponseController(w)
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	buf := *bufp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return ""
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			return ""
		}
		if err != nil {
			if errors.Is(err, errBudget) {
				return ReasonBudgetExceeded
			}
			if errors.Is(err, errIdle) {
				return ReasonIdleTimeout
			}
			return ReasonUpstreamError
		}
	}
}

func removeHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// sameAuthority reports whether authority (a Host value; empty is
// accepted, meaning none was given) names host:port.
func sameAuthority(authority, host string, port int) bool {
	if authority == "" {
		return true
	}
	h, p, ok := splitHostPort(authority, 80)
	if !ok || p != port {
		return false
	}
	a, why1 := normalizeHost(h)
	c, why2 := normalizeHost(host)
	if why1 != "" || why2 != "" {
		return strings.EqualFold(h, host)
	}
	return a == c
}

var errIdle = errors.New("egress connection idle")

// meteredConn is an upstream connection of an absolute-form request: it
// counts and budgets bytes both ways and applies the idle deadline to
// every read and write.
type meteredConn struct {
	net.Conn
	p    *dialPlan
	idle time.Duration
}

func (c *meteredConn) Read(b []byte) (int, error) {
	k, err := c.p.m.claim(int64(len(b)))
	if err != nil {
		c.p.cut.Store(true)
		return 0, err
	}
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Read(b[:k])
	c.p.m.refund(k - int64(n))
	c.p.out.Add(int64(n))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = errIdle
	}
	return n, err
}

func (c *meteredConn) Write(b []byte) (int, error) {
	var done int
	for done < len(b) {
		k, err := c.p.m.claim(int64(len(b) - done))
		if err != nil {
			c.p.cut.Store(true)
			return done, err
		}
		c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
		// Count before the bytes can reach the upstream, correct after: the
		// transport writes in its own goroutine, so an upstream answer (and
		// the settlement that follows it) may otherwise run before a count
		// made after Write returns.
		c.p.in.Add(k)
		n, err := c.Conn.Write(b[done : done+int(k)])
		c.p.m.refund(k - int64(n))
		c.p.in.Add(int64(n) - k)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}
