package e2e

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

// fakeUpstream is a loopback stand-in for the model providers. It speaks
// real Anthropic Messages (JSON and SSE) and OpenAI Chat Completions and
// Responses, and records what each request carried, so tests can check
// that the real key arrived and the agent's placeholder did not.
type fakeUpstream struct {
	srv    *httptest.Server
	key    string // the custodied key the broker must inject
	answer string

	// toolName and toolInput, when set, make the upstream act as a model
	// that calls that tool once (when the request offers it) and then
	// answers with the tool result's text.
	toolName, toolInput string

	mu          sync.Mutex
	requests    []seenRequest
	toolResults []string
}

type seenRequest struct {
	Path      string
	APIKey    string // x-api-key
	Auth      string // Authorization
	Model     string
	Stream    bool
	UserAgent string
	Tools     []string
}

func newFakeUpstream(t *testing.T, key, answer string) *fakeUpstream {
	f := &fakeUpstream{key: key, answer: answer}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeUpstream) seen() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.requests...)
}

func (f *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
		Tools  []struct {
			Name string `json:"name"`
		} `json:"tools"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	f.mu.Lock()
	f.requests = append(f.requests, seenRequest{Path: r.URL.Path, APIKey: r.Header.Get("x-api-key"), Auth: r.Header.Get("Authorization"),
		Model: req.Model, Stream: req.Stream, UserAgent: r.Header.Get("User-Agent"), Tools: toolNames(req.Tools)})
	f.mu.Unlock()
	anthropicKey := r.Header.Get("x-api-key") == f.key
	openaiKey := r.Header.Get("Authorization") == "Bearer "+f.key
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/messages/count_tokens") && anthropicKey:
		writeJSON(w, map[string]any{"input_tokens": 12})
	case r.URL.Path == "/v1/messages" && anthropicKey && f.toolName != "" && req.Stream && offers(req.Tools, f.toolName):
		var last json.RawMessage
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "user" {
			last = req.Messages[n-1].Content
		}
		if res, ok := toolResult(last); ok {
			f.mu.Lock()
			f.toolResults = append(f.toolResults, res)
			f.mu.Unlock()
			f.anthropicStreamText(w, req.Model, "the tool said: "+res)
			return
		}
		f.anthropicToolUse(w, req.Model)
	case r.URL.Path == "/v1/messages" && anthropicKey:
		if req.Stream {
			f.anthropicStream(w, req.Model)
			return
		}
		writeJSON(w, map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]any{"type": "text", "text": f.answer}},
			"stop_reason": "end_turn", "usage": map[string]any{"input_tokens": 12, "output_tokens": 7}})
	case r.URL.Path == "/v1/chat/completions" && openaiKey:
		if req.Stream {
			f.openaiStream(w, req.Model)
			return
		}
		writeJSON(w, map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": f.answer}}},
			"usage":   map[string]any{"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}})
	case r.URL.Path == "/v1/responses" && openaiKey:
		writeJSON(w, map[string]any{"id": "resp_fake", "object": "response", "created_at": time.Now().Unix(), "status": "completed", "model": req.Model,
			"output": []any{map[string]any{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": f.answer, "annotations": []any{}}}}},
			"usage": map[string]any{"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}})
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"fake upstream: wrong key or route"}}`)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func sse(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// anthropicStream sends the real Messages event sequence, the text in
// a few deltas.
func (f *fakeUpstream) anthropicStream(w http.ResponseWriter, model string) {
	f.anthropicStreamText(w, model, f.answer)
}

func toolNames(tools []struct {
	Name string `json:"name"`
}) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func offers(tools []struct {
	Name string `json:"name"`
}, name string) bool {
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

// anthropicToolUse streams a turn that calls f.toolName with f.toolInput.
func (f *fakeUpstream) anthropicToolUse(w http.ResponseWriter, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_tool", "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "tool_use", "id": "toolu_e2e1", "name": f.toolName, "input": map[string]any{}}})
	sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": f.toolInput}})
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 9}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

func (f *fakeUpstream) anthropicStreamText(w http.ResponseWriter, model, answer string) {
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake", "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	words := strings.SplitAfter(answer, " ")
	for _, wd := range words {
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": wd}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": len(words)}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

func (f *fakeUpstream) openaiStream(w http.ResponseWriter, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, wd := range strings.SplitAfter(f.answer, " ") {
		sse(w, "", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": wd}}}})
	}
	sse(w, "", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}
