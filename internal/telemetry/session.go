package telemetry

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/custody"
)

// Span names: fixed strings, never anything a broker or the agent chose.
const (
	SpanSession   = "session"
	SpanProvision = "provision"
	SpanStart     = "start"
	SpanAdmission = "admission"
	SpanGateway   = "gateway"
	SpanModelTurn = "model.turn"
	SpanToolCall  = "tool.call"
	SpanApproval  = "approval.wait"
	SpanEgress    = "egress.connect"
	SpanState     = "state.op"
	SpanIngress   = "ingress.connect"
	SpanGatewayOp = "gateway.record"
)

// Session is the trace of one sandbox session: the root span "session",
// the lifecycle phases under it, and one span per crossing, parented by
// the attribution rule:
//
//   - a model turn (a model request, from its reservation to its
//     receipt) is a child of the session;
//   - a tool call is a child of the latest model turn begun before it
//     (the turn whose response carried the tool_use, when the agent
//     calls tools between turns as agents do), else of the session;
//   - an egress connection or a state operation is a child of the latest
//     tool call begun since that turn began, if any, else of the latest
//     turn, else of the session;
//   - an ingress connection comes from outside: a child of the session.
//
// Every input is something the root side observed itself (which channel
// a request came on, when it reserved, began or settled, the ids the
// store gave); nothing a broker sends picks a parent or names a span.
// All methods are safe for concurrent use; a nil *Session does nothing
// and stamps receipts with no ids.
type Session struct {
	p      *Provider
	tracer trace.Tracer
	root   trace.Span
	ctx    context.Context // carries root

	mu   sync.Mutex
	turn trace.SpanContext // the latest model turn begun
	tool trace.SpanContext // the latest tool call begun since turn
	// open are the spans of open crossings by reservation id.
	open map[int64]openSpan
	// owed are the spans of crossings settled whose receipt comes in a
	// later record, per broker, oldest first.
	owed map[string][]openSpan
	// tools are the tool calls begun, by the store's call id.
	tools map[int64]trace.Span
	// waits are the approval waits of tool calls, by approval id.
	waits map[string]trace.Span
	ended bool
	// red redacts the custodied values from every attribute made of what
	// a broker reported (Redact); nil: clip only.
	red *custody.Redactor
}

type openSpan struct {
	span   trace.Span
	target string
}

// maxOpenSpans bounds the spans a session keeps open, in all its maps
// together (each is about 1.3 KB of the root-side process, for as long
// as a daemon sandbox lives); past it a crossing's span is ended at once.
const maxOpenSpans = 8192

// heldLocked is how many spans the session keeps open.
func (s *Session) heldLocked() int {
	n := len(s.open) + len(s.tools) + len(s.waits)
	for _, os := range s.owed {
		n += len(os)
	}
	return n
}

// NewSession starts the session's root span with the sandbox's identity.
func (p *Provider) NewSession(ctx context.Context, id crossing.Identity, attrs ...attribute.KeyValue) *Session {
	t := p.tracer()
	ctx, root := t.Start(context.WithoutCancel(ctx), SpanSession, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(identityAttrs(id), attrs...)...))
	return &Session{p: p, tracer: t, root: root, ctx: ctx, open: map[int64]openSpan{}, owed: map[string][]openSpan{},
		tools: map[int64]trace.Span{}, waits: map[string]trace.Span{}}
}

// SetIdentity adds the sandbox's identity to the root span once it is
// known (the sandbox id is made at provision).
func (s *Session) SetIdentity(id crossing.Identity) {
	if s == nil {
		return
	}
	s.root.SetAttributes(identityAttrs(id)...)
}

func identityAttrs(id crossing.Identity) []attribute.KeyValue {
	var out []attribute.KeyValue
	for _, kv := range []struct{ k, v string }{{"cordon.sandbox.id", id.SandboxID}, {"cordon.workload", id.Workload},
		{"cordon.tenant", id.Tenant}, {"cordon.purpose", id.Purpose}} {
		if kv.v != "" {
			out = append(out, attribute.String(kv.k, clip(kv.v, MaxAttrLen)))
		}
	}
	return out
}

