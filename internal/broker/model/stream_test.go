package model

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/custody"
	"github.com/cordon-project/cordon/internal/testkit"
)

func TestFirstByteBeforeUpstreamFinishes(t *testing.T) {
	release := make(chan struct{})
	up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		streamEvents(w, anthropicStream[:1])
		select { // the rest only after the agent has seen the first event
		case <-release:
		case <-time.After(10 * time.Second):
		}
		for _, e := range anthropicStream[1:] {
			io.WriteString(w, e)
		}
	})
	s := newSetup(t, up.URL, nil)
	req, _ := http.NewRequest("POST", s.srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-x","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	br := bufio.NewReader(resp.Body)
	go func() {
		ev, _ := readEvent(br)
		first <- ev
	}()
	select {
	case ev := <-first:
		if ev != anthropicStream[0] {
			t.Errorf("first event = %q, want message_start", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not arrive while the upstream was still streaming: the broker buffers")
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if want := strings.Join(anthropicStream[1:], ""); string(rest) != want {
		t.Errorf("rest of stream = %q", rest)
	}
}

func TestSecretRedaction(t *testing.T) {
	// The upstream echoes the key, split across two flushed writes in the
	// middle of an event, and once more whole in a later event.
	half := len(anthropicKey) / 2
	events := []string{
		anthropicStream[0],
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"key " + anthropicKey[:half],
		anthropicKey[half:] + " end\"}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + openaiKey + "\"}}\n\n",
		anthropicStream[8], anthropicStream[9],
	}
	tests := []struct {
		name  string
		reply func(w http.ResponseWriter)
	}{
		{"split stream", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, e := range events {
				io.WriteString(w, e)
				w.(http.Flusher).Flush()
				time.Sleep(5 * time.Millisecond)
			}
		}},
		{"byte by byte", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			all := strings.Join(events, "")
			for i := range len(all) {
				io.WriteString(w, all[i:i+1])
				w.(http.Flusher).Flush()
			}
		}},
		{"buffered", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Request-Id", anthropicKey)
			io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"`+anthropicKey+` and \u003c`+`"}],"usage":{"input_tokens":1,"output_tokens":1}}`)
		}},
		{"error status", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad key `+anthropicKey+`"}}`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) { tt.reply(w) })
			s := newSetup(t, up.URL, nil)
			resp, out := s.post(t, "/v1/messages", `{"model":"claude-x","stream":true}`)
			for _, secret := range []string{anthropicKey, openaiKey, anthropicKey[:half+4], anthropicKey[half-4:]} {
				if strings.Contains(string(out), secret) {
					t.Errorf("secret %q reached the agent: %s", secret, out)
				}
			}
			for _, vs := range resp.Header {
				for _, v := range vs {
					if strings.Contains(v, anthropicKey) {
						t.Errorf("secret in a response header")
					}
				}
			}
			if !strings.Contains(string(out), custody.Replacement) {
				t.Errorf("no redaction mark in %s", out)
			}
		})
	}
}

func TestUpstreamStreamFailures(t *testing.T) {
	long := "data: " + strings.Repeat("x", maxSSELine+10)
	tests := []struct {
		name    string
		api     string
		events  []string
		outcome string
		errIn   string // expected in the error event
	}{
		{"invalid JSON", "anthropic", []string{anthropicStream[0], "event: content_block_delta\ndata: {\"type\":\n\n", anthropicStream[9]}, "malformed upstream stream", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\""},
		{"line too long", "anthropic", []string{anthropicStream[0], long}, "malformed upstream stream", "line too long"},
		{"ends inside an event", "anthropic", []string{anthropicStream[0], "event: content_block_delta\ndata: {}"}, "malformed upstream stream", "ended inside an event"},
		{"no message_stop", "anthropic", anthropicStream[:9], "upstream stream incomplete", "before its final event"},
		{"chat garbage", "openai", []string{"data: {\"choices\":[]}\n\n", "data: not json\n\n"}, "malformed upstream stream", "data: {\"error\":{\"message\":"},
		{"responses truncated", "responses", []string{"event: response.created\ndata: {\"type\":\"response.created\"}\n\n"}, "upstream stream incomplete", "event: error\ndata: {\"type\":\"error\",\"code\":\"upstream_error\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) { streamEvents(w, tt.events) })
			s := newSetup(t, up.URL, nil)
			p, body := "/v1/messages", `{"model":"claude-x","stream":true}`
			switch tt.api {
			case "openai":
				p, body = "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`
			case "responses":
				p, body = "/v1/responses", `{"model":"gpt-5","stream":true}`
			}
			resp, out := s.post(t, p, body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if !strings.HasPrefix(string(out), tt.events[0][:min(len(tt.events[0]), 40)]) {
				t.Errorf("valid events before the failure were not passed: %.100q", out)
			}
			if !strings.Contains(string(out), tt.errIn) || !strings.HasSuffix(string(out), "\n\n") {
				t.Errorf("stream ends %.300q, want an error event holding %q", tail(out, 300), tt.errIn)
			}
			rc := s.authority.lastReceipt(t)
			if rc.Decision != crossing.Allow || !strings.HasSuffix(rc.Reason, tt.outcome) {
				t.Errorf("receipt %q %q, want outcome %q", rc.Decision, rc.Reason, tt.outcome)
			}
			if n := s.authority.openReservations(); n != 0 {
				t.Errorf("%d reservations open", n)
			}
		})
	}
}

