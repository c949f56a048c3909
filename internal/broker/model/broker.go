package model

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/custody"
)

// Name is the model broker's name in budgets, receipts, logs and on its
// authority channel.
const Name = "model"

// Route is one declared model destination.
type Route struct {
	Name       string   // config name
	API        string   // "anthropic" | "openai" | "gemini"
	Upstream   *url.URL // the provider's origin (optionally with a path prefix); the request path, /v1/… or /v1beta/…, is appended
	Credential string   // secret name for crossing.Secrets
	Models     []string // allowed model ids, as path.Match globs
}

// Limits bound every request and response.
type Limits struct {
	MaxRequestBytes      int64    `json:"max_request_bytes"`      // request body; > 0
	MaxResponseBytes     int64    `json:"max_response_bytes"`     // upstream response body, streamed or not; > 0
	MaxAttachments       int      `json:"max_attachments"`        // inline attachments per request; 0 allows none
	MaxAttachmentBytes   int64    `json:"max_attachment_bytes"`   // decoded size of one attachment
	AllowedMIME          []string `json:"allowed_mime"`           // attachment media-type globs ("image/*"); none allows no attachment
	MaxConcurrentStreams int64    `json:"max_concurrent_streams"` // streams open through this broker, all workloads together; > 0
	// DefaultMaxOutputTokens is the output cap the broker sets on an
	// OpenAI request that sets none (and reserves for it, and for an
	// Anthropic request without max_tokens); 0 means 4096. Config key:
	// limits.default_max_output_tokens.
	DefaultMaxOutputTokens int64 `json:"default_max_output_tokens,omitempty"`
}

// Options configure a Broker.
type Options struct {
	Routes    []Route
	Limits    Limits
	Authority crossing.Authority
	Secrets   crossing.Secrets
	Transport http.RoundTripper // nil: a tuned http.Transport shared by every route
	Logger    *slog.Logger      // nil: discard
	Now       func() time.Time  // nil: time.Now
}

// APIs.
const (
	APIAnthropic = "anthropic"
	APIOpenAI    = "openai"
	APIGemini    = "gemini"
)

// defaultAnthropicVersion is sent when the agent names none.
const defaultAnthropicVersion = "2023-06-01"

// defaultMaxOutput is DefaultMaxOutputTokens when the operator sets none.
const defaultMaxOutput = 4096

// authorityTimeout bounds Settle and Record after a response: a stuck store
// must not hold the handler (the reservation is the store's to expire).
const authorityTimeout = 5 * time.Second

// stallTimeout bounds one write to the agent: a client that stops reading
// does not hold a stream, its budget and a provider connection forever.
const stallTimeout = time.Minute

// endpoint is one provider operation the broker carries.
type endpoint struct {
	idx    int // index in endpoints
	api    api
	action string // receipt action
	path   string
	resp   bool   // OpenAI Responses API (its stream events are typed)
	count  bool   // Anthropic count_tokens, Gemini countTokens: generates nothing
	method string // Gemini: the method after the model in the path
	stream bool   // Gemini streamGenerateContent (the body has no "stream")
}

var endpoints = [...]endpoint{
	{idx: 0, api: apiAnthropic, action: "anthropic.messages", path: "/v1/messages"},
	{idx: 1, api: apiAnthropic, action: "anthropic.count_tokens", path: "/v1/messages/count_tokens", count: true},
	{idx: 2, api: apiOpenAI, action: "openai.chat", path: "/v1/chat/completions"},
	{idx: 3, api: apiOpenAI, action: "openai.responses", path: "/v1/responses", resp: true},
	{idx: 4, api: apiGemini, action: "gemini.generate", path: geminiPrefix + "{model}:generateContent", method: "generateContent"},
	{idx: 5, api: apiGemini, action: "gemini.stream", path: geminiPrefix + "{model}:streamGenerateContent", method: "streamGenerateContent", stream: true},
	{idx: 6, api: apiGemini, action: "gemini.count_tokens", path: geminiPrefix + "{model}:countTokens", method: "countTokens", count: true},
}

