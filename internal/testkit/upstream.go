package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// ModelUpstream is a loopback stand-in for the model providers. It speaks
// real Anthropic Messages (JSON and SSE, count_tokens), OpenAI Chat
// Completions (JSON and SSE) and Responses, and the Gemini API
// (generateContent, streamGenerateContent?alt=sse, countTokens); answers
// only requests that carry Key the way the provider expects it (x-api-key,
// a Bearer Authorization, or x-goog-api-key), and records what each
// request carried, so tests can check that the custodied key arrived and
// the agent's placeholder did not.
type ModelUpstream struct {
	srv    *httptest.Server
	key    string
	answer string

	// ToolName and ToolInput, when set before the first request, make the
	// upstream act as a model that calls that tool once (when a streamed
	// Messages request, or a Gemini request declaring that function,
	// offers it) and then answers with the tool result's text. For Gemini
	// ToolInput is the functionCall's args, a JSON object.
	ToolName, ToolInput string

	mu          sync.Mutex
	requests    []SeenRequest
	toolResults []string
}

// SeenRequest is what one request to a ModelUpstream carried.
type SeenRequest struct {
	Path      string
	Query     string // the raw query
	APIKey    string // x-api-key
	Auth      string // Authorization
	GoogKey   string // x-goog-api-key
	Model     string
	Stream    bool
	UserAgent string
	Tools     []string
	// Messages is how many messages (Anthropic, Chat), input items
	// (Responses) or contents (Gemini) the request carried: a continued session sends the
	// earlier turns again.
	Messages int
}

// NewModelUpstream starts a ModelUpstream that accepts key and answers
// answer; it is closed when t ends.
func NewModelUpstream(t testing.TB, key, answer string) *ModelUpstream {
	f := &ModelUpstream{key: key, answer: answer}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the upstream's base URL (http://127.0.0.1:port).
func (f *ModelUpstream) URL() string { return f.srv.URL }

// Close stops the upstream now (a provider going away mid-test).
func (f *ModelUpstream) Close() { f.srv.Close() }

// Seen returns the requests received so far, in order.
func (f *ModelUpstream) Seen() []SeenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]SeenRequest(nil), f.requests...)
}

// MostMessages is the largest message count (messages, input items or
// contents) of the requests from the before-th on whose path ends in
// path: how much of a conversation the agent resent (a resumed session
// resends the earlier turns).
func (f *ModelUpstream) MostMessages(before int, path string) int {
	most := 0
	for _, s := range f.Seen()[before:] {
		if strings.HasSuffix(s.Path, path) {
			most = max(most, s.Messages)
		}
	}
	return most
}

// ToolResults returns the tool results the agent sent back so far.
func (f *ModelUpstream) ToolResults() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.toolResults...)
}

type toolDecl struct {
	Name string `json:"name"`
}

