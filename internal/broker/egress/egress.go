package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/loglimit"
)

// Name is the broker's name in budgets, receipts and logs.
const Name = "egress"

// Reason codes: the X-Cordon-Reason header of a refusal, the Reason of a
// receipt, and the reason key of the log line. Stable names; the agent
// sees them, so they never carry host detail beyond the code.
const (
	ReasonBadRequest   = "bad-request"   // 400: origin-form, bad authority, unsupported scheme or protocol
	ReasonBadHost      = "bad-host"      // 400: not an ASCII DNS hostname
	ReasonHostMismatch = "host-mismatch" // 400: Host header disagrees with the request URI
	ReasonNoIdentity   = "no-identity"   // 500: no boundary-derived identity on the request

	ReasonIPLiteral       = "ip-literal"       // 403: the target is an IP address in any spelling
	ReasonHostNotAllowed  = "host-not-allowed" // 403: no rule names the host
	ReasonPortNotAllowed  = "port-not-allowed" // 403: a rule names the host, none lists the port
	ReasonResolveFailed   = "resolve-failed"   // 403: the allowed name did not resolve
	ReasonAddressDenied   = "address-denied"   // 403: a resolved address is in a denied range
	ReasonBudgetExceeded  = "budget-exceeded"  // 403, or a tunnel cut: the authority refused a reservation
	ReasonPolicyDenied    = "policy-denied"    // 403: policy (Cedar) refused the connection
	ReasonConnectionLimit = "connection-limit" // 403: Options.MaxConnections tunnels already open
	ReasonApprovalPending = "approval-pending" // 403: policy holds the connection for an operator's approval (X-Cordon-Approval names it)
	ReasonApprovalDenied  = "approval-denied"  // 403: an operator denied it, or too many approvals wait

	ReasonAuthorityUnavailable = "authority-unavailable" // 503: the authority could not be reached
	ReasonDialFailed           = "dial-failed"           // 502 (or close after 200): no checked address answered
	ReasonUpstreamError        = "upstream-error"        // 502: forwarding an absolute-form request failed

	// After "200 Connection Established" a refusal can only close the
	// connection; these appear in receipts and logs.
	ReasonClientHelloTimeout = "client-hello-timeout" // no complete ClientHello within ConnectTimeout
	ReasonClientHelloInvalid = "client-hello-invalid" // not TLS, or a malformed ClientHello
	ReasonSNIMissing         = "sni-missing"          // port 443 ClientHello without server_name
	ReasonSNIMismatch        = "sni-mismatch"         // server_name differs from the CONNECT host
	ReasonIdleTimeout        = "idle-timeout"         // tunnel cut: nothing moved for IdleTimeout
	ReasonClientGone         = "client-gone"          // the agent went away before the tunnel started
)

// Defaults for zero Options durations.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultIdleTimeout    = 2 * time.Minute
)

// Rule allows one hostname, or every name below a domain, on some ports.
type Rule struct {
	// Host is an exact name ("api.github.com") or "*.example.org", which
	// matches names below example.org at any depth but not example.org.
	// Case and one trailing dot are ignored. IP addresses are refused.
	Host string `json:"host"`
	// Ports the rule allows; empty means 443 only.
	Ports []int `json:"ports,omitempty"`
}

// Resolver looks up the addresses of an allowed name on the trusted side.
// *net.Resolver satisfies it. It is called only for names the allowlist
// allows, with network "ip", and its answers are checked before use.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Refusal is an error a checking Resolver (the privileged side's checked
// dialer) returns with its own reason code; a lookup keeps
// ReasonAddressDenied from it instead of reporting a failed resolution.
type Refusal interface {
	error
	Reason() string
}

// Options configure a Broker. Authority is required.
type Options struct {
	Allow []Rule
	// UnsafeAllowRanges re-allows denied address ranges (loopback,
	// private, link-local, the host's own addresses …). It weakens
	// isolation and is logged as a warning at New.
	UnsafeAllowRanges []netip.Prefix
	// Resolve statically maps names to addresses, in place of the
	// Resolver; the addresses are checked like resolved ones.
	Resolve map[string][]netip.Addr
	// Resolver is used for names not in Resolve; nil is net.DefaultResolver.
	Resolver  Resolver
	Authority crossing.Authority
	// Dialer dials "tcp" to an "ip:port" it has checked, never to a name;
	// nil is a net.Dialer with ConnectTimeout.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger *slog.Logger
	// MaxConnections bounds the concurrent connections of one workload
	// through this Broker; 0 is unbounded (the authority still budgets them).
	MaxConnections int64
	// IdleTimeout cuts a connection on which nothing moved for that long.
	IdleTimeout time.Duration
	// ConnectTimeout bounds resolution, the dial, and the wait for a
	// ClientHello after "200 Connection Established".
	ConnectTimeout time.Duration
}

