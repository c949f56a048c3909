package model

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cordon-project/cordon/internal/crossing"
)

// geminiPlaceholder is what a contained Gemini CLI sends as its key.
const geminiPlaceholder = "AIzaSy-cordon-placeholder-agent"

// postGemini sends body as Gemini CLI would: its placeholder key in the
// x-goog-api-key header and, for good measure, in ?key=.
func (s *setup) postGemini(t *testing.T, p, body string) (*http.Response, []byte) {
	t.Helper()
	sep := "?"
	if strings.Contains(p, "?") {
		sep = "&"
	}
	req, _ := http.NewRequest("POST", s.srv.URL+p+sep+"key="+geminiPlaceholder, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Goog-Api-Key", geminiPlaceholder)
	req.Header.Set("X-Goog-Api-Client", "google-genai-sdk/1.30.0 gl-node/v20")
	req.Header.Set("Authorization", "Bearer agent-token")
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

const geminiReply = `{"candidates":[{"content":{"parts":[{"text":"Let me look."},` +
	`{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}}}],"role":"model"},"finishReason":"STOP","index":0}],` +
	`"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":12,"thoughtsTokenCount":5,"cachedContentTokenCount":10,"totalTokenCount":47},` +
	`"modelVersion":"gemini-2.5-flash"}`

type geminiError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

func decodeGeminiError(t *testing.T, b []byte) geminiError {
	t.Helper()
	var e geminiError
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Status == "" {
		t.Fatalf("error body %q is not a Gemini error: %v", b, err)
	}
	return e
}

// A generateContent call reaches the upstream at the route's URL with the
// custodied key as x-goog-api-key and nothing of the agent's credentials
// (header, ?key=, Authorization); the output cap is added; the answer is
// relayed; the receipt carries the usage (thoughts as output, cached
// tokens inside the prompt count) and the tool call.
func TestGeminiGenerate(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, geminiReply)
	})
	s := newSetup(t, up.URL, nil)
	body := `{"contents":[{"role":"user","parts":[{"text":"list files"}]}],"tools":[{"functionDeclarations":[{"name":"run_shell_command","parameters":{"type":"OBJECT"}}]}]}`
	resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-flash:generateContent", body)
	if resp.StatusCode != 200 || string(out) != geminiReply {
		t.Fatalf("status %d body %s, want 200 and the provider's reply", resp.StatusCode, out)
	}
	if seen.count() != 1 {
		t.Fatalf("upstream saw %d requests, want 1", seen.count())
	}
	r := seen.requests[0]
	if r.URL.Path != "/v1beta/models/gemini-2.5-flash:generateContent" || r.URL.RawQuery != "" {
		t.Errorf("upstream URL = %s, want the model's generateContent without a query", r.URL)
	}
	if got := r.Header.Get("X-Goog-Api-Key"); got != geminiKey {
		t.Errorf("upstream x-goog-api-key = %q, want the custodied key", got)
	}
	for _, h := range []string{"Authorization", "X-Goog-Api-Client", "X-Api-Key"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("upstream got agent header %s: %q", h, v)
		}
	}
	want := `{"generationConfig":{"maxOutputTokens":4096},` + body[1:]
	if string(seen.bodies[0]) != want {
		t.Errorf("upstream body = %s, want %s", seen.bodies[0], want)
	}
	requireSettled(t, s, crossing.Receipt{
		Identity: testID, Broker: "model", Action: "gemini.generate", Target: "gemini-2.5-flash",
		RequestDigest: digest([]byte(body)), Decision: crossing.Allow, Reason: "route gemini; output cap set by cordon: 4096",
		UpstreamCode: 200, BytesIn: int64(len(body)), BytesOut: int64(len(geminiReply)),
		Usage:     crossing.Amount{Requests: 1, InputTokens: 30, OutputTokens: 17, Bytes: int64(len(body) + len(geminiReply))},
		Untrusted: []string{"tool_use:run_shell_command"},
	})
}

// geminiStream is a streamGenerateContent?alt=sse answer: data-only
// events, running usage, the totals on the chunk with finishReason.
var geminiStream = []string{
	"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":1,\"totalTokenCount\":41}}\r\n\r\n",
	"data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"write_file\",\"args\":{\"file_path\":\"a\"}}}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":6,\"totalTokenCount\":46}}\r\n\r\n",
	"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"lo\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":9,\"thoughtsTokenCount\":3,\"totalTokenCount\":52}}\r\n\r\n",
}