// endpointFor returns the operation of a request; nil when the broker does
// not carry it.
func endpointFor(r *http.Request) *endpoint {
	if r.Method != http.MethodPost {
		return nil
	}
	if strings.HasPrefix(r.URL.Path, geminiPrefix) {
		return geminiOp(r.URL.EscapedPath())
	}
	for i := range endpoints {
		if endpoints[i].path == r.URL.Path {
			return &endpoints[i]
		}
	}
	return nil
}

// guessAPI picks the error shape for a request to no known endpoint.
func guessAPI(r *http.Request) api {
	if r.Header.Get("Anthropic-Version") != "" || strings.HasPrefix(r.URL.Path, "/v1/messages") {
		return apiAnthropic
	}
	if strings.HasPrefix(r.URL.Path, "/v1beta/") || r.Header.Get("X-Goog-Api-Key") != "" {
		return apiGemini
	}
	return apiOpenAI
}

// route is a validated Route with its upstream URLs resolved.
type route struct {
	Route
	api  api
	urls [len(endpoints)]string // by endpoint index; "" for the other API's
	base string                 // the upstream origin and path prefix (Gemini URLs are built per model)
	cred *atomic.Pointer[credHeader]
}

// Broker is the Model Access Broker. It is safe for concurrent use.
type Broker struct {
	routes    []route
	lim       Limits
	authority crossing.Authority
	secrets   crossing.Secrets
	transport http.RoundTripper
	log       *slog.Logger
	now       func() time.Time
	streams   atomic.Int64 // open streams
	redactors custody.RedactorCache
	pool      sync.Pool // *exchange
}

// New validates o and returns a Broker.
func New(o Options) (*Broker, error) {
	if o.Authority == nil {
		return nil, errors.New("model broker: no authority")
	}
	if o.Secrets == nil {
		return nil, errors.New("model broker: no secrets custodian")
	}
	if len(o.Routes) == 0 {
		return nil, errors.New("model broker: no routes")
	}
	l := o.Limits
	switch {
	case l.MaxRequestBytes <= 0:
		return nil, errors.New("model broker: MaxRequestBytes must be positive")
	case l.MaxResponseBytes <= 0:
		return nil, errors.New("model broker: MaxResponseBytes must be positive")
	case l.MaxConcurrentStreams <= 0:
		return nil, errors.New("model broker: MaxConcurrentStreams must be positive")
	case l.MaxAttachments < 0 || l.MaxAttachmentBytes < 0:
		return nil, errors.New("model broker: attachment limits must not be negative")
	case l.DefaultMaxOutputTokens < 0 || l.DefaultMaxOutputTokens > maxOutputCap:
		return nil, fmt.Errorf("model broker: DefaultMaxOutputTokens must be from 1 to %d (0: %d)", maxOutputCap, defaultMaxOutput)
	}
	if l.DefaultMaxOutputTokens == 0 {
		l.DefaultMaxOutputTokens = defaultMaxOutput
	}
	for _, g := range l.AllowedMIME {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			return nil, fmt.Errorf("model broker: allowed media type %q: not a valid glob", g)
		}
	}
	l.AllowedMIME = append([]string(nil), l.AllowedMIME...)
	b := &Broker{lim: l, authority: o.Authority, secrets: o.Secrets, transport: o.Transport, log: o.Logger, now: o.Now}
	names := map[string]bool{}
	for _, r := range o.Routes {
		rt, err := compileRoute(r)
		if err != nil {
			return nil, fmt.Errorf("model broker: route %q: %w", r.Name, err)
		}
		if names[r.Name] {
			return nil, fmt.Errorf("model broker: route %q declared twice", r.Name)
		}
		names[r.Name] = true
		b.routes = append(b.routes, rt)
	}
	if b.transport == nil {
		b.transport = newTransport()
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.now == nil {
		b.now = time.Now
	}
	b.pool.New = func() any { return new(exchange) }
	return b, nil
}