// Broker is the egress proxy. It is an http.Handler for the gateway's
// proxy listener; the gateway binds the workload identity into each
// request's context with crossing.WithIdentity.
type Broker struct {
	allow     *allowlist
	addrs     *addrPolicy
	resolve   map[string][]netip.Addr
	resolver  Resolver
	authority crossing.Authority
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	log       *slog.Logger
	maxConns  int64
	idle      time.Duration
	connect   time.Duration
	transport *http.Transport

	mu     sync.Mutex
	active map[string]int64 // open connections per workload
	warns  loglimit.Bucket  // the crossings' WARN/ERROR lines
}

var (
	_ http.Handler = (*Broker)(nil)
	_ Resolver     = (*net.Resolver)(nil)
)

// New validates o and returns a Broker. It reads the host's interface
// addresses once, to deny them as targets.
func New(o Options) (*Broker, error) {
	if o.Authority == nil {
		return nil, errors.New("egress: Options.Authority is required")
	}
	if o.IdleTimeout < 0 || o.ConnectTimeout < 0 || o.MaxConnections < 0 {
		return nil, errors.New("egress: negative timeout or connection limit")
	}
	allow, err := compileAllow(o.Allow)
	if err != nil {
		return nil, err
	}
	addrs, err := newAddrPolicy(o.UnsafeAllowRanges)
	if err != nil {
		return nil, err
	}
	b := &Broker{
		allow:     allow,
		addrs:     addrs,
		resolver:  o.Resolver,
		authority: o.Authority,
		dial:      o.Dialer,
		log:       o.Logger,
		maxConns:  o.MaxConnections,
		idle:      o.IdleTimeout,
		connect:   o.ConnectTimeout,
		active:    map[string]int64{},
	}
	if b.resolve, err = compileResolve(o.Resolve); err != nil {
		return nil, err
	}
	if b.resolver == nil {
		b.resolver = net.DefaultResolver
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.idle == 0 {
		b.idle = DefaultIdleTimeout
	}
	if b.connect == 0 {
		b.connect = DefaultConnectTimeout
	}
	if b.dial == nil {
		d := &net.Dialer{Timeout: b.connect, KeepAlive: 30 * time.Second}
		b.dial = d.DialContext
	}
	b.transport = b.newTransport()
	for _, u := range b.addrs.unsafe {
		b.log.Warn("egress: unsafe address range allowed", slog.String("range", u.String())) // the gateway tags its logger with the broker
	}
	return b, nil
}

// ServeHTTP accepts CONNECT host:port and absolute-form http:// requests
// and refuses everything else.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := &attempt{start: time.Now(), action: "http"}
	if r.Method == http.MethodConnect {
		at.action = "connect"
	}
	id, ok := crossing.IdentityFrom(r.Context())
	if !ok {
		b.refuse(w, r, at, http.StatusInternalServerError, ReasonNoIdentity)
		return
	}
	at.id = id
	if r.Method == http.MethodConnect {
		b.serveConnect(w, r, at)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		b.refuse(w, r, at, http.StatusBadRequest, ReasonBadRequest)
		return
	}
	b.serveForward(w, r, at)
}

// attempt is one crossing on its way to a receipt.
type attempt struct {
	id       crossing.Identity
	action   string // "connect" or "http"
	target   string // host:port once known
	host     string // normalized name once known
	rule     string
	start    time.Time
	bytesIn  int64 // from the agent
	bytesOut int64 // to the agent
	budget   crossing.BudgetState
	usage    crossing.Amount
	upstream int // HTTP status from upstream
	policy   *crossing.PolicyDecision
	// approval is the approval the connection used, or the one it waits on.
	approval *crossing.ApprovalRef
}