// Redact makes every attribute value built from what a broker reported
// (model id, target, action) pass through the custodian's redactor of
// values, the secrets of the sandbox's configuration: a compromised
// broker cannot export a key by naming it. Call it before the gateway
// starts.
func (s *Session) Redact(values [][]byte) {
	if s == nil || len(values) == 0 {
		return
	}
	s.mu.Lock()
	s.red = custody.NewRedactor(values)
	s.mu.Unlock()
}

// str is an attribute from a reported string: redacted, clipped.
func str(red *custody.Redactor, k, v string) attribute.KeyValue {
	if !red.Empty() {
		v = red.RedactString(v)
	}
	return attribute.String(k, clip(v, MaxAttrLen))
}

// TraceID is the session's trace id (32 hex digits); "" for nil.
func (s *Session) TraceID() string {
	if s == nil {
		return ""
	}
	return s.root.SpanContext().TraceID().String()
}

// Phase starts a lifecycle phase (provision, start, admission, gateway)
// under the session; call the returned func with the phase's error.
func (s *Session) Phase(name string) func(error) {
	if s == nil {
		return func(error) {}
	}
	_, sp := s.tracer.Start(s.ctx, name)
	return func(err error) { endErr(sp, err) }
}

// End ends the session's root span (err: how the session ended) and
// flushes what is queued, within ExportTimeout. Idempotent.
func (s *Session) End(err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	var left []trace.Span
	for id, o := range s.open {
		left = append(left, o.span)
		delete(s.open, id)
	}
	for b, os := range s.owed {
		for _, o := range os {
			left = append(left, o.span)
		}
		delete(s.owed, b)
	}
	for id, sp := range s.tools {
		left = append(left, sp)
		delete(s.tools, id)
	}
	for id, sp := range s.waits {
		left = append(left, sp)
		delete(s.waits, id)
	}
	s.mu.Unlock()
	for _, sp := range left {
		sp.SetAttributes(attribute.Bool("cordon.unfinished", true))
		sp.End()
	}
	endErr(s.root, err)
	s.p.Flush(s.ctx)
}

func endErr(sp trace.Span, err error) {
	if err != nil {
		sp.SetStatus(codes.Error, clip(err.Error(), MaxAttrLen))
	}
	sp.End()
}

// parentLocked is the parent of a crossing of broker by the rule.
func (s *Session) parentLocked(broker string) trace.SpanContext {
	switch broker {
	case "model", "ingress":
		return s.root.SpanContext()
	case "tool":
		if s.turn.IsValid() {
			return s.turn
		}
	default: // egress, state, gateway
		if s.tool.IsValid() {
			return s.tool
		}
		if s.turn.IsValid() {
			return s.turn
		}
	}
	return s.root.SpanContext()
}

// spanName is the span name of a crossing of broker.
func spanName(broker string) string {
	switch broker {
	case "model":
		return SpanModelTurn
	case "tool":
		return SpanToolCall
	case "egress":
		return SpanEgress
	case "state":
		return SpanState
	case "ingress":
		return SpanIngress
	}
	return SpanGatewayOp
}

// brokerName is broker when it is one of cordon's, else "gateway".
func brokerName(broker string) string {
	switch broker {
	case "model", "tool", "egress", "state", "ingress":
		return broker
	}
	return "gateway"
}

// startLocked starts a crossing span of broker by the rule and moves the
// rule's state (a model turn becomes the latest turn and forgets the
// previous turn's tool call; a tool call becomes the latest tool call).
func (s *Session) startLocked(broker string, attrs []attribute.KeyValue) trace.Span {
	sp := s.spanLocked(broker, attrs)
	switch broker {
	case "model":
		s.turn, s.tool = sp.SpanContext(), trace.SpanContext{}
	case "tool":
		s.tool = sp.SpanContext()
	}
	return sp
}