func compileRoute(r Route) (route, error) {
	rt := route{Route: r, cred: new(atomic.Pointer[credHeader])}
	rt.Models = append([]string(nil), r.Models...)
	switch r.API {
	case APIAnthropic:
		rt.api = apiAnthropic
	case APIOpenAI:
		rt.api = apiOpenAI
	case APIGemini:
		rt.api = apiGemini
	default:
		return rt, fmt.Errorf("unknown API %q (want %q, %q or %q)", r.API, APIAnthropic, APIOpenAI, APIGemini)
	}
	if r.Name == "" {
		return rt, errors.New("no name")
	}
	if r.Credential == "" {
		return rt, errors.New("no credential")
	}
	if len(r.Models) == 0 {
		return rt, errors.New("no models allowed")
	}
	for _, m := range r.Models {
		if _, err := path.Match(m, ""); err != nil || m == "" {
			return rt, fmt.Errorf("model glob %q is not valid", m)
		}
	}
	u := r.Upstream
	switch {
	case u == nil || u.Host == "":
		return rt, errors.New("no upstream host")
	case u.User != nil:
		return rt, errors.New("upstream URL must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return rt, errors.New("upstream URL must be an origin with an optional path")
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		// An operator-declared local model server: the credential
		// never leaves the host.
	case u.Scheme == "http":
		return rt, errors.New("plain http upstream allowed only on loopback: the credential would cross the network in clear")
	default:
		return rt, fmt.Errorf("upstream scheme %q not supported", u.Scheme)
	}
	base := strings.TrimSuffix((&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String(), "/")
	rt.base = base
	for i, ep := range endpoints {
		if ep.api == rt.api && ep.api != apiGemini {
			rt.urls[i] = base + ep.path
		}
	}
	return rt, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// newTransport is the shared upstream transport: many idle connections per
// provider (agents call the same host all the time), and no compression,
// so that bodies arrive as identity and redaction and accounting see the
// bytes the agent will get.
func newTransport() *http.Transport {
	t := NewTransport((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	t.Proxy = http.ProxyFromEnvironment
	return t
}

// NewTransport is the broker's tuned upstream transport (Options.Transport)
// with every connection made by dial — in a broker process, the privileged
// side's checked dialer — and no proxy.
func NewTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		DialContext:           dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
	}
}

// pick returns the first route of the API whose globs allow the model.
func (b *Broker) pick(a api, model []byte) *route {
	name := string(model)
	for i := range b.routes {
		rt := &b.routes[i]
		if rt.api != a {
			continue
		}
		if matchModel(rt.Models, name) {
			return rt
		}
	}
	return nil
}

// ServeHTTP carries one model call: identity, request guard, route, budget,
// credential injection, the upstream call, the response guard, settlement
// and the receipt.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := b.pool.Get().(*exchange)
	defer b.release(x)
	x.start = b.now()
	x.ep = endpointFor(r)
	if x.ep != nil {
		x.api = x.ep.api
	} else {
		x.api = guessAPI(r)
	}
	id, ok := crossing.IdentityFrom(r.Context())
	if !ok {
		// A gateway bug: every listener binds an identity. Nothing is
		// forwarded, and there is no one to charge a receipt to.
		b.log.LogAttrs(r.Context(), slog.LevelError, "model crossing without identity",
			slog.String("broker", "model"), slog.String("decision", crossing.Deny))
		writeError(w, x.api, kindInternal, "the gateway did not identify this workload; nothing was forwarded")
		return
	}
	x.rc.Identity = id
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	x.cancel = cancel
	if ref := b.admit(r, x); ref != nil {
		b.deny(r.Context(), w, x, ref)
		return
	}
	b.call(ctx, w, r, x)
}

// admit runs every check that happens before budget is reserved.
func (b *Broker) admit(r *http.Request, x *exchange) *refusal {
	if x.ep == nil {
		x.rc.Action = "unknown"
		x.rc.Target = quoteForMessage([]byte(r.Method + " " + r.URL.Path))
		return refuse(kindNotFound, "the model broker carries POST /v1/messages, /v1/messages/count_tokens, /v1/chat/completions, /v1/responses and /v1beta/models/{model}:generateContent, :streamGenerateContent, :countTokens only")
	}
	x.rc.Action = x.ep.action
	var pathModel []byte
	if x.api == apiGemini {
		m, ref := geminiModel(r.URL.EscapedPath())
		if ref == nil {
			ref = geminiQuery(r, x.ep)
		}
		if ref != nil {
			return ref
		}
		pathModel = m
	}
	if ref := checkHeaders(r.Header); ref != nil {
		return ref
	}
	if ref := b.readBody(r, x); ref != nil {
		return ref
	}
	x.rc.RequestDigest = digest(x.body.b)
	var info reqInfo
	var ref *refusal
	if x.api == apiGemini {
		info, ref = guardGemini(x.body.b, &b.lim, x.ep, pathModel)
	} else {
		info, ref = guardRequest(x.body.b, &b.lim, x.ep)
	}
	x.info = info
	if info.model != nil && utf8ValidCapped(info.model) {
		x.rc.Target = string(info.model)
	}
	if ref != nil {
		return ref
	}
	x.route = b.pick(x.api, info.model)
	if x.route == nil {
		return refuse(kindForbidden, "model "+quoteForMessage(info.model)+" is not allowed for this workload")
	}
	if x.ep.count && info.stream {
		return refuse(kindInvalid, "count_tokens does not stream")
	}
	return nil
}

// call reserves budget, makes the upstream call and relays the answer.
func (b *Broker) call(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange) {
	secret, err := b.secrets.Secret(x.route.Credential)
	if err != nil || len(secret) == 0 || !validHeaderValue(secret) {
		b.log.LogAttrs(ctx, slog.LevelError, "model route credential unavailable",
			slog.String("rule", x.route.Name), slog.Bool("empty", err == nil))
		b.deny(r.Context(), w, x, refuse(kindUnavailable, "the credential for this model route is unavailable; nothing was forwarded"))
		return
	}
	var streams int64
	if x.info.stream {
		if b.streams.Add(1) > b.lim.MaxConcurrentStreams {
			b.streams.Add(-1)
			b.deny(r.Context(), w, x, refuse(kindBusy, "too many model streams are open through the gateway; retry shortly"))
			return
		}
		x.streamSlot, streams = true, 1
	}
	if !b.reserve(ctx, w, r, x, streams) {
		return
	}
	x.m = b.redactors.Get(b.secrets.Values())

	req, err := b.upstreamRequest(ctx, r, x, secret)
	if err != nil {
		x.charge = chargeNone
		x.outcome = "upstream request not built"
		b.fail(w, x, kindUpstream, "the model upstream request could not be built")
		b.finish(r.Context(), x)
		return
	}
	resp, err := b.transport.RoundTrip(req)
	if err != nil {
		x.charge = chargeUnknown
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			x.charge = chargeNone // never sent
		}
		if ctx.Err() != nil {
			x.outcome = "aborted: agent disconnected"
		} else {
			x.outcome = "upstream unreachable"
			b.fail(w, x, kindUpstream, "the model upstream could not be reached")
		}
		b.finish(r.Context(), x)
		return
	}
	x.rc.UpstreamCode = resp.StatusCode
	if contentEncoded(resp.Header) || resp.Uncompressed {
		// Nothing of it reaches the agent. A 2xx may have generated
		// output: it settles at the reservation.
		resp.Body.Close()
		x.charge = chargeNone
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			x.charge = chargeUnknown
		}
		x.outcome = "upstream response encoding refused"
		b.fail(w, x, kindUpstream, "the model upstream sent a compressed response, which the broker does not relay (it asks for identity encoding)")
		b.finish(r.Context(), x)
		return
	}
	rc := http.NewResponseController(w)
	if isEventStream(resp.Header.Get("Content-Type")) && resp.StatusCode == http.StatusOK {
		b.relayStream(ctx, w, rc, resp, x)
	} else {
		b.relayBuffered(ctx, w, rc, resp, x)
	}
	resp.Body.Close()
	if x.deadline {
		// The server keeps the connection for the agent's next request:
		// it must not inherit this response's write deadline.
		_ = rc.SetWriteDeadline(time.Time{})
	}
	b.finish(r.Context(), x)
}