// refuse answers a request with a refusal status and the reason header,
// then records the denial.
func (b *Broker) refuse(w http.ResponseWriter, r *http.Request, at *attempt, status int, reason string) {
	w.Header().Set("X-Cordon-Reason", reason)
	w.Header().Set("Connection", "close")
	msg := "cordon egress: " + http.StatusText(status) + ": " + reason
	if reason == ReasonApprovalPending && at.approval != nil {
		exp := at.approval.Expires.UTC().Format(time.RFC3339)
		w.Header().Set("X-Cordon-Approval", at.approval.ID)
		w.Header().Set("X-Cordon-Approval-Expires", exp)
		msg += ": this connection needs an operator's approval (id " + at.approval.ID + ", expires " + exp + "); retry it once approved"
		reason += " " + at.approval.ID
	}
	http.Error(w, msg, status)
	b.finish(r.Context(), at, crossing.Deny, reason)
}

// finish writes the receipt and the one canonical log line of a crossing;
// it returns the error recording the receipt (nil when it was recorded).
func (b *Broker) finish(ctx context.Context, at *attempt, decision, reason string, extra ...slog.Attr) error {
	d := time.Since(at.start)
	attrs := append([]slog.Attr{
		slog.String("workload", at.id.Workload),
		slog.String("broker", Name),
		slog.String("decision", decision),
		slog.String("reason", reason),
		slog.String("rule", at.rule),
		slog.String("sandbox_id", at.id.SandboxID),
		slog.String("action", at.action),
		slog.String("target", at.target),
		slog.Int64("bytes_in", at.bytesIn),
		slog.Int64("bytes_out", at.bytesOut),
		slog.Duration("duration", d),
	}, extra...)
	level := slog.LevelInfo
	if decision != crossing.Allow {
		level = slog.LevelWarn
	}
	var recErr error
	if at.id.Workload != "" {
		rc := crossing.Receipt{
			Time:         at.start,
			Identity:     at.id,
			Broker:       Name,
			Action:       at.action,
			Target:       at.target,
			Decision:     decision,
			Reason:       reason,
			Budget:       at.budget,
			UpstreamCode: at.upstream,
			BytesIn:      at.bytesIn,
			BytesOut:     at.bytesOut,
			Usage:        at.usage,
			Duration:     d,
			Policy:       at.policy,
		}
		if decision == crossing.Allow && at.approval != nil {
			rc.Approval = at.approval.ID
		}
		rctx, cancel := detached(ctx)
		recErr = b.authority.Record(rctx, rc)
		cancel()
		if recErr != nil {
			level = slog.LevelError
			attrs = append(attrs, slog.String("receipt_error", recErr.Error()))
		}
	}
	if level > slog.LevelInfo {
		dropped, ok := b.warns.Admit(time.Now())
		if !ok {
			return recErr
		}
		if dropped > 0 {
			attrs = append(attrs, slog.Int64("suppressed", dropped))
		}
	}
	b.log.LogAttrs(ctx, level, "egress crossing", attrs...)
	return recErr
}

// detached is a context for authority writes that must happen even after the
// request's context is done (settling, receipts), still bounded in time.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), authorityTimeout)
}

// authorityTimeout bounds every authority call: a stuck store refuses the
// crossing instead of hanging it.
const authorityTimeout = 10 * time.Second

// admit runs the checks every crossing passes before any byte moves:
// name normalization, the allowlist (before any resolution), the
// connection limit, then resolution and the address check. It returns
// the checked addresses to dial, or a status and reason. On success the
// caller must call b.release(at.id).
func (b *Broker) admit(ctx context.Context, at *attempt, host string, port int) ([]netip.Addr, int, string) {
	name, why := normalizeHost(host)
	if why != "" {
		if why == ReasonIPLiteral {
			at.target = printable(host) + ":" + strconv.Itoa(port)
			return nil, http.StatusForbidden, why
		}
		return nil, http.StatusBadRequest, why
	}
	at.host, at.target = name, name+":"+strconv.Itoa(port)
	rule, why := b.allow.match(name, port)
	at.rule = rule
	if why != "" {
		return nil, http.StatusForbidden, why
	}
	if !b.acquire(at.id.Workload) {
		return nil, http.StatusForbidden, ReasonConnectionLimit
	}
	addrs, why := b.lookup(ctx, name)
	if why != "" {
		b.release(at.id.Workload)
		return nil, http.StatusForbidden, why
	}
	return addrs, 0, ""
}

