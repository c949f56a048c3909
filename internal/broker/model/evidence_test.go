package model

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

// logAuthority is the fake authority with the store's one-step
// SettleRecord. With refuse set its evidence log refuses every append, as
// the store does when a leaf cannot be written: SettleRecord fails whole
// (the settlement rolls back with the receipt's transaction) and Record
// fails; Settle alone still works.
type logAuthority struct {
	*fakeAuthority
	refuse bool
}

var errLogRefused = fmt.Errorf("%w: append receipt 7 to the evidence log: refused", crossing.ErrUnavailable)

func (a *logAuthority) SettleRecord(ctx context.Context, r crossing.Reservation, used crossing.Amount, rc crossing.Receipt) (crossing.BudgetState, error) {
	if a.refuse {
		return crossing.BudgetState{}, errLogRefused
	}
	st, err := a.Settle(ctx, r, used)
	if err != nil {
		return st, err
	}
	rc.Budget = st
	return st, a.fakeAuthority.Record(ctx, rc)
}

func (a *logAuthority) Record(ctx context.Context, rc crossing.Receipt) error {
	if a.refuse {
		return errLogRefused
	}
	return a.fakeAuthority.Record(ctx, rc)
}

// A call whose receipt cannot be recorded must not deliver the upstream's
// answer (design decision 12: an unavailable evidence log denies the
// crossing). Non-streamed: the agent gets the API's 503-class error, never
// the body. Streamed: the events before the end flow, the terminal event
// is withheld and an error event ends the stream. Either way the
// reservation is settled at the call's usage (the upstream did the work),
// not released. The control is the same call with a working log: the
// whole answer, with its terminator, and a receipt.
func TestEvidenceLogRefusedWithholdsAnswer(t *testing.T) {
	const gemPath = "/v1beta/models/gemini-2.5-pro:"
	gemReply := `{"candidates":[{"content":{"parts":[{"text":"SECRET-ANSWER"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":9}}`
	chatReply := `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"SECRET-ANSWER"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":9}}`
	respReply := `{"id":"r1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"SECRET-ANSWER"}]}],"usage":{"input_tokens":5,"output_tokens":9}}`
	chatStream := []string{
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}\n\n",
		"data: [DONE]\n\n",
	}
	respStream := []string{
		"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\"}}\n\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":9}}}\n\n",
	}
	for _, tt := range []struct {
		name, path, body string
		reply            any    // string: JSON; []string: SSE events, the last the terminator
		shape            string // in the API's error
		out              int64  // output tokens settled
	}{
		{"anthropic", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`, anthropicReply, `"type":"overloaded_error"`, 37},
		{"anthropic stream", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, anthropicStream, `"type":"overloaded_error"`, 89},
		{"chat", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, chatReply, `"code":"service_unavailable"`, 9},
		{"chat stream", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, chatStream, `"code":"service_unavailable"`, 9},
		{"responses", "/v1/responses", `{"model":"gpt-5","input":"hi","max_output_tokens":100}`, respReply, `"code":"service_unavailable"`, 9},
		{"responses stream", "/v1/responses", `{"model":"gpt-5","input":"hi","max_output_tokens":100,"stream":true}`, respStream, `"code":"service_unavailable"`, 9},
		{"gemini", gemPath + "generateContent", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":100}}`, gemReply, `"status":"UNAVAILABLE"`, 9},
		{"gemini stream", gemPath + "streamGenerateContent?alt=sse", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":1000}}`, geminiStream, `"status":"UNAVAILABLE"`, 12},
	} {
		for _, refuse := range []bool{false, true} {
			name := tt.name + "/log works (control)"
			if refuse {
				name = tt.name + "/log refuses appends"
			}
			t.Run(name, func(t *testing.T) {
				up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
					switch reply := tt.reply.(type) {
					case string:
						w.Header().Set("Content-Type", "application/json")
						io.WriteString(w, reply)
					case []string:
						w.Header().Set("Content-Type", "text/event-stream")
						streamEvents(w, reply)
					}
				})
				la := &logAuthority{refuse: refuse}
				s := newSetup(t, up.URL, func(o *Options) {
					la.fakeAuthority = o.Authority.(*fakeAuthority)
					o.Authority = la
				})
				post := s.post
				if strings.HasPrefix(tt.path, "/v1beta/") {
					post = s.postGemini
				}
				resp, out := post(t, tt.path, tt.body)
				if seen.count() != 1 {
					t.Fatalf("upstream saw %d calls, want 1", seen.count())
				}
				evs, stream := tt.reply.([]string)
				whole := tt.reply
				if stream {
					whole = strings.Join(evs, "")
				}
				switch {
				case !refuse:
					if resp.StatusCode != 200 || string(out) != whole {
						t.Fatalf("control: status %d body %q, want 200 and the whole answer", resp.StatusCode, out)
					}
					if rc := s.authority.lastReceipt(t); rc.Decision != crossing.Allow || rc.BytesOut != int64(len(out)) {
						t.Errorf("control: receipt %s bytes out %d, want allow and %d", rc.Decision, rc.BytesOut, len(out))
					}
				case stream:
					body := strings.Join(evs[:len(evs)-1], "")
					if resp.StatusCode != 200 || !strings.HasPrefix(string(out), body) {
						t.Fatalf("status %d body %q, want 200 and the events before the end", resp.StatusCode, out)
					}
					rest := strings.TrimPrefix(string(out), body)
					if strings.Contains(rest, evs[len(evs)-1]) || !strings.Contains(rest, "evidence log unavailable") ||
						!strings.Contains(rest, tt.shape) || !strings.HasSuffix(rest, "\n\n") {
						t.Errorf("stream ends %q, want the API's error event (%s) and no terminator", rest, tt.shape)
					}
				default:
					if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(out), "SECRET-ANSWER") || strings.Contains(string(out), "Let me check") ||
						!strings.Contains(string(out), "evidence log unavailable") || !strings.Contains(string(out), tt.shape) {
						t.Errorf("status %d body %s, want 503 with the API's error (%s) and not the answer", resp.StatusCode, out, tt.shape)
					}
					if resp.Header.Get("X-Should-Retry") != "false" {
						t.Errorf("X-Should-Retry = %q, want false: a retry pays the upstream again", resp.Header.Get("X-Should-Retry"))
					}
				}
				fa := s.authority
				fa.mu.Lock()
				defer fa.mu.Unlock()
				if refuse && len(fa.receipts) != 0 {
					t.Errorf("%d receipts recorded by a log that refuses appends", len(fa.receipts))
				}
				if len(fa.settled) != 1 || fa.settled[0].OutputTokens != tt.out || len(fa.held) != 0 {
					t.Errorf("settled %+v (held %v), want one settlement charging %d output tokens", fa.settled, fa.held, tt.out)
				}
			})
		}
	}
}
