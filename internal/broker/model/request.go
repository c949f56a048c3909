package model

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/custody"
)

// charge says how a call's tokens settle.
type charge uint8

const (
	chargeUsage   charge = iota // reported usage, the estimate for what was not reported
	chargeNone                  // nothing generated (never sent, a provider error, count_tokens)
	chargeUnknown               // the outcome is unknown: settle the whole estimate
)

// usage is what the provider reported.
type usage struct {
	in, out           int64
	inKnown, outKnown bool
}

// exchange is the state of one call; pooled, with its buffers.
type exchange struct {
	ep         *endpoint
	api        api
	start      time.Time
	cancel     context.CancelFunc
	rc         crossing.Receipt
	body       *bodyBuf
	bodyLen    int64
	info       reqInfo
	plan       capPlan // what the broker adds to the body
	route      *route
	want       crossing.Amount
	res        crossing.Reservation
	reserved   bool
	streamSlot bool
	charge     charge
	usage      usage
	untrusted  []string
	done       bool  // the stream's final event was seen
	committed  bool  // settled and recorded (commit), before the answer was sent
	recErr     error // commit's error: the answer was withheld
	withheld   bool  // the upstream's answer was withheld: no receipt
	// Gemini: the candidates that finished (by index, maxChoices of
	// them), how many, and whether the output usage is final.
	gDone     [2]uint64
	gFinished int64
	gFinal    bool
	deadline  bool // a write deadline was set on the agent's connection
	upBytes   int64
	out       int64
	status    int
	outcome   string
	m         *custody.Redactor

	// Response buffers, kept across calls.
	read   []byte
	write  []byte
	held   []byte // a stream's terminal event(s), sent once the receipt commits
	parser sseParser
	red    custody.Stream
}

// maxPooled is the largest buffer kept for reuse.
const maxPooled = 1 << 20

func (b *Broker) release(x *exchange) {
	if x.body != nil {
		x.body.release()
	}
	read, write, held, parser, red := x.read, x.write[:0], x.held[:0], x.parser, x.red
	if cap(write) > maxPooled {
		write = nil
	}
	if cap(held) > maxPooled {
		held = nil
	}
	if cap(read) > maxPooled {
		read = nil
	}
	parser.reset()
	red.Reset(nil)
	red.Trim(maxPooled)
	*x = exchange{read: read, write: write, held: held, parser: parser, red: red}
	b.pool.Put(x)
}

// bodyBuf holds a request body. The handler and the transport each hold a
// reference (the transport may close the body after RoundTrip returns); the
// buffer goes back to the pool when both are done. Read serves segs: the
// body, or the body cut around the broker's edits.
type bodyBuf struct {
	b      []byte
	segs   [][]byte
	arr    [2*len(capPlan{}.edits) + 1][]byte // backing array of segs
	refs   atomic.Int32
	closed atomic.Bool
}

var bodyPool = sync.Pool{New: func() any { return &bodyBuf{b: make([]byte, 0, 16<<10)} }}

func (bb *bodyBuf) Read(p []byte) (int, error) {
	for len(bb.segs) > 0 && len(bb.segs[0]) == 0 {
		bb.segs = bb.segs[1:]
	}
	if len(bb.segs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, bb.segs[0])
	bb.segs[0] = bb.segs[0][n:]
	return n, nil
}

func (bb *bodyBuf) Close() error {
	if bb.closed.CompareAndSwap(false, true) {
		bb.release()
	}
	return nil
}

func (bb *bodyBuf) release() {
	if bb.refs.Add(-1) == 0 && cap(bb.b) <= maxPooled {
		bb.b = bb.b[:0]
		bb.segs, bb.arr = nil, [len(bb.arr)][]byte{}
		bodyPool.Put(bb)
	}
}

// readBody reads the request body within MaxRequestBytes.
func (b *Broker) readBody(r *http.Request, x *exchange) *refusal {
	max := b.lim.MaxRequestBytes
	tooLarge := func() *refusal { return refuse(kindTooLarge, fmt.Sprintf("request body exceeds %d bytes", max)) }
	if r.ContentLength > max {
		return tooLarge()
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return refuse(kindInvalid, "compressed request bodies are not accepted")
	}
	bb := bodyPool.Get().(*bodyBuf)
	bb.refs.Store(1)
	bb.closed.Store(false)
	x.body = bb
	buf := bb.b[:0]
	if r.ContentLength > int64(cap(buf)) {
		buf = make([]byte, 0, r.ContentLength+1)
	}
	if r.Body == nil {
		return refuse(kindInvalid, "request body is empty")
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		bb.b = buf
		if int64(len(buf)) > max {
			return tooLarge()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return refuse(kindInvalid, "the request body could not be read")
		}
	}
	x.bodyLen = int64(len(buf))
	return nil
}

// Request headers forwarded to the provider. Everything else the agent
// sends is dropped: credentials (Authorization, x-api-key, x-goog-api-key,
// Proxy-Authorization, Cookie), hop-by-hop headers, organisation or project
// selectors, Accept-Encoding (bodies stay identity for redaction), and
// Content-Type: the body forwarded is the JSON the guard read, and the
// broker says so itself (see upstreamRequest).
var forwardRequest = map[string]bool{
	"Accept":            true,
	"Anthropic-Version": true,
	"Anthropic-Beta":    true,
	"Openai-Beta":       true,
	"User-Agent":        true,
}

func forwardedRequestHeader(k string) bool {
	return forwardRequest[k] || strings.HasPrefix(k, "X-Stainless-")
}