// A stream is relayed event by event and settles the final chunk's usage;
// a stream cut before its final chunk is charged the whole output
// reservation and ends with a Gemini-shaped error event.
func TestGeminiStream(t *testing.T) {
	for _, tt := range []struct {
		name    string
		events  []string
		wantOut int64
		cut     bool
	}{
		{"complete", geminiStream, 12, false},
		{"cut short", geminiStream[:2], 1000, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Content-Type", "text/event-stream")
				streamEvents(w, tt.events)
			})
			s := newSetup(t, up.URL, nil)
			body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":1000,"temperature":0}}`
			resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", body)
			if resp.StatusCode != 200 || !strings.HasPrefix(string(out), strings.Join(tt.events, "")) {
				t.Fatalf("status %d body %q, want 200 and the events", resp.StatusCode, out)
			}
			if got := seen.requests[0].URL.RawQuery; got != "alt=sse" {
				t.Errorf("upstream query = %q, want alt=sse only", got)
			}
			if string(seen.bodies[0]) != body {
				t.Errorf("upstream body = %s, want the agent's bytes (the cap was set)", seen.bodies[0])
			}
			rc := s.authority.lastReceipt(t)
			if rc.Action != "gemini.stream" || rc.Usage.InputTokens != 40 || rc.Usage.OutputTokens != tt.wantOut {
				t.Errorf("receipt %s usage %+v, want gemini.stream with 40 in, %d out", rc.Action, rc.Usage, tt.wantOut)
			}
			if diff := cmp.Diff([]string{"tool_use:write_file"}, rc.Untrusted); diff != "" {
				t.Errorf("untrusted (-want +got):\n%s", diff)
			}
			tail := strings.TrimPrefix(string(out), strings.Join(tt.events, ""))
			if tt.cut != strings.Contains(tail, `"status":"UNAVAILABLE"`) || tt.cut != strings.Contains(rc.Reason, "incomplete") {
				t.Errorf("cut %v: tail %q, reason %q", tt.cut, tail, rc.Reason)
			}
		})
	}
}

// streamGenerateContent without alt=sse (the JSON-array stream) is
// refused before anything is forwarded; the same request with alt=sse is
// the control.
func TestGeminiStreamNeedsSSE(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		streamEvents(w, geminiStream)
	})
	s := newSetup(t, up.URL, nil)
	body := `{"contents":[{"parts":[{"text":"hi"}]}]}`
	for _, q := range []string{"", "?alt=json", "?alt=sse&alt=json"} {
		resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-pro:streamGenerateContent"+q, body)
		e := decodeGeminiError(t, out)
		if resp.StatusCode != 400 || e.Error.Status != "INVALID_ARGUMENT" || !strings.Contains(e.Error.Message, "alt=sse") {
			t.Errorf("query %q: %d %s, want 400 naming alt=sse", q, resp.StatusCode, out)
		}
	}
	if seen.count() != 0 {
		t.Fatalf("upstream saw %d requests, want none", seen.count())
	}
	if resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", body); resp.StatusCode != 200 || seen.count() != 1 {
		t.Fatalf("control: %d %s, upstream saw %d", resp.StatusCode, out, seen.count())
	}
}