// reserve plans the output cap, asks the root side to reserve the call's
// budget (policy and approvals decide there) and records the decision in
// the receipt; on a refusal it answers the agent and returns false.
func (b *Broker) reserve(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, streams int64) bool {
	x.plan = capEdits(&x.info, x.ep, b.lim.DefaultMaxOutputTokens)
	x.want = b.reservation(x)
	ask := crossing.Ask{Action: "model.invoke", Resource: "Model", Target: x.rc.Target,
		RequestDigest: x.rc.RequestDigest, RequestBytes: x.bodyLen, Operation: x.rc.Action}
	res, st, err := b.authority.Reserve(crossing.WithAsk(ctx, ask), x.rc.Identity, Name, x.want, streams)
	x.rc.Budget, x.rc.Policy = st, res.Policy
	switch {
	case errors.Is(err, crossing.ErrApprovalPending) && res.Approval != nil:
		b.denyApproval(r.Context(), w, x, res.Approval)
		return false
	case errors.Is(err, crossing.ErrApprovalDenied):
		b.deny(r.Context(), w, x, refuse(kindForbidden, "an operator denied this exact request, or too many approvals are waiting; nothing was forwarded"))
		return false
	case errors.Is(err, crossing.ErrPolicyDenied):
		b.deny(r.Context(), w, x, refuse(kindForbidden, "denied by policy for this workload; nothing was forwarded"))
		return false
	case errors.Is(err, crossing.ErrBudgetExceeded):
		b.deny(r.Context(), w, x, refuse(kindBudget, "the workload's model budget is exhausted ("+exceeded(st, x.want, streams)+"); nothing was forwarded"))
		return false
	case err != nil:
		b.log.LogAttrs(ctx, slog.LevelError, "model budget authority unavailable", slog.String("error", err.Error()))
		b.deny(r.Context(), w, x, refuse(kindUnavailable, "the budget authority is unavailable; nothing was forwarded"))
		return false
	}
	x.res, x.reserved = res, true
	if res.Approval != nil {
		x.rc.Approval = res.Approval.ID
	}
	x.rc.Decision, x.rc.Reason = crossing.Allow, "route "+x.route.Name
	if x.plan.cap > 0 {
		x.rc.Reason += "; output cap set by cordon: " + strconv.FormatInt(x.plan.cap, 10)
	}
	if x.plan.usage {
		x.rc.Reason += "; stream usage requested by cordon"
	}
	return true
}