func (f *ModelUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if strings.HasPrefix(r.URL.Path, "/v1beta/models/") {
		f.serveGemini(w, r, body)
		return
	}
	var req struct {
		Model    string     `json:"model"`
		Stream   bool       `json:"stream"`
		Tools    []toolDecl `json:"tools"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	f.mu.Lock()
	f.requests = append(f.requests, SeenRequest{Path: r.URL.Path, Query: r.URL.RawQuery, GoogKey: r.Header.Get("x-goog-api-key"), APIKey: r.Header.Get("x-api-key"), Auth: r.Header.Get("Authorization"),
		Model: req.Model, Stream: req.Stream, UserAgent: r.Header.Get("User-Agent"), Tools: toolNames(req.Tools),
		Messages: len(req.Messages) + inputItems(body)})
	f.mu.Unlock()
	anthropicKey := r.Header.Get("x-api-key") == f.key
	openaiKey := r.Header.Get("Authorization") == "Bearer "+f.key
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/messages/count_tokens") && anthropicKey:
		WriteJSON(w, map[string]any{"input_tokens": 12})
	case r.URL.Path == "/v1/messages" && anthropicKey && f.ToolName != "" && req.Stream && offers(req.Tools, f.ToolName):
		var last json.RawMessage
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "user" {
			last = req.Messages[n-1].Content
		}
		if res, ok := toolResult(last); ok {
			f.mu.Lock()
			f.toolResults = append(f.toolResults, res)
			f.mu.Unlock()
			AnthropicStream(w, req.Model, "the tool said: "+res)
			return
		}
		f.anthropicToolUse(w, req.Model)
	case r.URL.Path == "/v1/messages" && anthropicKey:
		if req.Stream {
			AnthropicStream(w, req.Model, f.answer)
			return
		}
		WriteJSON(w, map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]any{"type": "text", "text": f.answer}},
			"stop_reason": "end_turn", "usage": map[string]any{"input_tokens": 12, "output_tokens": 7}})
	case r.URL.Path == "/v1/chat/completions" && openaiKey:
		if req.Stream {
			f.openaiStream(w, req.Model)
			return
		}
		WriteJSON(w, map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": f.answer}}},
			"usage":   map[string]any{"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}})
	case r.URL.Path == "/v1/responses" && openaiKey && f.serveResponsesStream(w, body):
	case r.URL.Path == "/v1/responses" && openaiKey:
		WriteJSON(w, map[string]any{"id": "resp_fake", "object": "response", "created_at": time.Now().Unix(), "status": "completed", "model": req.Model,
			"output": []any{map[string]any{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": f.answer, "annotations": []any{}}}}},
			"usage": map[string]any{"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}})
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"fake upstream: wrong key or route"}}`)
	}
}