// The model comes from the path: anything but one plain segment is refused
// before the upstream is reached, and a model outside the route's list is
// a permission error; a percent-encoded but unambiguous id is the control,
// forwarded decoded.
func TestGeminiPathModel(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, geminiReply)
	})
	s := newSetup(t, up.URL, nil)
	body := `{"contents":[{"parts":[{"text":"hi"}]}]}`
	for _, tt := range []struct {
		path   string
		status int
	}{
		{"/v1beta/models/gemini-2.5-flash%2F..%2Fx:generateContent", 400},
		{"/v1beta/models/gemini-2.5..flash:generateContent", 400},
		{"/v1beta/models/..:generateContent", 400},
		{"/v1beta/models/.gemini-2.5-flash:generateContent", 400},
		{"/v1beta/models/gemini-2.5-flash%252e:generateContent", 400},
		{"/v1beta/models/gemini-2.5-flash%3Fkey=x:generateContent", 400},
		{"/v1beta/models/gemini-2.5-flash%23:generateContent", 400},
		{"/v1beta/models/a:b:generateContent", 400},
		{"/v1beta/models/:generateContent", 400},
		{"/v1beta/models/x/gemini-2.5-flash:generateContent", 400},
		{"/v1beta/models/gemini-2.5-flash:embedContent", 404},
		{"/v1beta/models/gemini-2.5-flash", 404},
		{"/v1beta/models/gemini-1.5-pro:generateContent", 403},
		{"/v1beta/tunedModels/gemini-2.5-flash:generateContent", 404},
	} {
		resp, out := s.postGemini(t, tt.path, body)
		e := decodeGeminiError(t, out)
		if resp.StatusCode != tt.status || e.Error.Code != tt.status {
			t.Errorf("POST %s = %d %s, want %d", tt.path, resp.StatusCode, out, tt.status)
		}
	}
	if seen.count() != 0 {
		t.Fatalf("upstream saw %d requests, want none", seen.count())
	}
	resp, out := s.postGemini(t, "/v1beta/models/gemini%2D2.5-flash:generateContent", body)
	if resp.StatusCode != 200 || seen.count() != 1 || seen.requests[0].URL.Path != "/v1beta/models/gemini-2.5-flash:generateContent" {
		t.Fatalf("control: %d %s, upstream saw %d", resp.StatusCode, out, seen.count())
	}
	if rc := s.authority.nthReceipt(t, 15); rc.Target != "gemini-2.5-flash" {
		t.Errorf("receipt target = %q", rc.Target)
	}
}