func tail(b []byte, n int) string { return string(b[max(0, len(b)-n):]) }

func TestResponseTooLarge(t *testing.T) {
	for _, stream := range []bool{false, true} {
		up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
			if stream {
				w.Header().Set("Content-Type", "text/event-stream")
				for range 100 {
					io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\",\"pad\":\""+strings.Repeat("p", 1000)+"\"}\n\n")
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"pad":"`+strings.Repeat("p", 20000)+`"}`)
		})
		s := newSetup(t, up.URL, func(o *Options) { o.Limits.MaxResponseBytes = 10000 })
		resp, out := s.post(t, "/v1/messages", `{"model":"claude-x"}`)
		if stream {
			if resp.StatusCode != 200 || !strings.Contains(tail(out, 300), "exceeds 10000 bytes") || len(out) > 12000 {
				t.Errorf("stream: status %d, %d bytes, tail %q", resp.StatusCode, len(out), tail(out, 200))
			}
		} else if e := decodeError(t, out); resp.StatusCode != 502 || e.Error.Type != "api_error" {
			t.Errorf("buffered: %d %s", resp.StatusCode, out)
		}
		rc := s.authority.lastReceipt(t)
		if !strings.HasSuffix(rc.Reason, "response exceeds limit") {
			t.Errorf("receipt reason %q", rc.Reason)
		}
	}
}

func TestAgentDisconnectCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		streamEvents(w, anthropicStream[:2])
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	s := newSetup(t, up.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-x","stream":true,"max_tokens":100}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
		t.Fatal(err)
	}
	cancel() // the agent goes away mid-stream
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled when the agent disconnected")
	}
	rc := s.authority.lastReceipt(t)
	if !strings.HasSuffix(rc.Reason, "aborted: agent disconnected") {
		t.Errorf("receipt reason %q", rc.Reason)
	}
	// Input is known from message_start; output is not, so the whole
	// output reservation is charged.
	if rc.Usage.InputTokens != 480 || rc.Usage.OutputTokens != 100 {
		t.Errorf("settled %+v, want input 480 and the reserved 100 output", rc.Usage)
	}
	if n := s.authority.openReservations(); n != 0 || s.authority.streams != 0 {
		t.Errorf("budget still held after disconnect: %d reservations, %d streams", n, s.authority.streams)
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	up := testkit.NewModelUpstream(t, openaiKey, "x")
	addr := up.URL()
	up.Close()
	s := newSetup(t, addr, nil)
	resp, out := s.post(t, "/v1/chat/completions", `{"model":"gpt-4o"}`)
	if e := decodeError(t, out); resp.StatusCode != 502 || e.Error.Type != "server_error" {
		t.Errorf("got %d %s, want 502 server_error", resp.StatusCode, out)
	}
	if rc := s.authority.lastReceipt(t); rc.Usage.InputTokens != 0 || rc.Usage.Requests != 1 {
		t.Errorf("a call never sent settled %+v", rc.Usage)
	}
}

func TestConcurrentStreamLimit(t *testing.T) {
	release := make(chan struct{})
	up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		streamEvents(w, anthropicStream[:1])
		<-release
		io.WriteString(w, anthropicStream[9])
	})
	s := newSetup(t, up.URL, func(o *Options) { o.Limits.MaxConcurrentStreams = 1 })
	req, _ := http.NewRequest("POST", s.srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-x","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	readEvent(bufio.NewReader(resp.Body))
	r2, out := s.post(t, "/v1/messages", `{"model":"claude-x","stream":true}`)
	if e := decodeError(t, out); r2.StatusCode != 429 || e.Error.Type != "rate_limit_error" {
		t.Errorf("second stream: %d %s, want 429", r2.StatusCode, out)
	}
	close(release)
}

func TestSettlement(t *testing.T) {
	tests := []struct {
		name       string
		path, body string
		reply      func(w http.ResponseWriter)
		in, out    int64
	}{
		{"count_tokens generates nothing", "/v1/messages/count_tokens", `{"model":"claude-x","messages":[]}`,
			func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"input_tokens":1234}`)
			}, 0, 0},
		{"provider error generates nothing", "/v1/messages", `{"model":"claude-x","max_tokens":10}`,
			func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(529)
				io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			}, 0, 0},
		{"chat stream without usage settles the estimate", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"n":2,"max_completion_tokens":300}`,
			func(w http.ResponseWriter) {
				streamEvents(w, []string{"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n", "data: [DONE]\n\n"})
			}, 17, 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) { tt.reply(w) })
			s := newSetup(t, up.URL, nil)
			s.post(t, tt.path, tt.body)
			rc := s.authority.lastReceipt(t)
			if rc.Usage.InputTokens != tt.in || rc.Usage.OutputTokens != tt.out || rc.Usage.Requests != 1 {
				t.Errorf("settled %+v, want in %d out %d", rc.Usage, tt.in, tt.out)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	good := func() Options {
		return Options{
			Routes:    []Route{{Name: "a", API: APIAnthropic, Upstream: mustURL("https://api.anthropic.com"), Credential: "k", Models: []string{"claude-*"}}},
			Limits:    testLimits(),
			Authority: newFakeAuthority(),
			Secrets:   fakeSecrets{},
		}
	}
	if _, err := New(good()); err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Options)
	}{
		{"no authority", func(o *Options) { o.Authority = nil }},
		{"no secrets", func(o *Options) { o.Secrets = nil }},
		{"no routes", func(o *Options) { o.Routes = nil }},
		{"unknown api", func(o *Options) { o.Routes[0].API = "cohere" }},
		{"bad glob", func(o *Options) { o.Routes[0].Models = []string{"claude-["} }},
		{"no models", func(o *Options) { o.Routes[0].Models = nil }},
		{"no credential", func(o *Options) { o.Routes[0].Credential = "" }},
		{"credentials in URL", func(o *Options) { o.Routes[0].Upstream = mustURL("https://u:p@api.anthropic.com") }},
		{"plain http off loopback", func(o *Options) { o.Routes[0].Upstream = mustURL("http://api.anthropic.com") }},
		{"query in URL", func(o *Options) { o.Routes[0].Upstream = mustURL("https://api.anthropic.com/?key=x") }},
		{"duplicate route", func(o *Options) { o.Routes = append(o.Routes, o.Routes[0]) }},
		{"no request limit", func(o *Options) { o.Limits.MaxRequestBytes = 0 }},
		{"no response limit", func(o *Options) { o.Limits.MaxResponseBytes = 0 }},
		{"no stream limit", func(o *Options) { o.Limits.MaxConcurrentStreams = 0 }},
		{"bad mime glob", func(o *Options) { o.Limits.AllowedMIME = []string{"image/["} }},
		{"negative default output cap", func(o *Options) { o.Limits.DefaultMaxOutputTokens = -1 }},
		{"absurd default output cap", func(o *Options) { o.Limits.DefaultMaxOutputTokens = maxOutputCap + 1 }},
	}
	for _, tt := range tests {
		o := good()
		tt.mod(&o)
		if _, err := New(o); err == nil {
			t.Errorf("New(%s) = nil error, want a refusal", tt.name)
		}
	}
	o := good()
	o.Routes[0].Upstream = mustURL("http://127.0.0.1:8080")
	if _, err := New(o); err != nil {
		t.Errorf("New(loopback http) = %v, want allowed", err)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