// WriteJSON answers v as application/json.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// SSE writes one server-sent event (no event line when event is "") and
// flushes it.
func SSE(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// AnthropicStream sends the real Messages event sequence for one text
// answer, the text in a few deltas (one a word).
func AnthropicStream(w http.ResponseWriter, model, answer string) {
	w.Header().Set("Content-Type", "text/event-stream")
	SSE(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake", "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})
	SSE(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	words := strings.SplitAfter(answer, " ")
	for _, wd := range words {
		SSE(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": wd}})
	}
	SSE(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	SSE(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": len(words)}})
	SSE(w, "message_stop", map[string]any{"type": "message_stop"})
}

func toolNames(tools []toolDecl) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func offers(tools []toolDecl, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// toolResult returns the text of the first tool_result block in content.
func toolResult(content json.RawMessage) (string, bool) {
	var blocks []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return "", false
	}
	for _, b := range blocks {
		if b.Type != "tool_result" {
			continue
		}
		var s string
		if json.Unmarshal(b.Content, &s) == nil {
			return s, true
		}
		var parts []struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(b.Content, &parts)
		var sb strings.Builder
		for _, p := range parts {
			sb.WriteString(p.Text)
		}
		return sb.String(), true
	}
	return "", false
}

// anthropicToolUse streams a turn that calls f.ToolName with f.ToolInput.
func (f *ModelUpstream) anthropicToolUse(w http.ResponseWriter, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	SSE(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_tool", "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})
	SSE(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "tool_use", "id": "toolu_e2e1", "name": f.ToolName, "input": map[string]any{}}})
	SSE(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": f.ToolInput}})
	SSE(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	SSE(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 9}})
	SSE(w, "message_stop", map[string]any{"type": "message_stop"})
}

func (f *ModelUpstream) openaiStream(w http.ResponseWriter, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, wd := range strings.SplitAfter(f.answer, " ") {
		SSE(w, "", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": wd}}}})
	}
	SSE(w, "", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Target is a fake egress destination: an HTTP server on loopback that
// answers every request with one body and counts the requests that reached
// it, so a test can observe from outside that a denied crossing never
// arrived.
type Target struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits int
}

// NewTarget starts a Target answering body; it is closed when t ends.
func NewTarget(t testing.TB, body string) *Target {
	g := &Target{}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.hits++
		g.mu.Unlock()
		fmt.Fprint(w, body)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// URL is the target's base URL (http://127.0.0.1:port).
func (g *Target) URL() string { return g.srv.URL }

// Port is the target's loopback port, as a string for configs and URLs.
func (g *Target) Port() string {
	a := g.srv.Listener.Addr().String()
	return a[strings.LastIndexByte(a, ':')+1:]
}

// Hits is how many requests reached the target so far.
func (g *Target) Hits() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(g.hits)
}

// serveGemini answers the Gemini API: the model is the path's, the key is
// x-goog-api-key. A stream is data-only server-sent events whose chunks
// carry candidates[].content.parts[] and usageMetadata, the totals and
// finishReason on the last.
func (f *ModelUpstream) serveGemini(w http.ResponseWriter, r *http.Request, body []byte) {
	rest := strings.TrimPrefix(r.URL.Path, "/v1beta/models/")
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		i = len(rest)
	}
	model, method := rest[:i], strings.TrimPrefix(rest[i:], ":")
	var req struct {
		Contents []struct {
			Role  string           `json:"role"`
			Parts []map[string]any `json:"parts"`
		} `json:"contents"`
		Tools []struct {
			FunctionDeclarations []toolDecl `json:"functionDeclarations"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	var tools []toolDecl
	for _, t := range req.Tools {
		tools = append(tools, t.FunctionDeclarations...)
	}
	stream := method == "streamGenerateContent"
	f.mu.Lock()
	f.requests = append(f.requests, SeenRequest{Path: r.URL.Path, Query: r.URL.RawQuery, APIKey: r.Header.Get("x-api-key"),
		Auth: r.Header.Get("Authorization"), GoogKey: r.Header.Get("x-goog-api-key"), Model: model, Stream: stream,
		UserAgent: r.Header.Get("User-Agent"), Tools: toolNames(tools), Messages: len(req.Contents)})
	f.mu.Unlock()
	if r.Header.Get("x-goog-api-key") != f.key || r.URL.Query().Has("key") || r.Header.Get("Authorization") != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"error":{"code":403,"message":"fake upstream: API key not valid","status":"PERMISSION_DENIED"}}`)
		return
	}
	if method == "countTokens" {
		WriteJSON(w, map[string]any{"totalTokens": 12})
		return
	}
	var parts []any
	answer := f.answer
	var last []map[string]any
	if n := len(req.Contents); n > 0 && req.Contents[n-1].Role == "user" {
		last = req.Contents[n-1].Parts
	}
	if res, ok := geminiToolResult(last); ok && f.ToolName != "" {
		f.mu.Lock()
		f.toolResults = append(f.toolResults, res)
		f.mu.Unlock()
		answer = "the tool said: " + res
	} else if f.ToolName != "" && offers(tools, f.ToolName) {
		var args map[string]any
		_ = json.Unmarshal([]byte(f.ToolInput), &args)
		parts = append(parts, map[string]any{"functionCall": map[string]any{"name": f.ToolName, "args": args}})
	}
	if parts == nil {
		parts = append(parts, map[string]any{"text": answer})
	}
	usage := map[string]any{"promptTokenCount": 12, "candidatesTokenCount": 7, "thoughtsTokenCount": 2, "totalTokenCount": 21}
	if !stream {
		WriteJSON(w, map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts},
			"finishReason": "STOP", "index": 0}}, "usageMetadata": usage, "modelVersion": model})
		return
	}
	if r.URL.Query().Get("alt") != "sse" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":400,"message":"fake upstream: alt=sse only","status":"INVALID_ARGUMENT"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if parts[0].(map[string]any)["text"] != nil {
		for _, wd := range strings.SplitAfter(answer, " ")[:max(0, len(strings.SplitAfter(answer, " "))-1)] {
			SSE(w, "", map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model",
				"parts": []any{map[string]any{"text": wd}}}, "index": 0}},
				"usageMetadata": map[string]any{"promptTokenCount": 12, "totalTokenCount": 12}, "modelVersion": model})
		}
		words := strings.SplitAfter(answer, " ")
		parts = []any{map[string]any{"text": words[len(words)-1]}}
	}
	SSE(w, "", map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts},
		"finishReason": "STOP", "index": 0}}, "usageMetadata": usage, "modelVersion": model})
}

// geminiToolResult returns the output of the first functionResponse part.
func geminiToolResult(parts []map[string]any) (string, bool) {
	for _, p := range parts {
		fr, ok := p["functionResponse"].(map[string]any)
		if !ok {
			continue
		}
		b, _ := json.Marshal(fr["response"])
		return string(b), true
	}
	return "", false
}