// Each guard refuses its case with a Gemini-shaped error and forwards
// nothing; each refused body has an allowed twin.
func TestGeminiGuard(t *testing.T) {
	lim := testLimits()
	gen := &endpoints[4]
	for _, tt := range []struct {
		name, refused, allowed string
		kind                   kind
		inMsg                  string
	}{
		{"file data", `{"contents":[{"parts":[{"fileData":{"mimeType":"image/png","fileUri":"https://x/a.png"}}]}]}`,
			`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}]}`, kindForbidden, "fileData"},
		{"file data snake case", `{"contents":[{"parts":[{"file_data":{"file_uri":"files/abc"}}]}]}`,
			`{"contents":[{"parts":[{"inline_data":{"mime_type":"image/png","data":"AAAA"}}]}]}`, kindForbidden, "cannot see"},
		{"file uri anywhere", `{"contents":[{"parts":[{"text":"x","fileUri":"gs://b/o"}]}]}`,
			`{"contents":[{"parts":[{"text":"x"}]}]}`, kindForbidden, "fileUri"},
		{"cached content", `{"contents":[{"parts":[{"text":"x"}]}],"cachedContent":"cachedContents/abc"}`,
			`{"contents":[{"parts":[{"text":"x"}]}],"cachedContent":""}`, kindForbidden, "cachedContent"},
		{"google search", `{"contents":[],"tools":[{"googleSearch":{}}]}`,
			`{"contents":[],"tools":[{"functionDeclarations":[]}]}`, kindForbidden, "googleSearch"},
		{"google search snake case", `{"contents":[],"tools":[{"google_search":{}}]}`,
			`{"contents":[],"tools":[{"google_search":null}]}`, kindForbidden, "googleSearch"},
		{"search retrieval", `{"contents":[],"tools":[{"googleSearchRetrieval":{"dynamicRetrievalConfig":{}}}]}`,
			`{"contents":[],"tools":[]}`, kindForbidden, "googleSearchRetrieval"},
		{"code execution", `{"contents":[],"tools":[{"functionDeclarations":[],"codeExecution":{}}]}`,
			`{"contents":[],"tools":[{"functionDeclarations":[]}]}`, kindForbidden, "codeExecution"},
		{"url context", `{"contents":[],"tools":[{"urlContext":{}}]}`,
			`{"contents":[]}`, kindForbidden, "urlContext"},
		{"unknown tool", `{"contents":[],"tools":[{"fileSearch":{"fileSearchStoreNames":["x"]}}]}`,
			`{"contents":[]}`, kindForbidden, "fileSearch"},
		{"too many attachments", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA"}},{"inlineData":{"mimeType":"image/png","data":"AA"}},{"inlineData":{"mimeType":"image/png","data":"AA"}}]}]}`,
			`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA"}},{"inlineData":{"mimeType":"image/png","data":"AA"}}]}]}`, kindInvalid, "too many attachments"},
		{"media type", `{"contents":[{"parts":[{"inlineData":{"mimeType":"video/mp4","data":"AA"}}]}]}`,
			`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/jpeg","data":"AA"}}]}]}`, kindInvalid, "media type"},
		{"attachment size", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + strings.Repeat("A", 1400) + `"}}]}]}`,
			`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + strings.Repeat("A", 1300) + `"}}]}]}`, kindTooLarge, "attachment exceeds"},
		{"duplicate cap spellings", `{"contents":[],"generationConfig":{"maxOutputTokens":10,"max_output_tokens":100000}}`,
			`{"contents":[],"generationConfig":{"max_output_tokens":100000}}`, kindInvalid, "duplicate"},
		{"duplicate inline spellings", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA","mime_type":"text/x"}}]}]}`,
			`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA"}}]}]}`, kindInvalid, "duplicate"},
		{"cap too large", `{"contents":[],"generationConfig":{"maxOutputTokens":10000001}}`,
			`{"contents":[],"generationConfig":{"maxOutputTokens":10000000}}`, kindInvalid, "maxOutputTokens"},
		{"candidate count", `{"contents":[],"generationConfig":{"candidateCount":1000}}`,
			`{"contents":[],"generationConfig":{"candidateCount":8}}`, kindInvalid, "candidateCount"},
		{"body model differs", `{"model":"models/gemini-1.5-pro","contents":[]}`,
			`{"model":"models/gemini-2.5-flash","contents":[]}`, kindInvalid, "request path"},
		{"cap as a string", `{"contents":[],"generationConfig":{"maxOutputTokens":"100000000"}}`,
			`{"contents":[],"generationConfig":{"maxOutputTokens":100}}`, kindInvalid, "maxOutputTokens"},
		{"no contents", `{"generationConfig":{}}`, `{"contents":[],"generationConfig":{}}`, kindInvalid, "contents"},
		{"not an object", `[{"contents":[]}]`, `{"contents":[]}`, kindInvalid, "JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ref := guardGemini([]byte(tt.refused), &lim, gen, []byte("gemini-2.5-flash"))
			if ref == nil || ref.kind != tt.kind || !strings.Contains(ref.msg, tt.inMsg) {
				t.Errorf("guardGemini(%s) = %v, want kind %d naming %q", tt.refused, ref, tt.kind, tt.inMsg)
			}
			if _, ref := guardGemini([]byte(tt.allowed), &lim, gen, []byte("gemini-2.5-flash")); ref != nil {
				t.Errorf("control guardGemini(%s) refused: %v", tt.allowed, ref)
			}
		})
	}
	// What the provider never resolves is not read: a function call's
	// arguments and a function response's result may hold anything.
	body := `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{"fileData":{"fileUri":"https://x"}}}}]},` +
		`{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"cachedContent":"x","fileUri":"gs://y"}}}]}]}`
	if _, ref := guardGemini([]byte(body), &lim, gen, nil); ref != nil {
		t.Errorf("guardGemini(%s) refused: %v", body, ref)
	}
}

