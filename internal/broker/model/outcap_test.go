package model

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// An OpenAI request that sets no output cap reaches the provider with the
// cap the broker reserved, and a chat stream asks for its usage; a request
// that sets one is forwarded as sent.
func TestOutputCapSet(t *testing.T) {
	const chatOK = `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}`
	chatStream := []string{"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n\n", "data: [DONE]\n\n"}
	const respOK = `{"output":[],"usage":{"input_tokens":5,"output_tokens":7}}`
	tests := []struct {
		name, path, body string
		limit            int64  // DefaultMaxOutputTokens; 0: the default
		fwd              string // the body the provider must get; "" the agent's
		reserved         int64  // output tokens reserved
		reason           string
	}{
		{"chat", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 0,
			`{"max_completion_tokens":4096,"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 4096, "route gpt; output cap set by cordon: 4096"},
		{"chat stream", "/v1/chat/completions", "\n {\n\"model\":\"gpt-4o\",\"stream\":true,\"messages\":[]}", 0,
			"\n {\"max_completion_tokens\":4096,\"stream_options\":{\"include_usage\":true},\n\"model\":\"gpt-4o\",\"stream\":true,\"messages\":[]}", 4096,
			"route gpt; output cap set by cordon: 4096; stream usage requested by cordon"},
		{"chat stream with usage, n=2", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"n":2,"stream_options":{"include_usage":true}}`, 0,
			`{"max_completion_tokens":4096,"model":"gpt-4o","stream":true,"n":2,"stream_options":{"include_usage":true}}`, 8192, "route gpt; output cap set by cordon: 4096"},
		{"chat operator default", "/v1/chat/completions", `{"model":"gpt-4o"}`, 1000,
			`{"max_completion_tokens":1000,"model":"gpt-4o"}`, 1000, "route gpt; output cap set by cordon: 1000"},
		{"chat null cap and stream_options", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"max_completion_tokens":null,"stream_options":null}`, 0,
			`{"model":"gpt-4o","stream":true,"max_completion_tokens":4096,"stream_options":{"include_usage":true}}`, 4096,
			"route gpt; output cap set by cordon: 4096; stream usage requested by cordon"},
		{"chat null max_tokens", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":null}`, 0,
			`{"max_completion_tokens":4096,"model":"gpt-4o","max_tokens":null}`, 4096, "route gpt; output cap set by cordon: 4096"},
		{"chat max_tokens", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":100}`, 0, "", 100, "route gpt"},
		{"chat max_completion_tokens", "/v1/chat/completions", `{"model":"gpt-4o","max_completion_tokens":300,"stream":false}`, 0, "", 300, "route gpt"},
		{"responses", "/v1/responses", `{"model":"gpt-5","input":"hi"}`, 0,
			`{"max_output_tokens":4096,"model":"gpt-5","input":"hi"}`, 4096, "route gpt; output cap set by cordon: 4096"},
		{"responses stream", "/v1/responses", `{"model":"gpt-5","input":"hi","stream":true}`, 0,
			`{"max_output_tokens":4096,"model":"gpt-5","input":"hi","stream":true}`, 4096, "route gpt; output cap set by cordon: 4096"},
		{"responses null cap", "/v1/responses", `{"model":"gpt-5","max_output_tokens":null,"input":"hi"}`, 0,
			`{"model":"gpt-5","max_output_tokens":4096,"input":"hi"}`, 4096, "route gpt; output cap set by cordon: 4096"},
		{"responses chat-style cap is not a cap", "/v1/responses", `{"model":"gpt-5","max_completion_tokens":50,"input":"hi"}`, 0,
			`{"max_output_tokens":4096,"model":"gpt-5","max_completion_tokens":50,"input":"hi"}`, 4096, "route gpt; output cap set by cordon: 4096"},
		{"responses max_output_tokens", "/v1/responses", `{"model":"gpt-5","max_output_tokens":500,"input":"hi"}`, 0, "", 500, "route gpt"},
		{"anthropic unchanged", "/v1/messages", `{"model":"claude-x","max_tokens":2000,"stream":true}`, 0, "", 2000, "route claude"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				var req struct{ Stream bool }
				json.Unmarshal(body, &req)
				switch {
				case strings.HasPrefix(r.URL.Path, "/v1/messages"):
					streamEvents(w, anthropicStream)
				case r.URL.Path == "/v1/responses" && req.Stream:
					streamEvents(w, []string{"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":7}}}\n\n"})
				case req.Stream:
					streamEvents(w, chatStream)
				case r.URL.Path == "/v1/responses":
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, respOK)
				default:
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, chatOK)
				}
			})
			s := newSetup(t, up.URL, func(o *Options) { o.Limits.DefaultMaxOutputTokens = tt.limit })
			resp, out := s.post(t, tt.path, tt.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			want := tt.fwd
			if want == "" {
				want = tt.body
			}
			if got := string(seen.bodies[0]); got != want {
				t.Errorf("upstream body\n got %s\nwant %s", got, want)
			}
			if n := seen.requests[0].ContentLength; n != int64(len(want)) {
				t.Errorf("upstream Content-Length %d, want %d", n, len(want))
			}
			// The provider reads exactly one of each member.
			lim := testLimits()
			if _, ref := guardRequest(seen.bodies[0], &lim, endpointFor(seen.requests[0])); ref != nil {
				t.Errorf("forwarded body refused by the guard: %v", ref)
			}
			rc := s.authority.lastReceipt(t)
			if got := s.authority.reserved[0].OutputTokens; got != tt.reserved {
				t.Errorf("reserved %d output tokens, want %d", got, tt.reserved)
			}
			if rc.RequestDigest != digest([]byte(tt.body)) || rc.BytesIn != int64(len(tt.body)) {
				t.Errorf("receipt digest/bytes in are not the agent's request's")
			}
			if rc.Reason != tt.reason {
				t.Errorf("receipt reason %q, want %q", rc.Reason, tt.reason)
			}
		})
	}
}