// spanLocked starts a crossing span of broker by the rule without moving
// the rule's state: a refused turn or tool call caused nothing after it.
func (s *Session) spanLocked(broker string, attrs []attribute.KeyValue) trace.Span {
	ctx := trace.ContextWithSpanContext(s.ctx, s.parentLocked(broker))
	_, sp := s.tracer.Start(ctx, spanName(broker), trace.WithAttributes(append(attrs, attribute.String("cordon.broker", brokerName(broker)))...))
	return sp
}

// Opened starts the span of a crossing whose reservation id the store
// gave (a model request, an egress or ingress connection), with what
// policy was asked.
func (s *Session) Opened(res int64, broker string, ask *crossing.Ask) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	attrs := askAttrs(ask, s.red)
	if s.ended {
		return
	}
	sp := s.startLocked(broker, attrs)
	if s.heldLocked() >= maxOpenSpans {
		sp.End()
		return
	}
	o := openSpan{span: sp}
	if ask != nil {
		// What ForRecord matches a receipt by: a host or route name is
		// short; a broker's ask may be most of a message, and the span
		// may be held as long as the sandbox lives. A copy of the first
		// bytes (a substring would keep the whole string).
		o.target = strings.Clone(ask.Target[:min(len(ask.Target), MaxAttrLen)])
	}
	s.open[res] = o
}

// Settled moves the span of a reservation settled without its receipt
// (the receipt comes in a later record) to the broker's owed spans.
func (s *Session) Settled(res int64, broker string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.open[res]
	if !ok {
		return
	}
	delete(s.open, res)
	if s.heldLocked() >= maxOpenSpans {
		o.span.End()
		return
	}
	s.owed[broker] = append(s.owed[broker], o)
}

// Span is one crossing's span, to stamp its receipt with and end.
type Span struct {
	sp  trace.Span
	red *custody.Redactor
	// orphan: made for a reservation or tool call this session never saw
	// open — an earlier gateway's, or an id a compromised broker made up.
	// It moved no attribution, and when the store refuses what it stands
	// for, End drops it unexported (no flood of the shared export queue).
	orphan bool
}

