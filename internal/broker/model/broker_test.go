package model

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/google/go-cmp/cmp"
)

// fakeAuthority enforces limits in memory, atomically under one lock.
type fakeAuthority struct {
	mu         sync.Mutex
	limits     crossing.Amount
	maxStreams int64
	used       crossing.Amount
	streams    int64
	nextID     int64
	held       map[int64]crossing.Amount
	reserved   []crossing.Amount
	settled    []crossing.Amount
	receipts   []crossing.Receipt
	reserveErr error
	recordErr  error
}

func newFakeAuthority() *fakeAuthority { return &fakeAuthority{held: map[int64]crossing.Amount{}} }

func (l *fakeAuthority) state() crossing.BudgetState {
	return crossing.BudgetState{Used: l.used, Limits: l.limits, Streams: l.streams}
}

func (l *fakeAuthority) Reserve(ctx context.Context, id crossing.Identity, broker string, want crossing.Amount, streams int64) (crossing.Reservation, crossing.BudgetState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserveErr != nil {
		return crossing.Reservation{}, crossing.BudgetState{}, l.reserveErr
	}
	next := l.used.Add(want)
	over := func(u, lim int64) bool { return lim > 0 && u > lim }
	if over(next.Requests, l.limits.Requests) || over(next.InputTokens, l.limits.InputTokens) ||
		over(next.OutputTokens, l.limits.OutputTokens) || over(next.Bytes, l.limits.Bytes) ||
		over(l.streams+streams, l.maxStreams) {
		return crossing.Reservation{}, l.state(), fmt.Errorf("model: %w", crossing.ErrBudgetExceeded)
	}
	l.used, l.streams = next, l.streams+streams
	l.reserved = append(l.reserved, want)
	l.nextID++
	l.held[l.nextID] = want
	if streams > 0 {
		l.held[-l.nextID] = crossing.Amount{Requests: streams}
	}
	return crossing.Reservation{ID: l.nextID, Identity: id, Broker: broker, Held: want}, l.state(), nil
}

func (l *fakeAuthority) Settle(ctx context.Context, r crossing.Reservation, used crossing.Amount) (crossing.BudgetState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held, ok := l.held[r.ID]
	if !ok {
		return l.state(), errors.New("settled twice")
	}
	delete(l.held, r.ID)
	if s, ok := l.held[-r.ID]; ok {
		l.streams -= s.Requests
		delete(l.held, -r.ID)
	}
	neg := crossing.Amount{Requests: -held.Requests, InputTokens: -held.InputTokens, OutputTokens: -held.OutputTokens, Bytes: -held.Bytes}
	l.used = l.used.Add(neg).Add(used)
	l.settled = append(l.settled, used)
	return l.state(), nil
}

func (l *fakeAuthority) Record(ctx context.Context, rc crossing.Receipt) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.receipts = append(l.receipts, rc)
	return l.recordErr
}

func (l *fakeAuthority) lastReceipt(t *testing.T) crossing.Receipt {
	t.Helper()
	// The handler records after the response is complete; wait for it.
	for range 200 {
		l.mu.Lock()
		n := len(l.receipts)
		l.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.receipts) == 0 {
		t.Fatal("no receipt recorded")
	}
	return l.receipts[len(l.receipts)-1]
}

func (l *fakeAuthority) openReservations() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id := range l.held {
		if id > 0 {
			n++
		}
	}
	return n
}

type fakeSecrets map[string]string

func (s fakeSecrets) Secret(name string) ([]byte, error) {
	v, ok := s[name]
	if !ok {
		return nil, errors.New("no such secret")
	}
	return []byte(v), nil
}

func (s fakeSecrets) Values() [][]byte {
	var out [][]byte
	for _, v := range s {
		out = append(out, []byte(v))
	}
	return out
}

const (
	anthropicKey = "sk-ant-api03-REALSECRETanthropic0123456789"
	openaiKey    = "sk-proj-REALSECRETopenai0123456789abcdef"
	geminiKey    = "AIzaSyREALSECRETgemini0123456789abcdefgh"
	agentKey     = "sk-ant-placeholder-agent"
)