// The broker's refusal reaches the agent as a Gemini error, and nothing is
// forwarded; a refused server tool is receipted as a denial.
func TestGeminiRefusalShape(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, geminiReply)
	})
	s := newSetup(t, up.URL, nil)
	resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[],"tools":[{"googleSearch":{}}]}`)
	e := decodeGeminiError(t, out)
	if resp.StatusCode != 403 || e.Error.Code != 403 || e.Error.Status != "PERMISSION_DENIED" || !strings.Contains(e.Error.Message, "googleSearch") {
		t.Errorf("refusal = %d %s", resp.StatusCode, out)
	}
	if seen.count() != 0 {
		t.Errorf("upstream saw %d requests", seen.count())
	}
	if rc := s.authority.lastReceipt(t); rc.Decision != crossing.Deny || rc.Action != "gemini.generate" {
		t.Errorf("receipt %+v, want a gemini.generate denial", rc)
	}
}

// countTokens is carried, generates nothing and is charged no tokens; the
// broker adds no cap to it.
func TestGeminiCountTokens(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"totalTokens":31}`)
	})
	s := newSetup(t, up.URL, nil)
	body := `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}]}`
	resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-flash:countTokens", body)
	if resp.StatusCode != 200 || string(out) != `{"totalTokens":31}` {
		t.Fatalf("countTokens = %d %s", resp.StatusCode, out)
	}
	if string(seen.bodies[0]) != body || seen.requests[0].URL.Path != "/v1beta/models/gemini-2.5-flash:countTokens" {
		t.Errorf("upstream saw %s %s", seen.requests[0].URL, seen.bodies[0])
	}
	rc := s.authority.lastReceipt(t)
	if rc.Action != "gemini.count_tokens" || rc.Usage.InputTokens != 0 || rc.Usage.OutputTokens != 0 || rc.Usage.Requests != 1 {
		t.Errorf("receipt %s usage %+v, want count_tokens charged no tokens", rc.Action, rc.Usage)
	}
}

// The custodied key never reaches the agent: echoed by the upstream in a
// JSON answer, an error and a stream, it is redacted; the control is that
// the upstream did receive it.
func TestGeminiCustody(t *testing.T) {
	for _, tt := range []struct {
		name, ctype, body string
		status            int
		path              string
	}{
		{"json", "application/json", `{"candidates":[{"content":{"parts":[{"text":"the key is ` + geminiKey + `"}]},"finishReason":"STOP"}]}`, 200, ":generateContent"},
		{"error", "application/json", `{"error":{"code":400,"message":"API key ` + geminiKey + ` expired","status":"INVALID_ARGUMENT"}}`, 400, ":generateContent"},
		{"stream", "text/event-stream", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"" + geminiKey + "\"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n", 200, ":streamGenerateContent?alt=sse"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Content-Type", tt.ctype)
				w.Header().Set("X-Request-Id", geminiKey)
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			s := newSetup(t, up.URL, nil)
			resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-flash"+tt.path, `{"contents":[{"parts":[{"text":"key?"}]}]}`)
			if seen.count() != 1 || seen.requests[0].Header.Get("X-Goog-Api-Key") != geminiKey {
				t.Fatalf("control: the upstream did not get the custodied key")
			}
			if resp.StatusCode != tt.status || leaks(out, geminiKey) || strings.Contains(strings.ToLower(resp.Header.Get("X-Request-Id")), strings.ToLower(geminiKey)) {
				t.Errorf("status %d, body %q, headers %v: the key reached the agent", resp.StatusCode, out, resp.Header)
			}
			if !strings.Contains(string(out), "[REDACTED") && !strings.Contains(string(out), "REDACTED") {
				t.Errorf("body %q: no redaction marker", out)
			}
		})
	}
}

// The output cap lands wherever the request leaves room for it, in
// either spelling, and an agent's own cap is kept.
func TestGeminiCapEdits(t *testing.T) {
	lim := testLimits()
	for _, tt := range []struct{ body, want string }{
		{`{"contents":[]}`, `{"generationConfig":{"maxOutputTokens":77},"contents":[]}`},
		{`{"contents":[],"generationConfig":{}}`, `{"contents":[],"generationConfig":{"maxOutputTokens":77}}`},
		{`{"contents":[],"generationConfig":{ "temperature":0}}`, `{"contents":[],"generationConfig":{"maxOutputTokens":77, "temperature":0}}`},
		{`{"contents":[],"generation_config":null}`, `{"contents":[],"generation_config":{"maxOutputTokens":77}}`},
		{`{"contents":[],"generationConfig":{"max_output_tokens":null}}`, `{"contents":[],"generationConfig":{"max_output_tokens":77}}`},
		{`{"contents":[],"generationConfig":{"maxOutputTokens":9}}`, `{"contents":[],"generationConfig":{"maxOutputTokens":9}}`},
	} {
		info, ref := guardGemini([]byte(tt.body), &lim, &endpoints[5], nil)
		if ref != nil {
			t.Fatalf("guardGemini(%s): %v", tt.body, ref)
		}
		p := capEdits(&info, &endpoints[5], 77)
		if got := string(bytes.Join(p.segments([]byte(tt.body), nil), nil)); got != tt.want {
			t.Errorf("capped %s = %s, want %s", tt.body, got, tt.want)
		}
	}
	// countTokens generates nothing: no cap.
	info, _ := guardGemini([]byte(`{"contents":[]}`), &lim, &endpoints[6], nil)
	if p := capEdits(&info, &endpoints[6], 77); p.n != 0 {
		t.Errorf("countTokens got a cap: %+v", p)
	}
}