// Take removes and returns the span of reservation res (settle_record);
// a reservation without one (an earlier gateway's, or a made-up id) gets
// a new orphan span.
func (s *Session) Take(res int64, broker string) Span {
	if s == nil {
		return Span{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.open[res]; ok {
		delete(s.open, res)
		return Span{sp: o.span, red: s.red}
	}
	return Span{sp: s.spanLocked(broker, nil), red: s.red, orphan: true}
}

// ForRecord is the span of a receipt recorded on its own: the oldest
// owed span of broker whose target the receipt's target starts with
// (else the oldest), or, for a refusal or a receipt no crossing owed, a
// new span by the rule.
func (s *Session) ForRecord(rc *crossing.Receipt) Span {
	if s == nil {
		return Span{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rc.Decision == crossing.Allow {
		os := s.owed[rc.Broker]
		pick := -1
		for i, o := range os {
			if o.target != "" && strings.HasPrefix(rc.Target, o.target) {
				pick = i
				break
			}
		}
		if pick < 0 && len(os) > 0 {
			pick = 0
		}
		if pick >= 0 {
			sp := os[pick].span
			s.owed[rc.Broker] = append(os[:pick:pick], os[pick+1:]...)
			return Span{sp: sp, red: s.red}
		}
		return Span{sp: s.startLocked(rc.Broker, nil), red: s.red}
	}
	return Span{sp: s.spanLocked(rc.Broker, nil), red: s.red}
}

// Start starts a span of broker by the rule (a state operation, a
// gateway receipt) that the caller ends.
func (s *Session) Start(broker string) Span {
	if s == nil {
		return Span{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return Span{sp: s.startLocked(broker, nil), red: s.red}
}

// ToolBegun starts the span of a tool call the store began (call is the
// store's id), or ends the approval wait it went through.
func (s *Session) ToolBegun(call int64, server, tool, approval string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	attrs := []attribute.KeyValue{str(s.red, "cordon.tool.server", server), str(s.red, "cordon.tool.name", tool)}
	if s.ended {
		return
	}
	sp := s.startLocked("tool", attrs)
	if approval != "" {
		sp.AddEvent("approval.used", trace.WithAttributes(attribute.String("cordon.approval.id", clip(approval, 64))))
		if w, ok := s.waits[approval]; ok {
			delete(s.waits, approval)
			w.End()
		}
	}
	if s.heldLocked() >= maxOpenSpans {
		sp.End()
		return
	}
	s.tools[call] = sp
}

// ApprovalPending starts (once per approval id) the span of a tool call
// waiting for an operator's approval: a child of the latest turn, ended
// when the call is begun with it or the session ends.
func (s *Session) ApprovalPending(approval, server, tool string) {
	if s == nil || approval == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.waits[approval]; ok || s.ended || s.heldLocked() >= maxOpenSpans {
		return
	}
	ctx := trace.ContextWithSpanContext(s.ctx, s.parentLocked("tool"))
	_, sp := s.tracer.Start(ctx, SpanApproval, trace.WithAttributes(attribute.String("cordon.approval.id", clip(approval, 64)),
		str(s.red, "cordon.tool.server", server), str(s.red, "cordon.tool.name", tool)))
	s.waits[approval] = sp
}

// ApprovalDecided records an approval's state on its wait span, and ends
// the span when the state is final but the call will not be begun with
// it (denied, expired).
func (s *Session) ApprovalDecided(approval, state string) {
	if s == nil || approval == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.waits[approval]
	if !ok {
		return
	}
	w.AddEvent("approval." + approvalState(state))
	if state != "approved" && state != "pending" {
		delete(s.waits, approval)
		w.End()
	}
}

func approvalState(st string) string {
	switch st {
	case "pending", "approved", "denied", "expired", "consumed":
		return st
	}
	return "other"
}

// ToolEnded returns the span of a tool call the store began (call),
// to stamp its receipt with and end; a call without one (begun by an
// earlier gateway, or a made-up id) gets a new orphan span.
func (s *Session) ToolEnded(call int64) Span {
	if s == nil {
		return Span{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp, ok := s.tools[call]; ok {
		delete(s.tools, call)
		return Span{sp: sp, red: s.red}
	}
	return Span{sp: s.spanLocked("tool", nil), red: s.red, orphan: true}
}

// Stamp writes the span's trace and span ids into rc, replacing whatever
// rc carried (a broker's receipt may carry anything): the zero Span
// clears them.
func (sp Span) Stamp(rc *crossing.Receipt) {
	rc.TraceID, rc.SpanID = "", ""
	if sp.sp == nil {
		return
	}
	sc := sp.sp.SpanContext()
	if sc.IsValid() {
		rc.TraceID, rc.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
}

// End sets the span's attributes from the receipt recorded (id: the
// store's receipt id, 0 when unknown) and ends it.
func (sp Span) End(rc *crossing.Receipt, id int64, err error) {
	if sp.sp == nil || (sp.orphan && err != nil) {
		// An orphan whose receipt the store refused stood for nothing:
		// never ended, it is never exported (no processor keeps it).
		return
	}
	if rc != nil {
		sp.sp.SetAttributes(receiptAttrs(rc, sp.red)...)
		if rc.Decision != crossing.Allow {
			sp.sp.SetStatus(codes.Error, "denied")
		}
	}
	if id > 0 {
		sp.sp.SetAttributes(attribute.Int64("cordon.receipt.id", id))
	}
	if err != nil {
		sp.sp.SetStatus(codes.Error, "the receipt was not recorded")
	}
	sp.sp.End()
}

// Valid reports whether the span exists.
func (sp Span) Valid() bool { return sp.sp != nil }

type spanKey struct{}

// With returns ctx carrying sp, for a broker's trusted half to stamp the
// receipt it builds (StampFrom).
func With(ctx context.Context, sp Span) context.Context {
	return context.WithValue(ctx, spanKey{}, sp)
}

// StampFrom stamps rc with the span ctx carries (none: clears the ids).
func StampFrom(ctx context.Context, rc *crossing.Receipt) {
	sp, _ := ctx.Value(spanKey{}).(Span)
	sp.Stamp(rc)
}

// askAttrs are the attributes of a policy question: the action, and the
// target as what it is (a model id, host:port).
func askAttrs(a *crossing.Ask, red *custody.Redactor) []attribute.KeyValue {
	if a == nil {
		return nil
	}
	out := []attribute.KeyValue{str(red, "cordon.action", a.Action)}
	switch a.Resource {
	case "Model":
		out = append(out, str(red, "cordon.model", a.Target))
	case "Host":
		out = append(out, str(red, "cordon.target", a.Target+":"+strconv.Itoa(a.Port)))
	default:
		out = append(out, str(red, "cordon.target", a.Target))
	}
	return out
}

// receiptAttrs are the attributes a receipt gives its span: what was
// decided and measured — never a body, a digest of one, or a secret
// (receipts hold none: custody redacts before anything is receipted).
func receiptAttrs(rc *crossing.Receipt, red *custody.Redactor) []attribute.KeyValue {
	decision := crossing.Deny // the zero decision denies
	if rc.Decision == crossing.Allow {
		decision = crossing.Allow
	}
	out := []attribute.KeyValue{
		attribute.String("cordon.decision", decision),
		str(red, "cordon.receipt.action", rc.Action),
		attribute.Int64("cordon.bytes_in", rc.BytesIn),
		attribute.Int64("cordon.bytes_out", rc.BytesOut),
	}
	if c := ReasonClass(rc.Reason); c != "" {
		out = append(out, attribute.String("cordon.reason_class", c))
	}
	if rc.Target != "" {
		out = append(out, str(red, "cordon.receipt.target", rc.Target))
	}
	if rc.UpstreamCode != 0 {
		out = append(out, attribute.Int("cordon.upstream_status", rc.UpstreamCode))
	}
	u := rc.Usage
	for _, kv := range []struct {
		k string
		v int64
	}{{"cordon.usage.requests", u.Requests}, {"cordon.usage.input_tokens", u.InputTokens}, {"cordon.usage.output_tokens", u.OutputTokens},
		{"cordon.usage.bytes", u.Bytes}, {"cordon.usage.egress_bytes", u.EgressBytes}, {"cordon.usage.connections", u.Connections},
		{"cordon.usage.ingress_bytes", u.IngressBytes}} {
		if kv.v != 0 {
			out = append(out, attribute.Int64(kv.k, kv.v))
		}
	}
	if rc.Approval != "" {
		out = append(out, attribute.String("cordon.approval.id", clip(rc.Approval, 64)))
	}
	return out
}

// ReasonClass is the class of a receipt's reason: its first word when
// that is one of the fixed reason codes of the brokers and the gateway
// (reasonCodes), else "other". A reason arrives in a broker's receipt,
// so it is never exported as text: only a member of this closed set.
func ReasonClass(reason string) string {
	w, _, _ := strings.Cut(strings.TrimSpace(reason), " ")
	w = strings.ToLower(strings.TrimRight(w, ":,;"))
	if w == "" {
		return ""
	}
	if reasonCodes[w] {
		return w
	}
	return "other"
}

// reasonCodes are the reason codes of internal/broker/* and
// internal/gateway (and store.ReasonGatewayLost).
var reasonCodes = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`ok route allow allowed deny denied
		receipt_budget_exhausted receipt_budget_refusals receipt_missing gateway_lost
		not-admitted not-declared bad-request busy dial-failed peer-mismatch unavailable
		bad-host host-mismatch no-identity ip-literal host-not-allowed port-not-allowed
		resolve-failed address-denied budget-exceeded policy-denied connection-limit
		approval-pending approval-denied authority-unavailable upstream-error
		client-hello-timeout client-hello-invalid sni-missing sni-mismatch idle-timeout
		client-gone concurrency-limit target-unreachable ingress-bytes-exceeded stopped
		budget policy approval state`) {
		reasonCodes[c] = true
	}
}