var testID = crossing.Identity{Workload: "wl", Tenant: "t", Purpose: "p", SandboxID: "sb1"}

// upstreamLog is what a fake provider saw.
type upstreamLog struct {
	mu       sync.Mutex
	requests []*http.Request
	bodies   [][]byte
}

func (u *upstreamLog) add(r *http.Request, body []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.requests = append(u.requests, r)
	u.bodies = append(u.bodies, body)
}

func (u *upstreamLog) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.requests)
}

// fakeProvider is an httptest upstream that checks credentials as the real
// provider would, then answers with fn. Tests that need exact reply bytes,
// whole recorded requests (every header, the body) or a reply shaped to
// the case use it; tests that only count or check the key use
// testkit.NewModelUpstream.
func fakeProvider(t *testing.T, fn func(w http.ResponseWriter, r *http.Request, body []byte)) (*httptest.Server, *upstreamLog) {
	t.Helper()
	log := &upstreamLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		log.add(r.Clone(context.Background()), body)
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1beta/"):
			if r.Header.Get("X-Goog-Api-Key") != geminiKey || r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" || r.URL.Query().Has("key") {
				w.WriteHeader(403)
				io.WriteString(w, `{"error":{"code":403,"message":"API key not valid","status":"PERMISSION_DENIED"}}`)
				return
			}
		case strings.HasPrefix(r.URL.Path, "/v1/messages"):
			if r.Header.Get("X-Api-Key") != anthropicKey || r.Header.Get("Authorization") != "" {
				w.WriteHeader(401)
				io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
				return
			}
		default:
			if r.Header.Get("Authorization") != "Bearer "+openaiKey || r.Header.Get("X-Api-Key") != "" {
				w.WriteHeader(401)
				io.WriteString(w, `{"error":{"message":"bad key","type":"invalid_request_error"}}`)
				return
			}
		}
		fn(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return srv, log
}

type setup struct {
	broker    *Broker
	authority *fakeAuthority
	srv       *httptest.Server // the broker behind an identity-binding listener
}

func testLimits() Limits {
	return Limits{
		MaxRequestBytes: 1 << 20, MaxResponseBytes: 4 << 20,
		MaxAttachments: 2, MaxAttachmentBytes: 1 << 10, AllowedMIME: []string{"image/png", "image/jpeg", "application/pdf"},
		MaxConcurrentStreams: 16,
	}
}

func newSetup(t *testing.T, upstream string, mod func(*Options)) *setup {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	led := newFakeAuthority()
	o := Options{
		Routes: []Route{
			{Name: "claude", API: APIAnthropic, Upstream: u, Credential: "anthropic", Models: []string{"claude-*"}},
			{Name: "gpt", API: APIOpenAI, Upstream: u, Credential: "openai", Models: []string{"gpt-*", "o3*"}},
			{Name: "gemini", API: APIGemini, Upstream: u, Credential: "gemini", Models: []string{"gemini-2.5-*"}},
		},
		Limits:    testLimits(),
		Authority: led,
		Secrets:   fakeSecrets{"anthropic": anthropicKey, "openai": openaiKey, "gemini": geminiKey},
	}
	if mod != nil {
		mod(&o)
	}
	b, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &setup{broker: b, authority: led, srv: testkit.ServeAs(t, b, testID)}
}

// post sends body to the broker as an agent would, with its placeholder
// credentials.
func (s *setup) post(t *testing.T, p, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+p, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", agentKey)
	req.Header.Set("Authorization", "Bearer agent-token")
	req.Header.Set("Cookie", "session=agent")
	req.Header.Set("Proxy-Authorization", "Basic YWdlbnQ6eA==")
	req.Header.Set("Openai-Organization", "org-agent")
	req.Header.Set("X-Stainless-Lang", "js")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", p, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return resp, out
}

const anthropicReply = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",` +
	`"content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}],` +
	`"stop_reason":"tool_use","usage":{"input_tokens":21,"cache_read_input_tokens":4,"output_tokens":37}}`