// reservation is the budget held for a call until it settles: the output
// reserved is the cap the provider enforces (the agent's, or the one the
// broker set), times the choices.
func (b *Broker) reservation(x *exchange) crossing.Amount {
	n := x.bodyLen
	out := max(x.info.maxOut, x.plan.cap)
	if out <= 0 {
		out = b.lim.DefaultMaxOutputTokens
	}
	if x.ep.count {
		out = 0
	}
	return crossing.Amount{Requests: 1, InputTokens: (n + 3) / 4, OutputTokens: out * x.info.choices, Bytes: n}
}

// exceeded names the limits a reservation would pass, for the agent's
// message (built from numbers, never from the authority's error text).
func exceeded(st crossing.BudgetState, want crossing.Amount, streams int64) string {
	var names []string
	over := func(name string, used, w, limit int64) {
		if limit > 0 && used+w > limit {
			names = append(names, name)
		}
	}
	u, l := st.Used, st.Limits
	over("requests", u.Requests, want.Requests, l.Requests)
	over("input tokens", u.InputTokens, want.InputTokens, l.InputTokens)
	over("output tokens", u.OutputTokens, want.OutputTokens, l.OutputTokens)
	over("bytes", u.Bytes, want.Bytes, l.Bytes)
	if len(names) == 0 {
		if streams > 0 {
			return "concurrent streams"
		}
		return "limit reached"
	}
	return strings.Join(names, ", ")
}

