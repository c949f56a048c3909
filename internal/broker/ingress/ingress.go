package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/loglimit"
)

// Name is the broker's name: in receipts and as its channel's broker.
const Name = "ingress"

// Action and Resource are the policy question of a connection: Cedar
// Action::"ingress.connect" on a Route (the route's name), with the
// sandbox port as context.port.
const (
	Action   = "ingress.connect" // policy.ActionIngressConnect (no policy import here)
	Resource = "Route"
)

// ReceiptAction is the receipt's action for every ingress connection.
const ReceiptAction = "connect"

// Reason codes, in receipts and logs.
const (
	ReasonOK                   = "ok"
	ReasonPolicyDenied         = "policy-denied"
	ReasonBudgetExceeded       = "budget-exceeded"
	ReasonApprovalPending      = "approval-pending"
	ReasonApprovalDenied       = "approval-denied"
	ReasonAuthorityUnavailable = "authority-unavailable"
	ReasonConcurrencyLimit     = "concurrency-limit"  // the route's max_concurrent connections already open
	ReasonTargetUnreachable    = "target-unreachable" // nothing listens on the port inside the sandbox
	ReasonBytesExceeded        = "ingress-bytes-exceeded"
	ReasonSandboxGone          = "stopped"
)

// Route is one inbound route as the broker process gets it.
type Route struct {
	Name string `json:"name"`
	// Port is the port inside the sandbox (127.0.0.1).
	Port int `json:"port"`
	// Listen is the host address (for logs; the listener is given).
	Listen string `json:"listen"`
	// MaxConcurrent bounds the route's open connections.
	MaxConcurrent int `json:"max_concurrent"`
}

// Config is the broker process's configuration: the routes, in the order
// of its listeners.
type Config struct {
	Routes []Route `json:"routes,omitempty"`
}

// Options configure a Broker.
type Options struct {
	Routes []Route
	// Listeners are the routes' host listeners, one per route, in order.
	Listeners []net.Listener
	Identity  crossing.Identity
	Authority crossing.Authority
	// Dial connects to "127.0.0.1:<port>" inside the sandbox (the
	// privileged side's checked dialer).
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger *slog.Logger
	// Chunk is how many bytes one budget reservation holds when
	// budgets.ingress_bytes is limited; 0 is DefaultChunk.
	Chunk int64
}

// DefaultChunk is the byte reservation of a metered route.
const DefaultChunk = 256 << 10

// authorityTimeout bounds every authority call and the dial.
const authorityTimeout = 10 * time.Second

// Broker serves the inbound routes.
type Broker struct {
	o     Options
	log   *slog.Logger
	slots []chan struct{} // per route: one token per open connection
	wg    sync.WaitGroup
	warns loglimit.Bucket // the WARN/ERROR lines of refused connections
}

// New checks o and returns the broker.
func New(o Options) (*Broker, error) {
	if len(o.Routes) != len(o.Listeners) {
		return nil, fmt.Errorf("ingress: %d routes, %d listeners", len(o.Routes), len(o.Listeners))
	}
	if o.Authority == nil || o.Dial == nil || o.Identity.Workload == "" {
		return nil, errors.New("ingress: no authority, dialer or identity")
	}
	if o.Chunk <= 0 {
		o.Chunk = DefaultChunk
	}
	b := &Broker{o: o, log: o.Logger}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	for _, r := range o.Routes {
		if r.Port < 1 || r.Port > 65535 || r.MaxConcurrent < 1 {
			return nil, fmt.Errorf("ingress: route %q: port %d, max_concurrent %d", r.Name, r.Port, r.MaxConcurrent)
		}
		b.slots = append(b.slots, make(chan struct{}, r.MaxConcurrent))
	}
	return b, nil
}

// Serve accepts on every route until ctx ends, then closes the listeners
// and every open connection and waits for their receipts.
func (b *Broker) Serve(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var accept sync.WaitGroup
	for i := range b.o.Routes {
		accept.Add(1)
		go func() {
			defer accept.Done()
			b.accept(ctx, i)
		}()
	}
	<-ctx.Done()
	for _, l := range b.o.Listeners {
		l.Close()
	}
	accept.Wait()
	b.wg.Wait()
}

func (b *Broker) accept(ctx context.Context, i int) {
	l := b.o.Listeners[i]
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				// EMFILE and the like: back off, keep the route.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.handle(ctx, i, c)
		}()
	}
}

// attempt is one connection's receipt in the making.
type attempt struct {
	route    Route
	client   string
	start    time.Time
	budget   crossing.BudgetState
	policy   *crossing.PolicyDecision
	approval *crossing.ApprovalRef
}