func TestAnthropicNonStreaming(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_1")
		w.Header().Set("Set-Cookie", "provider=1")
		w.Header().Set("Anthropic-Organization-Id", "org-secret-ish")
		io.WriteString(w, anthropicReply)
	})
	s := newSetup(t, up.URL, nil)
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"weather?"}]}`
	resp, out := s.post(t, "/v1/messages?beta=true&evil=1", body)
	if resp.StatusCode != 200 || string(out) != anthropicReply {
		t.Fatalf("status %d body %s, want 200 and the provider's reply", resp.StatusCode, out)
	}
	if resp.Header.Get("Request-Id") != "req_1" || resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Anthropic-Organization-Id") != "" {
		t.Errorf("response headers not filtered: %v", resp.Header)
	}
	if seen.count() != 1 {
		t.Fatalf("upstream saw %d requests, want 1", seen.count())
	}
	r := seen.requests[0]
	for _, h := range []string{"Authorization", "Cookie", "Proxy-Authorization", "Openai-Organization"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("upstream got agent header %s: %q", h, v)
		}
	}
	if got := r.Header.Get("X-Api-Key"); got != anthropicKey {
		t.Errorf("upstream x-api-key = %q, want the custodied key", got)
	}
	if got := r.Header.Get("Anthropic-Version"); got != defaultAnthropicVersion {
		t.Errorf("anthropic-version = %q, want default %q", got, defaultAnthropicVersion)
	}
	if r.Header.Get("X-Stainless-Lang") != "js" || r.Header.Get("Accept-Encoding") != "identity" {
		t.Errorf("allowlisted headers wrong: %v", r.Header)
	}
	if r.URL.RawQuery != "beta=true" {
		t.Errorf("query = %q, want beta=true only", r.URL.RawQuery)
	}
	if string(seen.bodies[0]) != body {
		t.Errorf("upstream body = %s, want the agent's bytes unchanged", seen.bodies[0])
	}
	requireSettled(t, s, crossing.Receipt{
		Identity: testID, Broker: "model", Action: "anthropic.messages", Target: "claude-sonnet-4-5",
		RequestDigest: digest([]byte(body)), Decision: crossing.Allow, Reason: "route claude",
		UpstreamCode: 200, BytesIn: int64(len(body)), BytesOut: int64(len(anthropicReply)),
		Usage:     crossing.Amount{Requests: 1, InputTokens: 25, OutputTokens: 37, Bytes: int64(len(body) + len(anthropicReply))},
		Untrusted: []string{"tool_use:get_weather"},
	})
}

// requireSettled checks the call's receipt is want and that nothing it
// reserved is left open.
func requireSettled(t *testing.T, s *setup, want crossing.Receipt) {
	t.Helper()
	if diff := cmp.Diff(want, s.authority.lastReceipt(t), cmpReceipt); diff != "" {
		t.Errorf("receipt (-want +got):\n%s", diff)
	}
	if n := s.authority.openReservations(); n != 0 {
		t.Errorf("%d reservations left open", n)
	}
}

// cmpReceipt ignores what varies between runs.
var cmpReceipt = cmp.FilterPath(func(p cmp.Path) bool {
	switch p.Last().String() {
	case ".Time", ".Duration", ".FirstByte", ".Budget", ".ID":
		return true
	}
	return false
}, cmp.Ignore())

// anthropicStream is the real event sequence of a streamed message with a
// text block and a tool_use block.
var anthropicStream = []string{
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":8,\"output_tokens\":2}}}\n\n",
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
	"event: ping\ndata: {\"type\": \"ping\"}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Okay, checking\"}}\n\n",
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}\n\n",
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\n",
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
}

// streamEvents writes events with a flush after each.
func streamEvents(w http.ResponseWriter, events []string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	for _, e := range events {
		io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

func TestAnthropicStreaming(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		streamEvents(w, anthropicStream)
	})
	s := newSetup(t, up.URL, nil)
	body := `{"model":"claude-sonnet-4-5","max_tokens":2048,"stream":true,"messages":[{"role":"user","content":"weather?"}]}`
	resp, out := s.post(t, "/v1/messages", body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if want := strings.Join(anthropicStream, ""); string(out) != want {
		t.Errorf("stream = %q\nwant %q", out, want)
	}
	if seen.count() != 1 {
		t.Fatalf("upstream saw %d requests", seen.count())
	}
	rc := s.authority.lastReceipt(t)
	wantUsage := crossing.Amount{Requests: 1, InputTokens: 480, OutputTokens: 89, Bytes: rc.BytesIn + int64(len(out))}
	if diff := cmp.Diff(wantUsage, rc.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"tool_use:get_weather"}, rc.Untrusted); diff != "" {
		t.Errorf("untrusted (-want +got):\n%s", diff)
	}
	if rc.Decision != crossing.Allow || rc.Reason != "route claude" || rc.FirstByte <= 0 {
		t.Errorf("receipt decision %q reason %q first byte %v", rc.Decision, rc.Reason, rc.FirstByte)
	}
	if n := s.authority.openReservations(); n != 0 || s.authority.streams != 0 {
		t.Errorf("open reservations %d, streams %d after the stream", n, s.authority.streams)
	}
}

func TestOpenAI(t *testing.T) {
	chatReply := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"run_shell","arguments":"{\"cmd\":\"ls\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":12,"total_tokens":62}}`
	chatStream := []string{
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":9,\"total_tokens\":49}}\n\n",
		"data: [DONE]\n\n",
	}
	respReply := `{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"apply_patch","arguments":"{}"}],"usage":{"input_tokens":300,"output_tokens":70,"total_tokens":370}}`
	respStream := []string{
		"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n",
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"shell\",\"arguments\":\"\"}}\n\n",
		"event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":2,\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\"{}\"}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[{\"type\":\"function_call\",\"name\":\"shell\"}],\"usage\":{\"input_tokens\":120,\"output_tokens\":33,\"total_tokens\":153}}}\n\n",
	}
	tests := []struct {
		name, path, body string
		reply            any // string: JSON; []string: SSE events
		in, out          int64
		untrusted        []string
		action           string
	}{
		{"chat", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, chatReply, 50, 12, []string{"tool_use:run_shell"}, "openai.chat"},
		{"chat stream", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, chatStream, 40, 9, []string{"tool_use:read_file"}, "openai.chat"},
		{"responses", "/v1/responses", `{"model":"gpt-5","input":"hi","max_output_tokens":500}`, respReply, 300, 70, []string{"tool_use:apply_patch"}, "openai.responses"},
		{"responses stream", "/v1/responses", `{"model":"gpt-5","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true}`, respStream, 120, 33, []string{"tool_use:shell"}, "openai.responses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				switch reply := tt.reply.(type) {
				case string:
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, reply)
				case []string:
					streamEvents(w, reply)
				}
			})
			s := newSetup(t, up.URL, nil)
			resp, out := s.post(t, tt.path, tt.body)
			want := tt.reply
			if evs, ok := want.([]string); ok {
				want = strings.Join(evs, "")
			}
			if resp.StatusCode != 200 || string(out) != want {
				t.Fatalf("status %d body %s", resp.StatusCode, out)
			}
			r := seen.requests[0]
			if r.Header.Get("Authorization") != "Bearer "+openaiKey || r.Header.Get("X-Api-Key") != "" {
				t.Errorf("upstream credentials: %v", r.Header)
			}
			rc := s.authority.lastReceipt(t)
			if rc.Usage.InputTokens != tt.in || rc.Usage.OutputTokens != tt.out || rc.Action != tt.action {
				t.Errorf("receipt action %s usage %+v, want %s in %d out %d", rc.Action, rc.Usage, tt.action, tt.in, tt.out)
			}
			if diff := cmp.Diff(tt.untrusted, rc.Untrusted); diff != "" {
				t.Errorf("untrusted (-want +got):\n%s", diff)
			}
		})
	}
}