// deny answers a refusal and records it.
func (b *Broker) deny(ctx context.Context, w http.ResponseWriter, x *exchange, ref *refusal) {
	x.rc.Decision, x.rc.Reason = crossing.Deny, ref.msg
	x.out += int64(writeError(w, x.api, ref.kind, ref.msg))
	x.status = kinds[ref.kind].status
	b.finish(ctx, x)
}

// fail answers an error for an allowed call before any response byte went
// to the agent.
func (b *Broker) fail(w http.ResponseWriter, x *exchange, k kind, msg string) {
	x.out += int64(writeError(w, x.api, k, msg))
	x.status = kinds[k].status
}

// errEvidence is the agent's message when a call's receipt could not be
// recorded: the answer the upstream gave is withheld (design decision 12:
// an unavailable evidence log denies the crossing).
const errEvidence = "evidence log unavailable: the receipt of this call could not be recorded, so its answer is withheld"

// commit settles the reservation and records the receipt of a call whose
// answer is ready but not yet sent: pending is the bytes still to go to the
// agent (counted in the receipt). It runs once; finish does not record
// again. A non-nil error means nothing may be sent: the caller answers
// errEvidence instead. The reservation is charged either way.
func (b *Broker) commit(reqCtx context.Context, x *exchange, pending int) error {
	if x.rc.FirstByte == 0 && pending > 0 {
		// The answer leaves as soon as the receipt commits.
		x.rc.FirstByte = b.now().Sub(x.start)
	}
	x.recErr = b.settleRecord(reqCtx, x, int64(pending))
	x.committed = true
	return x.recErr
}

// finish settles the reservation and records the receipt unless commit
// did, and logs the decision. It runs after the agent has its answer: on
// the paths that reach it without commit the agent got a refusal or an
// error, never an upstream's answer.
func (b *Broker) finish(ctx context.Context, x *exchange) {
	if x.streamSlot {
		b.streams.Add(-1)
		x.streamSlot = false
	}
	err := x.recErr
	if !x.committed {
		err = b.settleRecord(ctx, x, 0)
	}
	lvl := slog.LevelInfo
	if err != nil {
		lvl = slog.LevelError
	}
	rule := ""
	if x.route != nil {
		rule = x.route.Name
	}
	if !b.log.Enabled(ctx, lvl) {
		return
	}
	attrs := []slog.Attr{
		slog.String("workload", x.rc.Identity.Workload),
		slog.String("broker", "model"),
		slog.String("decision", x.rc.Decision),
		slog.String("reason", x.rc.Reason),
		slog.String("rule", rule),
		slog.String("receipt", x.rc.RequestDigest),
		slog.String("action", x.rc.Action),
		slog.String("model", x.rc.Target),
		slog.Int("upstream_status", x.rc.UpstreamCode),
		slog.Duration("duration", x.rc.Duration),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", "record receipt: "+err.Error()))
		if x.withheld {
			attrs = append(attrs, slog.Bool("answer_withheld", true))
		}
	}
	b.log.LogAttrs(ctx, lvl, "model crossing", attrs...)
}