// maxDialAddrs bounds how many checked addresses one connection tries.
const maxDialAddrs = 8

// lookup resolves an allowed name and checks every address. One denied
// address denies the name: a mixed answer is either a misconfiguration
// or an attack, and picking the "good" half would hide it.
func (b *Broker) lookup(ctx context.Context, name string) ([]netip.Addr, string) {
	out, why, err := lookupChecked(ctx, b.resolve, b.resolver, b.addrs, b.connect, name)
	if err != nil {
		b.log.Debug("egress resolve", slog.String("host", name), slog.String("error", err.Error()))
	}
	return out, why
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// dialChecked dials the checked addresses in order — the address, never
// the name — and returns the first connection made.
func (b *Broker) dialChecked(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, b.connect)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		c, err := b.dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (b *Broker) acquire(workload string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.maxConns > 0 && b.active[workload] >= b.maxConns {
		return false
	}
	b.active[workload]++
	return true
}

func (b *Broker) release(workload string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.active[workload]--; b.active[workload] <= 0 {
		delete(b.active, workload)
	}
}

// reserve holds one connection in the authority and returns the meter that
// budgets the connection's bytes. A refusal is returned as status+reason.
// open admits host:port (allow-list, resolution, address checks, the
// connection limit) and reserves the connection's budget, refusing the
// request itself when either says no. On success the caller must call
// release when the connection ends.
func (b *Broker) open(w http.ResponseWriter, r *http.Request, at *attempt, host string, port int) (addrs []netip.Addr, m *meter, release func(), ok bool) {
	ctx := r.Context()
	addrs, status, reason := b.admit(ctx, at, host, port)
	if status != 0 {
		b.refuse(w, r, at, status, reason)
		return nil, nil, nil, false
	}
	release = func() { b.release(at.id.Workload) }
	m, status, reason = b.reserve(ctx, at, port)
	if status != 0 {
		release()
		b.refuse(w, r, at, status, reason)
		return nil, nil, nil, false
	}
	return addrs, m, release, true
}

func (b *Broker) reserve(ctx context.Context, at *attempt, port int) (*meter, int, string) {
	rctx, cancel := context.WithTimeout(ctx, authorityTimeout)
	rctx = crossing.WithAsk(rctx, crossing.Ask{Action: "egress.connect", Resource: "Host", Target: at.host, Port: port})
	res, st, err := b.authority.Reserve(rctx, at.id, Name, crossing.Amount{Connections: 1}, 0)
	cancel()
	at.budget, at.policy, at.approval = st, res.Policy, res.Approval
	switch {
	case errors.Is(err, crossing.ErrApprovalPending):
		return nil, http.StatusForbidden, ReasonApprovalPending
	case errors.Is(err, crossing.ErrApprovalDenied):
		return nil, http.StatusForbidden, ReasonApprovalDenied
	case errors.Is(err, crossing.ErrPolicyDenied):
		return nil, http.StatusForbidden, ReasonPolicyDenied
	case errors.Is(err, crossing.ErrBudgetExceeded):
		return nil, http.StatusForbidden, ReasonBudgetExceeded
	case err != nil:
		b.log.Error("egress authority reserve", slog.String("workload", at.id.Workload), slog.String("error", err.Error()))
		return nil, http.StatusServiceUnavailable, ReasonAuthorityUnavailable
	}
	return &meter{b: b, ctx: ctx, id: at.id, main: res, state: st}, 0, ""
}

// printable returns s if it is short printable ASCII, else "": receipts
// and logs never carry arbitrary agent bytes.
func printable(s string) string {
	if len(s) > 255 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return ""
		}
	}
	return s
}

// compileResolve checks a static Resolve map (names to addresses) and keys
// it by normalized name.
func compileResolve(resolve map[string][]netip.Addr) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for name, as := range resolve {
		n, why := normalizeHost(name)
		if why != "" {
			return nil, fmt.Errorf("egress: Resolve key %q: not a hostname", name)
		}
		for _, a := range as {
			if !a.IsValid() {
				return nil, fmt.Errorf("egress: Resolve %q: invalid address", name)
			}
		}
		out[n] = append(out[n], as...)
	}
	return out, nil
}