// apiError is either provider's error body.
type apiError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string  `json:"type"`
		Message string  `json:"message"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, b []byte) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", b, err)
	}
	return e
}

func TestRefusals(t *testing.T) {
	png := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`
	big := strings.Repeat("A", 2000)
	tests := []struct {
		name, path, body string
		status           int
		errType          string // Anthropic error.type, or OpenAI error.type
	}{
		{"model not allowed", "/v1/messages", `{"model":"gpt-4o","max_tokens":1,"messages":[]}`, 403, "permission_error"},
		{"openai model not allowed", "/v1/chat/completions", `{"model":"claude-opus-4","messages":[]}`, 403, "permission_error"},
		{"malformed JSON", "/v1/messages", `{"model":"claude-x",`, 400, "invalid_request_error"},
		{"openai malformed JSON", "/v1/chat/completions", `{"model":"gpt-4o"]`, 400, "invalid_request_error"},
		{"not an object", "/v1/messages", `["model"]`, 400, "invalid_request_error"},
		{"no model", "/v1/messages", `{"max_tokens":1}`, 400, "invalid_request_error"},
		{"model not a string", "/v1/messages", `{"model":7}`, 400, "invalid_request_error"},
		{"duplicate model", "/v1/messages", `{"model":"claude-x","model":"claude-opus"}`, 400, "invalid_request_error"},
		{"escaped duplicate model", "/v1/messages", `{"model":"claude-x","mod\u0065l":"gpt-4o"}`, 400, "invalid_request_error"},
		{"trailing data", "/v1/messages", `{"model":"claude-x"} {}`, 400, "invalid_request_error"},
		{"oversized body", "/v1/messages", `{"model":"claude-x","pad":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "request_too_large"},
		{"unknown route", "/v1/messages/batches", `{"model":"claude-x"}`, 404, "not_found_error"},
		{"openai unknown route", "/v1/embeddings", `{"model":"gpt-4o"}`, 404, "invalid_request_error"},
		{"remote image", "/v1/messages", `{"model":"claude-x","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://169.254.169.254/"}}]}]}`, 403, "permission_error"},
		{"file reference", "/v1/messages", `{"model":"claude-x","messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`, 403, "permission_error"},
		{"too many attachments", "/v1/messages", `{"model":"claude-x","messages":[{"role":"user","content":[` + png + `,` + png + `,` + png + `]}]}`, 400, "invalid_request_error"},
		{"attachment too large", "/v1/messages", `{"model":"claude-x","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + big + `"}}]}]}`, 413, "request_too_large"},
		{"media type not allowed", "/v1/messages", `{"model":"claude-x","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/svg+xml","data":"PHN2Zz4="}}]}]}`, 400, "invalid_request_error"},
		{"nested tool_result image", "/v1/messages", `{"model":"claude-x","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lG"}}]}]}]}`, 400, "invalid_request_error"},
		{"openai remote image", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://10.0.0.1/x.png"}}]}]}`, 403, "permission_error"},
		{"openai data url too large", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + big + `"}}]}]}`, 413, "invalid_request_error"},
		{"responses file id", "/v1/responses", `{"model":"gpt-5","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-abc"}]}]}`, 403, "permission_error"},
		{"responses mcp connector", "/v1/responses", `{"model":"gpt-5","input":"x","tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.example/mcp"}]}`, 403, "permission_error"},
		{"anthropic mcp connector", "/v1/messages", `{"model":"claude-x","mcp_servers":[{"type":"url","url":"https://evil.example"}],"messages":[]}`, 403, "permission_error"},
		{"stream not boolean", "/v1/messages", `{"model":"claude-x","stream":"yes"}`, 400, "invalid_request_error"},
		{"max_tokens negative", "/v1/messages", `{"model":"claude-x","max_tokens":-1}`, 400, "invalid_request_error"},
		{"count_tokens stream", "/v1/messages/count_tokens", `{"model":"claude-x","stream":true}`, 400, "invalid_request_error"},
		{"max_tokens zero", "/v1/messages", `{"model":"claude-x","max_tokens":0}`, 400, "invalid_request_error"},
		{"max_tokens absurd", "/v1/messages", `{"model":"claude-x","max_tokens":10000001}`, 400, "invalid_request_error"},
		{"max_completion_tokens negative", "/v1/chat/completions", `{"model":"gpt-4o","max_completion_tokens":-5}`, 400, "invalid_request_error"},
		{"max_completion_tokens absurd", "/v1/chat/completions", `{"model":"gpt-4o","max_completion_tokens":1e8}`, 400, "invalid_request_error"},
		{"max_output_tokens zero", "/v1/responses", `{"model":"gpt-5","max_output_tokens":0}`, 400, "invalid_request_error"},
		{"duplicate stream_options", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{},"stream_options":null}`, 400, "invalid_request_error"},
	}
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		t.Errorf("upstream reached for a refused request: %s", body)
	})
	s := newSetup(t, up.URL, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, out := s.post(t, tt.path, tt.body)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d (%s)", resp.StatusCode, tt.status, out)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type = %q", ct)
			}
			e := decodeError(t, out)
			openai := !strings.HasPrefix(tt.path, "/v1/messages")
			if openai && (e.Type != "" || e.Error.Code == nil) || !openai && e.Type != "error" {
				t.Errorf("error shape wrong for %s: %s", tt.path, out)
			}
			if e.Error.Type != tt.errType || e.Error.Message == "" {
				t.Errorf("error = %s, want type %q", out, tt.errType)
			}
			if bytes.Contains(out, []byte(anthropicKey)) || bytes.Contains(out, []byte("/tmp")) {
				t.Errorf("error leaks: %s", out)
			}
			rc := s.authority.lastReceipt(t)
			if rc.Decision != crossing.Deny || rc.Reason == "" || rc.Identity != testID {
				t.Errorf("receipt = %+v, want a deny", rc)
			}
		})
	}
	if seen.count() != 0 {
		t.Errorf("upstream saw %d requests", seen.count())
	}
	if n := s.authority.openReservations(); n != 0 {
		t.Errorf("%d reservations left open", n)
	}
}

func TestBudgetAndAuthority(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		body    string
		prep    func(*fakeAuthority)
		status  int
		errType string
	}{
		{"anthropic budget exceeded", "/v1/messages", `{"model":"claude-x","max_tokens":100}`,
			func(l *fakeAuthority) { l.limits.OutputTokens = 50 }, 429, "rate_limit_error"},
		{"openai budget exceeded", "/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`,
			func(l *fakeAuthority) { l.limits.Requests = 1; l.used.Requests = 1 }, 429, "insufficient_quota"},
		{"authority unavailable", "/v1/messages", `{"model":"claude-x"}`,
			func(l *fakeAuthority) {
				l.reserveErr = fmt.Errorf("open /var/lib/cordon/store.db: %w", crossing.ErrUnavailable)
			}, 503, "overloaded_error"},
		{"authority failing", "/v1/chat/completions", `{"model":"gpt-4o"}`,
			func(l *fakeAuthority) { l.reserveErr = errors.New("disk I/O error at /var/lib/cordon") }, 503, "server_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := testkit.NewModelUpstream(t, anthropicKey, "x")
			s := newSetup(t, up.URL(), nil)
			tt.prep(s.authority)
			resp, out := s.post(t, tt.path, tt.body)
			e := decodeError(t, out)
			if resp.StatusCode != tt.status || e.Error.Type != tt.errType {
				t.Errorf("got %d %s, want %d %s", resp.StatusCode, out, tt.status, tt.errType)
			}
			if bytes.Contains(out, []byte("/var/lib")) {
				t.Errorf("error leaks a host path: %s", out)
			}
			if n := len(up.Seen()); n != 0 {
				t.Errorf("upstream reached %d times", n)
			}
			if rc := s.authority.lastReceipt(t); rc.Decision != crossing.Deny {
				t.Errorf("receipt decision %q", rc.Decision)
			}
		})
	}
}