// settleRecord completes the receipt (pending: bytes not yet sent that it
// counts), settles the reservation and records the receipt. When the
// receipt cannot be recorded the reservation is still settled at the
// call's usage (the upstream did the work); if even that fails it stays
// held, and the store charges it whole when the sandbox's reservations
// are released — never returned as unused.
func (b *Broker) settleRecord(reqCtx context.Context, x *exchange, pending int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(reqCtx), authorityTimeout)
	defer cancel()
	if x.reserved {
		x.rc.Usage = b.used(x)
		if x.rc.Usage.OutputTokens > x.want.OutputTokens {
			// The provider generated more than the cap it was sent:
			// the real usage is settled, and the operator told.
			b.log.LogAttrs(ctx, slog.LevelWarn, "model usage above the reservation",
				slog.String("workload", x.rc.Identity.Workload), slog.String("action", x.rc.Action),
				slog.String("model", x.rc.Target), slog.Int64("reserved_output_tokens", x.want.OutputTokens),
				slog.Int64("reported_output_tokens", x.rc.Usage.OutputTokens))
		}
	}
	if x.outcome != "" && x.rc.Decision == crossing.Allow {
		x.rc.Reason += "; " + x.outcome
	}
	x.rc.Time = x.start
	x.rc.Broker = Name
	x.rc.BytesIn = x.bodyLen
	x.rc.BytesOut = x.out + pending
	x.rc.Untrusted = x.untrusted
	x.rc.Duration = b.now().Sub(x.start)
	if x.rc.Decision == "" {
		x.rc.Decision = crossing.Deny
	}
	settled := !x.reserved
	var err error
	if sr, ok := b.authority.(crossing.SettleRecorder); ok && x.reserved {
		// One round trip and one commit: settle and record together.
		var st crossing.BudgetState
		if st, err = sr.SettleRecord(ctx, x.res, x.rc.Usage, x.rc); err == nil {
			x.rc.Budget = st
			return nil
		}
	} else {
		if x.reserved {
			st, serr := b.authority.Settle(ctx, x.res, x.rc.Usage)
			if serr != nil {
				b.log.LogAttrs(ctx, slog.LevelError, "model budget settle failed",
					slog.String("workload", x.rc.Identity.Workload), slog.Int64("reservation", x.res.ID), slog.String("error", serr.Error()))
			} else {
				x.rc.Budget = st
			}
			settled = true
		}
		if err = b.authority.Record(ctx, x.rc); err == nil {
			return nil
		}
	}
	if !settled {
		// The settlement went down with the receipt's transaction:
		// charge the usage alone. A reservation already settled (the
		// reply was lost after the commit) is not found and not
		// charged twice.
		if _, serr := b.authority.Settle(ctx, x.res, x.rc.Usage); serr != nil {
			b.log.LogAttrs(ctx, slog.LevelError, "model budget settle failed",
				slog.String("workload", x.rc.Identity.Workload), slog.Int64("reservation", x.res.ID), slog.String("error", serr.Error()))
		}
	}
	return err
}

// used is what a call settles: real usage where the provider reported it,
// the reserved estimate where it did not (never less than could have been
// spent), nothing for tokens when the provider generated nothing.
func (b *Broker) used(x *exchange) crossing.Amount {
	a := crossing.Amount{Requests: 1, Bytes: x.bodyLen + x.upBytes}
	switch x.charge {
	case chargeNone:
		return a
	case chargeUnknown:
		a.InputTokens, a.OutputTokens = x.want.InputTokens, x.want.OutputTokens
		return a
	}
	a.InputTokens, a.OutputTokens = x.want.InputTokens, x.want.OutputTokens
	if x.usage.inKnown {
		a.InputTokens = min(x.usage.in, maxSettle)
	}
	if x.usage.outKnown {
		a.OutputTokens = min(x.usage.out, maxSettle)
	}
	return a
}
