package testkit

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// inputItems counts the items of a Responses request's "input" (0 for a
// string input or another API).
func inputItems(body []byte) int {
	var req struct {
		Input json.RawMessage `json:"input"`
	}
	var items []json.RawMessage
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(req.Input, &items) != nil {
		return 0
	}
	return len(items)
}

// responsesRequest is what the Responses fake reads of a request.
type responsesRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	Tools  []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
	Input []struct {
		Type   string          `json:"type"`
		Output json.RawMessage `json:"output"`
	} `json:"input"`
}

// serveResponsesStream answers a streamed OpenAI Responses request the
// way Codex CLI needs it: when ToolName is set and offered and no tool
// output came back yet, one function_call of ToolName with ToolInput;
// after the output came back, "the tool said: OUTPUT"; else the answer.
// It reports whether it answered (false: not a streamed request).
func (f *ModelUpstream) serveResponsesStream(w http.ResponseWriter, body []byte) bool {
	var req responsesRequest
	if json.Unmarshal(body, &req) != nil || !req.Stream {
		return false
	}
	offered := false
	for _, t := range req.Tools {
		offered = offered || t.Name == f.ToolName
	}
	var output string
	var got bool
	for _, in := range req.Input {
		if in.Type == "function_call_output" {
			got = true
			var s string
			if json.Unmarshal(in.Output, &s) != nil {
				s = string(in.Output)
			}
			output = s
		}
	}
	switch {
	case got:
		f.mu.Lock()
		f.toolResults = append(f.toolResults, output)
		f.mu.Unlock()
		ResponsesTextStream(w, req.Model, "the tool said: "+strings.TrimSpace(output))
	case f.ToolName != "" && offered:
		ResponsesCallStream(w, req.Model, f.ToolName, f.ToolInput)
	default:
		ResponsesTextStream(w, req.Model, f.answer)
	}
	return true
}

func responsesHead(w http.ResponseWriter, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	SSE(w, "response.created", map[string]any{"type": "response.created", "response": map[string]any{
		"id": "resp_fake", "object": "response", "created_at": time.Now().Unix(), "status": "in_progress", "model": model, "output": []any{}}})
}

func responsesDone(w http.ResponseWriter, model string, item map[string]any) {
	SSE(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	SSE(w, "response.completed", map[string]any{"type": "response.completed", "response": map[string]any{
		"id": "resp_fake", "object": "response", "created_at": time.Now().Unix(), "status": "completed", "model": model,
		"output": []any{item}, "usage": map[string]any{"input_tokens": 12, "output_tokens": 7, "total_tokens": 19,
			"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}}})
}

// ResponsesTextStream sends a streamed Responses turn that answers text.
func ResponsesTextStream(w http.ResponseWriter, model, text string) {
	responsesHead(w, model)
	for _, wd := range strings.SplitAfter(text, " ") {
		SSE(w, "response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": wd})
	}
	responsesDone(w, model, map[string]any{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
}

// ResponsesCallStream sends a streamed Responses turn that calls the
// function name with the JSON arguments args.
func ResponsesCallStream(w http.ResponseWriter, model, name, args string) {
	responsesHead(w, model)
	responsesDone(w, model, map[string]any{"type": "function_call", "id": "fc_1", "call_id": "call_e2e1", "status": "completed",
		"name": name, "arguments": args})
}