func TestMissingIdentity(t *testing.T) {
	up := testkit.NewModelUpstream(t, anthropicKey, "x")
	s := newSetup(t, up.URL(), nil)
	rec := httptest.NewRecorder()
	s.broker.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/messages", strings.NewReader(`{"model":"claude-x"}`)))
	e := decodeError(t, rec.Body.Bytes())
	if rec.Code != 500 || e.Error.Type != "api_error" {
		t.Errorf("got %d %s, want 500 api_error", rec.Code, rec.Body)
	}
	if n := len(up.Seen()); n != 0 {
		t.Errorf("forwarded without identity: upstream saw %d requests", n)
	}
}

func TestConcurrentReservationsCannotOverspend(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		time.Sleep(2 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, anthropicReply)
	})
	s := newSetup(t, up.URL, nil)
	s.authority.limits.Requests = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 64 {
		wg.Go(func() {
			resp, _ := s.post(t, "/v1/messages", `{"model":"claude-x","max_tokens":10}`)
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if seen.count() != 10 || codes[200] != 10 || codes[429] != 54 {
		t.Errorf("upstream saw %d, statuses %v; want exactly 10 through and 54 refused", seen.count(), codes)
	}
}

func TestRouteSelectionByModel(t *testing.T) {
	upA := testkit.NewModelUpstream(t, anthropicKey, "from A")
	upB := testkit.NewModelUpstream(t, "local-secret-value", "from B")
	ub, _ := url.Parse(upB.URL())
	s := newSetup(t, upA.URL(), func(o *Options) {
		o.Routes = append([]Route{{Name: "local", API: APIAnthropic, Upstream: ub, Credential: "local", Models: []string{"claude-haiku-*"}}}, o.Routes...)
		o.Secrets = fakeSecrets{"anthropic": anthropicKey, "openai": openaiKey, "local": "local-secret-value"}
	})
	if resp, out := s.post(t, "/v1/messages", `{"model":"claude-haiku-4-5"}`); resp.StatusCode != 200 || !strings.Contains(string(out), "from B") {
		t.Errorf("haiku = %d %s, want route local's answer", resp.StatusCode, out)
	}
	if b, a := upB.Seen(), upA.Seen(); len(b) != 1 || b[0].APIKey != "local-secret-value" || len(a) != 0 {
		t.Errorf("haiku: B saw %+v, A saw %d; want one request to B with the local key", b, len(a))
	}
	if resp, out := s.post(t, "/v1/messages", `{"model":"claude-opus-4"}`); resp.StatusCode != 200 || !strings.Contains(string(out), "from A") {
		t.Errorf("opus = %d %s, want route claude's answer", resp.StatusCode, out)
	}
	if a := upA.Seen(); len(a) != 1 || a[0].APIKey != anthropicKey || len(upB.Seen()) != 1 {
		t.Errorf("opus: A saw %+v, want one request with the claude key and B nothing more", a)
	}
}

func TestHeaderInjection(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, anthropicReply)
	})
	s := newSetup(t, up.URL, nil)
	ctx := crossing.WithIdentity(context.Background(), testID)
	for _, tt := range []struct {
		header, value string
		status        int
	}{
		{"Anthropic-Beta", "tools-2024\r\nX-Api-Key: " + agentKey, 400},
		{"User-Agent", "x\nAuthorization: Bearer evil", 400},
		{"X-Stainless-Os", "Linux\x00", 400},
		{"X-Other", "a\r\nX-Api-Key: evil", 200}, // not forwarded at all
	} {
		req := httptest.NewRequest("POST", "/v1/messages", strings.NewReader(`{"model":"claude-x"}`)).WithContext(ctx)
		req.Header[tt.header] = []string{tt.value}
		rec := httptest.NewRecorder()
		s.broker.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s: %q: status %d, want %d", tt.header, tt.value, rec.Code, tt.status)
		}
	}
	if seen.count() != 1 {
		t.Fatalf("upstream saw %d requests, want 1 (the one with only a dropped header)", seen.count())
	}
	for k, vs := range seen.requests[0].Header {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") || v == "evil" || k == "X-Other" {
				t.Errorf("injected header reached upstream: %s: %q", k, v)
			}
		}
	}
}

// readEvent reads one SSE event (through its blank line).
func readEvent(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		line, err := br.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			return sb.String(), err
		}
		if line == "\n" {
			return sb.String(), nil
		}
	}
}