// checkHeaders refuses a forwarded header whose value could split a header
// line (CR, LF, NUL, other control bytes): none of it may reach the
// provider, so the request is refused rather than repaired.
func checkHeaders(h http.Header) *refusal {
	for k, vs := range h {
		if !forwardedRequestHeader(k) {
			continue
		}
		for _, v := range vs {
			if !validHeaderValue([]byte(v)) {
				return refuse(kindInvalid, "header "+quoteForMessage([]byte(k))+" holds a control character")
			}
		}
	}
	return nil
}

func validHeaderValue[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Query parameters forwarded (Claude Code sends /v1/messages?beta=true).
var forwardQuery = map[string]bool{"beta": true}

// upstreamRequest builds the provider request: the validated body as is
// (with the output cap the broker set, if any), the allowed headers, and the route's credential for the route's upstream
// only.
func (b *Broker) upstreamRequest(ctx context.Context, r *http.Request, x *exchange, secret []byte) (*http.Request, error) {
	target := x.route.urls[x.ep.idx]
	if x.ep.api == apiGemini {
		// The model was checked to be one plain segment (geminiModel);
		// the agent's query, with its "key", is dropped.
		target = x.route.base + geminiPrefix + string(x.info.model) + ":" + x.ep.method
		if x.ep.stream {
			target += "?alt=sse"
		}
	} else if r.URL.RawQuery != "" {
		q := url.Values{}
		for k, v := range r.URL.Query() {
			if forwardQuery[k] {
				q[k] = v
			}
		}
		if len(q) > 0 {
			target += "?" + q.Encode()
		}
	}
	x.body.refs.Add(1)
	x.body.segs = x.plan.segments(x.body.b, x.body.arr[:0])
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, x.body)
	if err != nil {
		x.body.Close()
		return nil, err
	}
	req.ContentLength = x.bodyLen + int64(x.plan.grow())
	h := req.Header
	for k, vs := range r.Header {
		if forwardedRequestHeader(k) {
			h[k] = vs
		}
	}
	// The agent's Content-Type is never forwarded: a provider that also
	// reads other encodings (Google's front end takes binary protobuf,
	// application/x-protobuf) would read the very bytes the guard checked
	// as JSON as another request — one naming what the guard refuses.
	h["Content-Type"] = jsonContentType
	// Bodies must arrive as identity so the response guard and the
	// redactor see the bytes the agent gets; a response in any other
	// encoding is refused (see contentEncoded).
	h["Accept-Encoding"] = identityEncoding
	switch x.route.api {
	case apiAnthropic:
		h["X-Api-Key"] = x.route.credential(secret)
		if h.Get("Anthropic-Version") == "" {
			h["Anthropic-Version"] = defaultVersionHeader
		}
	case apiOpenAI:
		h["Authorization"] = x.route.credential(secret)
	case apiGemini:
		h["X-Goog-Api-Key"] = x.route.credential(secret)
	}
	return req, nil
}

var (
	defaultVersionHeader = []string{defaultAnthropicVersion}
	identityEncoding     = []string{"identity"}
	jsonContentType      = []string{"application/json"}
)

// contentEncoded reports whether a response body is in an encoding other
// than identity. The broker asks for identity and its transport does not
// decompress (it never adds Accept-Encoding itself, and Go decompresses
// only what it asked for): a compressed body would carry bytes the
// redactor cannot read past the guard, so it is refused, never relayed.
// Transfer codings other than chunked are refused by net/http itself.
func contentEncoded(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return true
			}
		}
	}
	return false
}

// credHeader is a route's credential header value, kept while the
// custodian returns the same secret. Header value slices are shared
// read-only between requests.
type credHeader struct {
	secret []byte
	value  []string
}

// credential returns the header value carrying secret for this route's API.
func (rt *route) credential(secret []byte) []string {
	if c := rt.cred.Load(); c != nil && bytes.Equal(c.secret, secret) {
		return c.value
	}
	v := string(secret)
	if rt.api == apiOpenAI {
		v = "Bearer " + v
	}
	c := &credHeader{secret: bytes.Clone(secret), value: []string{v}}
	rt.cred.Store(c)
	return c.value
}

// Response headers passed to the agent; all others (cookies, organisation
// ids, hop-by-hop, lengths the redactor may change) are dropped.
var forwardResponse = map[string]bool{
	"Content-Type":   true,
	"Request-Id":     true,
	"X-Request-Id":   true,
	"Retry-After":    true,
	"Openai-Version": true,
}

func forwardedResponseHeader(k string) bool {
	return forwardResponse[k] || strings.HasPrefix(k, "Anthropic-Ratelimit-") || strings.HasPrefix(k, "X-Ratelimit-")
}

// copyResponseHeaders copies the allowed headers, dropping a header whose
// name holds a secret and any value that holds one, in any letter case:
// the allowlist admits whole families of names by prefix, so a name is
// upstream-chosen text too.
func copyResponseHeaders(dst, src http.Header, m *custody.Redactor) {
	for k, vs := range src {
		if !forwardedResponseHeader(k) || m.ContainsFold([]byte(k)) {
			continue
		}
		clean := true
		for _, v := range vs {
			clean = clean && !m.ContainsFold([]byte(v))
		}
		if clean {
			dst[k] = vs // the upstream response is ours alone: no copy
			continue
		}
		for _, v := range vs {
			if !m.ContainsFold([]byte(v)) {
				dst[k] = append(dst[k], v)
			}
		}
	}
	dst["X-Cordon-Broker"] = brokerHeader
}

// brokerHeader marks every answer as the broker's; shared, never modified.
var brokerHeader = []string{"model"}

func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	var out [len("sha256:") + 2*sha256.Size]byte
	copy(out[:], "sha256:")
	hex.Encode(out[len("sha256:"):], sum[:])
	return string(out[:])
}

func utf8ValidCapped(b []byte) bool { return len(b) <= maxModelLen && utf8.Valid(b) }