// A Gemini call held for approval: 409 in Gemini's error shape naming the
// approval, nothing forwarded, a deny receipt.
func TestGeminiApprovalPending(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) { io.WriteString(w, geminiReply) })
	led := &pendingAuthority{fakeAuthority: newFakeAuthority()}
	s := newSetup(t, up.URL, func(o *Options) { o.Authority = led })
	body := `{"contents":[{"parts":[{"text":"hi"}]}]}`
	resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-flash:generateContent", body)
	var m struct {
		Error struct {
			Code       int    `json:"code"`
			Status     string `json:"status"`
			Reason     string `json:"reason"`
			ApprovalID string `json:"approval_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &m); err != nil || resp.StatusCode != 409 || m.Error.Code != 409 || m.Error.Reason != "approval_pending" || m.Error.ApprovalID != pendingRef.ID {
		t.Fatalf("approval pending = %d %s (%v)", resp.StatusCode, out, err)
	}
	if a := led.asks[len(led.asks)-1]; a.Operation != "gemini.generate" || a.Target != "gemini-2.5-flash" || a.RequestDigest != digest([]byte(body)) {
		t.Errorf("policy question %+v", a)
	}
	if seen.count() != 0 {
		t.Errorf("upstream saw %d requests", seen.count())
	}
}

// Usage sent in a chunk after the one with finishReason is still the
// call's final usage.
func TestGeminiUsageAfterFinish(t *testing.T) {
	x := &exchange{ep: &endpoints[5], api: apiGemini}
	for _, d := range []string{
		`{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":1}}`,
		`{"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":6,"thoughtsTokenCount":2}}`,
	} {
		if err := x.inspectEvent(&sseEvent{data: []byte(d)}); err != nil {
			t.Fatal(err)
		}
	}
	if !x.done || x.usage.out != 8 || x.usage.in != 4 {
		t.Errorf("done %v usage %+v, want done with 4 in, 8 out", x.done, x.usage)
	}
}

// Budgets: the reservation is the output cap times candidateCount (the
// agent's cap, or the one the broker set); over the budget the call is
// refused as RESOURCE_EXHAUSTED before the upstream is reached, and a call
// that fits is the control.
func TestGeminiBudget(t *testing.T) {
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, geminiReply)
	})
	s := newSetup(t, up.URL, nil)
	s.authority.limits.OutputTokens = 3000
	for _, tt := range []struct {
		body   string
		status int
		want   int64 // output tokens reserved
	}{
		{`{"contents":[],"generationConfig":{"maxOutputTokens":1000,"candidateCount":4}}`, 429, 0},
		{`{"contents":[]}`, 429, 0}, // the broker's cap, 4096
		{`{"contents":[],"generationConfig":{"maxOutputTokens":1000,"candidateCount":2}}`, 200, 2000},
	} {
		resp, out := s.postGemini(t, "/v1beta/models/gemini-2.5-flash:generateContent", tt.body)
		if resp.StatusCode != tt.status {
			t.Errorf("%s = %d %s, want %d", tt.body, resp.StatusCode, out, tt.status)
		}
		if tt.status == 429 {
			if e := decodeGeminiError(t, out); e.Error.Status != "RESOURCE_EXHAUSTED" || !strings.Contains(e.Error.Message, "output tokens") {
				t.Errorf("%s: refusal %s", tt.body, out)
			}
			continue
		}
		if got := s.authority.reserved[len(s.authority.reserved)-1].OutputTokens; got != tt.want {
			t.Errorf("%s reserved %d output tokens, want %d", tt.body, got, tt.want)
		}
	}
	if seen.count() != 1 {
		t.Errorf("upstream saw %d requests, want the control's only", seen.count())
	}
}
