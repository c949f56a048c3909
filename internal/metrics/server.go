package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cordon-project/cordon/internal/failure"
)

// Endpoint limits: a scrape is a short GET; anything slower is cut.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 8 << 10
	maxInFlight       = 4
	// maxConns bounds the connections the endpoint holds at once (idle
	// keep-alives and slow clients included): every one is a descriptor
	// of the daemon's, which needs them for its socket, store and
	// sandboxes. Past it, connections wait in the kernel's backlog.
	maxConns = 16
)

// Address is a checked --metrics-address.
type Address struct {
	AddrPort netip.AddrPort
	// Loopback is false when the operator named another host's address:
	// whoever reaches that address reads the metrics.
	Loopback bool
}

// ParseAddress checks a --metrics-address: HOST:PORT with HOST an IP
// address or "localhost" (127.0.0.1). A missing host (":9464"), an
// unspecified address (0.0.0.0, ::) and host names are refused: the
// endpoint is never bound on every interface, and never where a name
// happens to resolve. Port 0 picks a free port.
func ParseAddress(s string) (Address, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Address{}, failure.Failf(failure.KindUsage, "metrics", "--metrics-address %q: want HOST:PORT, e.g. 127.0.0.1:9464", s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return Address{}, failure.Failf(failure.KindUsage, "metrics", "--metrics-address %q: port %q is not 0–65535", s, port)
	}
	if host == "" {
		return Address{}, failure.Failf(failure.KindUsage, "metrics", "--metrics-address %q: name the host (e.g. 127.0.0.1:%s); the endpoint is never bound on every interface", s, port)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return Address{}, failure.Failf(failure.KindUsage, "metrics", "--metrics-address %q: the host must be an IP address or localhost", s)
	}
	ip = ip.Unmap()
	if ip.IsUnspecified() {
		return Address{}, failure.Failf(failure.KindUsage, "metrics", "--metrics-address %q: %s is every interface; name one address (127.0.0.1 keeps it on this host)", s, ip)
	}
	return Address{AddrPort: netip.AddrPortFrom(ip, uint16(p)), Loopback: ip.IsLoopback()}, nil
}

// Server is the metrics endpoint.
type Server struct {
	l       net.Listener
	srv     *http.Server
	accepts atomic.Int64
}

// Listen binds the endpoint at a (in the caller's network namespace: the
// daemon's, the host's) and logs where it serves; a non-loopback address
// is logged as a warning.
func Listen(a Address, m *Metrics, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l, err := net.Listen("tcp", a.AddrPort.String())
	if err != nil {
		return nil, failure.Fail(failure.KindUsage, "metrics", err)
	}
	s := &Server{}
	s.l = &countingListener{Listener: l, n: &s.accepts, slots: make(chan struct{}, maxConns), closed: make(chan struct{})}
	// The endpoint's own accept count is a metric: an operator (and an
	// escape test) sees from the host who connected, scrapes included.
	if err := m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "cordon_metrics_connections_accepted_total",
		Help: "Connections the metrics endpoint accepted (each scrape without keep-alive is one).",
	}, func() float64 { return float64(s.accepts.Load()) })); err != nil {
		l.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	s.srv = &http.Server{
		Handler:           Handler(m),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	if a.Loopback {
		log.Info("metrics endpoint serving", "address", l.Addr().String())
	} else {
		log.Warn("metrics endpoint serving on a non-loopback address: whoever reaches it reads cordon's metrics", "address", l.Addr().String())
	}
	return s, nil
}

// Addr is where the endpoint listens.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Accepts counts the connections the endpoint accepted: the witness an
// escape test reads.
func (s *Server) Accepts() int64 { return s.accepts.Load() }

// Serve serves until Close; it returns nil after Close.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the endpoint, cutting scrapes in flight after a second.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	defer s.l.Close() // closed by Shutdown once Serve runs; by this otherwise
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

// Handler serves GET (and HEAD) /metrics and /healthz; every other path
// is 404 and every other method 405.
func Handler(m *Metrics) http.Handler {
	prom := promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{
		MaxRequestsInFlight: maxInFlight,
		Timeout:             scrapeTimeout + 5*time.Second,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h http.Handler
		switch r.URL.Path {
		case "/metrics":
			h = prom
		case "/healthz":
			h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				_, _ = w.Write([]byte("ok\n"))
			})
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// countingListener counts accepted connections and holds at most
// cap(slots) at once: Accept waits for a held one to close.
type countingListener struct {
	net.Listener
	n      *atomic.Int64
	slots  chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (l *countingListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	l.n.Add(1)
	return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *countingListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// slotConn gives its listener's slot back when it closes (once).
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
