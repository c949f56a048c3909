package dial

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Policy decides, on the privileged side, what one broker may reach.
type Policy interface {
	// Plan returns the checked addresses to try, in order, for host:port,
	// or a *Refused.
	Plan(ctx context.Context, host string, port int) ([]netip.AddrPort, error)
	// Resolve resolves and checks host for a broker that asks before it
	// dials (egress), or refuses.
	Resolve(ctx context.Context, host string) ([]netip.Addr, error)
}

// Defaults of the Server's bounds.
const (
	DefaultMaxConcurrent = 16
	DefaultTimeout       = 10 * time.Second
)

// Server answers one broker process's requests on its channel.
type Server struct {
	Broker string // the broker's name, for logs and refusals
	Policy Policy
	Logger *slog.Logger
	// MaxConcurrent bounds the requests under way at once; while that
	// many are, the server stops reading the channel (further requests
	// wait in its socket buffer), so a compromised process cannot make
	// the privileged side hold unbounded sockets or goroutines.
	MaxConcurrent int
	// Timeout bounds one request: resolution and every dial attempt.
	Timeout time.Duration
	// Dial connects to one checked address; nil is a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Socket, when set, supplies the unconnected TCP socket (a descriptor
	// this side then owns) that Serve connects to a checked address, in
	// place of Dial: the gateway's socket source, so that the socket's
	// memory is charged to the sandbox's gateway cgroup, not to this side.
	Socket func(ctx context.Context, v6 bool) (int, error)
}

// Serve answers requests on conn (a SOCK_SEQPACKET Unix socket whose
// other end is the broker process) until it is closed, ctx ends or a
// request does not parse; it waits for the requests under way, then
// closes conn, before it returns.
func (s *Server) Serve(ctx context.Context, conn *net.UnixConn) {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	max := s.MaxConcurrent
	if max <= 0 {
		max = DefaultMaxConcurrent
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		conn.SetReadDeadline(time.Now())
	}()
	sem := make(chan struct{}, max)
	var wmu sync.Mutex
	var wg sync.WaitGroup
	defer conn.Close()
	defer wg.Wait()
	buf := make([]byte, maxRequestBytes+1)
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return
		}
		_ = oobn
		req, err := ParseRequest(buf[:n])
		if err != nil {
			log.Warn("dial request refused", "broker", s.Broker, "decision", "deny", "reason", ReasonBadRequest, "err", err)
			// An unparsable request has no id to answer: the channel is
			// the process's own, and a process that sends garbage is
			// broken or compromised. Stop serving it.
			return
		}
		// At most max requests are worked on at once; while they are, this
		// loop stops reading, so further requests wait in the channel's
		// socket buffer (the kernel bounds it) and the privileged side
		// holds nothing more for them. Refusing them as busy instead made
		// a broker's burst of connections (64 model streams) fail: its
		// client cannot know when a slot here is given back.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.handle(ctx, log, &wmu, conn, req)
		}()
	}
}

func (s *Server) handle(ctx context.Context, log *slog.Logger, wmu *sync.Mutex, conn *net.UnixConn, req Request) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if req.Op == OpResolve {
		addrs, err := s.Policy.Resolve(ctx, req.Host)
		if err != nil {
			why := reasonOf(err)
			s.logRefusal(log, req, why)
			s.reply(wmu, conn, Response{ID: req.ID, Reason: why}, -1)
			return
		}
		if len(addrs) > maxAddrs {
			addrs = addrs[:maxAddrs]
		}
		s.reply(wmu, conn, Response{ID: req.ID, Addrs: addrs}, -1)
		return
	}
	if s.Socket != nil {
		fd, peer, why := s.connect(ctx, req)
		if why != "" {
			s.logRefusal(log, req, why)
			s.reply(wmu, conn, Response{ID: req.ID, Reason: why}, -1)
			return
		}
		defer unix.Close(fd)
		log.Debug("dial", "broker", s.Broker, "decision", "allow", "target", target(req), "peer", peer.String())
		s.reply(wmu, conn, Response{ID: req.ID}, fd)
		return
	}
	c, why := s.dial(ctx, req)
	if why != "" {
		s.logRefusal(log, req, why)
		s.reply(wmu, conn, Response{ID: req.ID, Reason: why}, -1)
		return
	}
	defer c.Close()
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		s.logRefusal(log, req, ReasonDialFailed)
		s.reply(wmu, conn, Response{ID: req.ID, Reason: ReasonDialFailed}, -1)
		return
	}
	defer f.Close()
	log.Debug("dial", "broker", s.Broker, "decision", "allow", "target", target(req), "peer", c.RemoteAddr().String())
	s.reply(wmu, conn, Response{ID: req.ID}, int(f.Fd()))
}

// dial asks the policy for the checked addresses, dials them in order and
// checks the connected peer is the address it dialed.
func (s *Server) dial(ctx context.Context, req Request) (net.Conn, string) {
	plan, err := s.Policy.Plan(ctx, req.Host, req.Port)
	if err != nil {
		return nil, reasonOf(err)
	}
	if len(plan) == 0 {
		return nil, ReasonNotDeclared
	}
	dial := s.Dial
	if dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	for i, ap := range plan {
		if i == maxAddrs || ctx.Err() != nil {
			break
		}
		c, err := dial(ctx, "tcp", ap.String())
		if err != nil {
			continue
		}
		tc, ok := c.(*net.TCPConn)
		peer, perr := netip.ParseAddrPort(c.RemoteAddr().String())
		if !ok || perr != nil || peer.Addr().Unmap() != ap.Addr().Unmap() || peer.Port() != ap.Port() {
			c.Close()
			return nil, ReasonPeer
		}
		return tc, ""
	}
	return nil, ReasonDialFailed
}

// reply sends one response, with fd as SCM_RIGHTS when fd >= 0.
func (s *Server) reply(wmu *sync.Mutex, conn *net.UnixConn, r Response, fd int) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	wmu.Lock()
	defer wmu.Unlock()
	_, _, _ = conn.WriteMsgUnix(b, oob, nil)
}

func (s *Server) logRefusal(log *slog.Logger, req Request, why string) {
	log.Warn("dial refused", "broker", s.Broker, "decision", "deny", "reason", why, "op", req.Op, "target", target(req))
}

func target(req Request) string {
	if req.Op == OpResolve {
		return req.Host
	}
	return net.JoinHostPort(req.Host, strconv.Itoa(req.Port))
}

// reasonOf is a policy error's reason code; an error that is not a
// refusal is ReasonNotDeclared (fail closed).
func reasonOf(err error) string {
	var r *Refused
	if errors.As(err, &r) && r.Why != "" {
		return r.Why
	}
	return ReasonNotDeclared
}