// handle admits one connection and relays it.
func (b *Broker) handle(ctx context.Context, i int, client net.Conn) {
	defer client.Close()
	at := &attempt{route: b.o.Routes[i], client: client.RemoteAddr().String(), start: time.Now()}
	select {
	case b.slots[i] <- struct{}{}:
		defer func() { <-b.slots[i] }()
	default:
		b.record(ctx, at, crossing.Deny, ReasonConcurrencyLimit, 0, 0, nil)
		return
	}
	res, why := b.reserve(ctx, at)
	if why != "" {
		b.record(ctx, at, crossing.Deny, why, 0, 0, nil)
		return
	}
	m := &meter{b: b, ctx: ctx, state: at.budget}
	dctx, cancel := context.WithTimeout(ctx, authorityTimeout)
	up, err := b.o.Dial(dctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(at.route.Port)))
	cancel()
	if err != nil {
		b.log.Debug("ingress dial", "route", at.route.Name, "err", err)
		b.settle(ctx, at, res, m, crossing.Deny, ReasonTargetUnreachable, 0, 0)
		return
	}
	defer up.Close()
	toSandbox, fromSandbox, cut := relay(ctx, client, up, m)
	reason := ReasonOK
	switch {
	case cut != "":
		reason = cut
	case ctx.Err() != nil:
		reason = ReasonSandboxGone
	}
	b.settle(ctx, at, res, m, crossing.Allow, reason, fromSandbox, toSandbox)
}

// reserve asks the authority for the connection: policy and the
// connection budget.
func (b *Broker) reserve(ctx context.Context, at *attempt) (crossing.Reservation, string) {
	rctx, cancel := context.WithTimeout(ctx, authorityTimeout)
	defer cancel()
	rctx = crossing.WithAsk(rctx, crossing.Ask{Action: Action, Resource: Resource, Target: at.route.Name, Port: at.route.Port})
	res, st, err := b.o.Authority.Reserve(rctx, b.o.Identity, Name, crossing.Amount{IngressConnections: 1}, 0)
	at.budget, at.policy, at.approval = st, res.Policy, res.Approval
	switch {
	case err == nil:
		return res, ""
	case errors.Is(err, crossing.ErrApprovalPending):
		return res, ReasonApprovalPending
	case errors.Is(err, crossing.ErrApprovalDenied):
		return res, ReasonApprovalDenied
	case errors.Is(err, crossing.ErrPolicyDenied):
		return res, ReasonPolicyDenied
	case errors.Is(err, crossing.ErrBudgetExceeded):
		return res, ReasonBudgetExceeded
	}
	b.log.Error("ingress authority reserve", "route", at.route.Name, "err", err)
	return res, ReasonAuthorityUnavailable
}

// settle gives back the byte reservations and settles the connection's
// with what it used, with its receipt.
func (b *Broker) settle(ctx context.Context, at *attempt, res crossing.Reservation, m *meter, decision, reason string, fromSandbox, toSandbox int64) {
	used := m.finish(fromSandbox + toSandbox)
	used.IngressConnections = 1
	b.record(ctx, at, decision, reason, fromSandbox, toSandbox, func(rc crossing.Receipt) error {
		sctx, cancel := detached(ctx)
		defer cancel()
		if sr, ok := b.o.Authority.(crossing.SettleRecorder); ok {
			_, err := sr.SettleRecord(sctx, res, used, rc)
			if err != nil {
				// The receipt could not be recorded and the settlement
				// went down with its transaction: the bytes moved, so
				// charge them alone (a reservation already settled is
				// not found, never charged twice).
				if _, serr := b.o.Authority.Settle(sctx, res, used); serr != nil {
					b.log.Error("ingress settle after a failed receipt", "route", at.route.Name, "err", serr)
				}
			}
			return err
		}
		if _, err := b.o.Authority.Settle(sctx, res, used); err != nil {
			return err
		}
		return b.o.Authority.Record(sctx, rc)
	})
}

// record writes the connection's receipt (with commit, when the crossing
// holds a reservation) and its log line.
func (b *Broker) record(ctx context.Context, at *attempt, decision, reason string, fromSandbox, toSandbox int64, commit func(crossing.Receipt) error) {
	d := time.Since(at.start)
	rc := crossing.Receipt{
		Time: at.start, Identity: b.o.Identity, Broker: Name, Action: ReceiptAction, Target: at.route.Name,
		Client: at.client, Decision: decision, Reason: reason, Budget: at.budget,
		BytesIn: fromSandbox, BytesOut: toSandbox, Duration: d, Policy: at.policy,
		Usage: crossing.Amount{IngressBytes: fromSandbox + toSandbox},
	}
	if commit != nil {
		rc.Usage.IngressConnections = 1
	}
	if decision == crossing.Allow && at.approval != nil {
		rc.Approval = at.approval.ID
	}
	var err error
	if commit != nil {
		err = commit(rc)
	} else {
		rctx, cancel := detached(ctx)
		err = b.o.Authority.Record(rctx, rc)
		cancel()
	}
	level := slog.LevelInfo
	if decision != crossing.Allow || reason != ReasonOK {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("workload", b.o.Identity.Workload), slog.String("broker", Name), slog.String("decision", decision),
		slog.String("reason", reason), slog.String("rule", at.route.Name), slog.String("client", at.client),
		slog.Int64("bytes_from_sandbox", fromSandbox), slog.Int64("bytes_to_sandbox", toSandbox), slog.Duration("duration", d)}
	if err != nil {
		level = slog.LevelError
		attrs = append(attrs, slog.String("receipt_error", err.Error()))
	}
	if level > slog.LevelInfo {
		dropped, ok := b.warns.Admit(time.Now())
		if !ok {
			return
		}
		if dropped > 0 {
			attrs = append(attrs, slog.Int64("suppressed", dropped))
		}
	}
	b.log.LogAttrs(ctx, level, "ingress crossing", attrs...)
}

// detached is a context for authority writes that must happen even after
// the broker stops, still bounded in time.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), authorityTimeout)
}