// With 10000 output tokens of budget, capless requests — each capped and
// reserved at 4096 — are admitted twice, not three times.
func TestCaplessRequestsCannotOverspend(t *testing.T) {
	release := make(chan struct{})
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4096}}`)
	})
	s := newSetup(t, up.URL, nil)
	s.authority.limits.OutputTokens = 10000
	codes := make(chan int, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp, _ := s.post(t, "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"write forever"}]}`)
			codes <- resp.StatusCode
		})
	}
	select {
	case c := <-codes:
		if c != 429 {
			t.Errorf("first answer %d, want the third request refused with 429", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no request was refused")
	}
	close(release)
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[200] != 2 || seen.count() != 2 {
		t.Errorf("statuses %v, upstream saw %d; want 2 admitted", got, seen.count())
	}
	for _, b := range seen.bodies {
		if !bytes.HasPrefix(b, []byte(`{"max_completion_tokens":4096,"stream_options":{"include_usage":true},`)) {
			t.Errorf("upstream body %s lacks the cap", b)
		}
	}
	if s.authority.used.OutputTokens > 10000 {
		t.Errorf("settled %d output tokens against a 10000 limit", s.authority.used.OutputTokens)
	}
}

// Settlement when usage is unknown is the reservation (the cap); usage
// above the reservation settles as reported and is logged.
func TestOutputSettlement(t *testing.T) {
	tests := []struct {
		name, path, body string
		events           []string // a stream; else reply
		reply            string
		out              int64
		warn             bool
	}{
		{"stream_options without include_usage settles the cap", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{}}`,
			[]string{"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n", "data: [DONE]\n\n"}, "", 4096, false},
		{"no usage in a buffered answer settles the cap", "/v1/responses", `{"model":"gpt-5","input":"hi"}`, nil, `{"output":[]}`, 4096, false},
		{"usage above the cap is settled and logged", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":10}`, nil,
			`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":5000}}`, 5000, true},
		{"streamed usage above the cap", "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`,
			[]string{"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9000}}\n\n", "data: [DONE]\n\n"}, "", 9000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				if tt.events != nil {
					streamEvents(w, tt.events)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tt.reply)
			})
			var logs testkit.SyncBuffer
			s := newSetup(t, up.URL, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
			if resp, out := s.post(t, tt.path, tt.body); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			rc := s.authority.lastReceipt(t)
			if rc.Usage.OutputTokens != tt.out {
				t.Errorf("settled %d output tokens, want %d", rc.Usage.OutputTokens, tt.out)
			}
			if got := strings.Contains(logs.String(), "model usage above the reservation"); got != tt.warn {
				t.Errorf("warning logged = %v, want %v:\n%s", got, tt.warn, logs.String())
			}
		})
	}
}

func TestCapEditsAtOffsets(t *testing.T) {
	// The guard's offsets hold across escapes, white space and nesting.
	body := "\t{ \"mod\\u0065l\" : \"gpt-4o\" ,\"x\":{\"max_completion_tokens\":null},\"stream\" :true , \"max_completion_tokens\"  :  null\n,\"stream_options\":null }"
	lim := testLimits()
	info, ref := guardRequest([]byte(body), &lim, &endpoints[2])
	if ref != nil {
		t.Fatal(ref)
	}
	p := capEdits(&info, &endpoints[2], 77)
	got := string(bytes.Join(p.segments([]byte(body), nil), nil))
	want := "\t{ \"mod\\u0065l\" : \"gpt-4o\" ,\"x\":{\"max_completion_tokens\":null},\"stream\" :true , \"max_completion_tokens\"  :  77\n,\"stream_options\":{\"include_usage\":true} }"
	if got != want || p.cap != 77 || !p.usage {
		t.Errorf("edited\n got %q\nwant %q (%+v)", got, want, p)
	}
}
