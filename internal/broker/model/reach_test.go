package model

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every request member that makes the provider fetch a URL, run something
// on its side, or reach data stored in the route's account is refused with
// a typed reason; the same request without it (the control) is accepted,
// so the member is what the guard refuses. docs/model-broker.md lists them.
func TestProviderReachRefused(t *testing.T) {
	const (
		msgs = 0
		chat = 2
		resp = 3
	)
	img := `data:image/png;base64,iVBO`
	tests := []struct {
		name    string
		ep      int
		refused string // the request with the member
		allowed string // the same request without it
		kind    kind
		inMsg   string
	}{
		// Anthropic Messages.
		{"anthropic image url source", msgs,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://evil.example/i.png"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]}]}`,
			kindForbidden, "remote URL"},
		{"anthropic document url source", msgs,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://evil.example/d.pdf"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"application/pdf","data":"x"}}]}]}`,
			kindForbidden, "remote URL"},
		{"anthropic file source", msgs,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
			kindForbidden, "file"},
		{"anthropic url source in a block of unknown type", msgs,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"audio","source":{"type":"url","url":"https://evil.example/a"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
			kindForbidden, "remote URL"},
		{"anthropic mcp_servers", msgs,
			`{"model":"m","mcp_servers":[{"type":"url","url":"https://evil.example/mcp","name":"x"}],"messages":[]}`,
			`{"model":"m","messages":[]}`, kindForbidden, "MCP"},
		{"anthropic container", msgs, `{"model":"m","container":"container_1","messages":[]}`, `{"model":"m","messages":[]}`, kindForbidden, `"container"`},
		{"anthropic web_fetch tool", msgs,
			`{"model":"m","tools":[{"type":"web_fetch_20250910","name":"web_fetch"}],"messages":[]}`,
			`{"model":"m","tools":[{"name":"web_fetch","input_schema":{"type":"object"}}],"messages":[]}`, kindForbidden, "web_fetch"},
		{"anthropic web_search tool", msgs,
			`{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[]}`,
			`{"model":"m","tools":[{"name":"web_search","input_schema":{"type":"object"}}],"messages":[]}`, kindForbidden, "web_search"},
		{"anthropic code_execution tool", msgs,
			`{"model":"m","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[]}`,
			`{"model":"m","tools":[{"type":"bash_20250124","name":"bash"}],"messages":[]}`, kindForbidden, "code_execution"},
		{"anthropic container_upload", msgs,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_1"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"file_1"}]}]}`, kindForbidden, "file_id"},

		// OpenAI Chat Completions.
		{"chat remote image_url", chat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://evil.example/i.png"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + img + `"}}]}]}`, kindForbidden, "remote URL"},
		{"chat file_id", chat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBE"}}]}]}`, kindForbidden, "file"},
		{"chat file_url", chat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_url":"https://evil.example/d.pdf"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBE"}}]}]}`, kindForbidden, "remote URL"},
		{"chat web_search_options", chat, `{"model":"m","web_search_options":{},"messages":[]}`, `{"model":"m","messages":[]}`, kindForbidden, "web_search_options"},
		{"chat hosted tool", chat, `{"model":"m","tools":[{"type":"web_search"}],"messages":[]}`,
			`{"model":"m","tools":[{"type":"function","function":{"name":"web_search"}}],"messages":[]}`, kindForbidden, "web_search"},

		// OpenAI Responses.
		{"responses remote input_image", resp,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://evil.example/i.png"}]}]}`,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"` + img + `"}]}]}`, kindForbidden, "remote URL"},
		{"responses input_image file_id", resp,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"` + img + `"}]}]}`, kindForbidden, "file"},
		{"responses input_file url", resp,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://evil.example/d.pdf"}]}]}`,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_data":"data:application/pdf;base64,JVBE"}]}]}`, kindForbidden, "remote URL"},
		{"responses input_file file_id", resp,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_data":"data:application/pdf;base64,JVBE"}]}]}`, kindForbidden, "file"},
		{"image_generation mask by url", resp,
			`{"model":"m","input":"hi","tools":[{"type":"image_generation","input_image_mask":{"image_url":"https://evil.example/m.png"}}]}`,
			`{"model":"m","input":"hi","tools":[{"type":"image_generation","input_image_mask":{"image_url":"` + img + `"}}]}`, kindForbidden, "remote URL"},
		{"image_generation mask by file", resp,
			`{"model":"m","input":"hi","tools":[{"type":"image_generation","input_image_mask":{"file_id":"file-1"}}]}`,
			`{"model":"m","input":"hi","tools":[{"type":"image_generation"}]}`, kindForbidden, "file"},
		{"image_url anywhere", resp,
			`{"model":"m","input":"hi","text":{"format":{"type":"text"},"x":{"image_url":{"url":"http://evil.example/"}}}}`,
			`{"model":"m","input":"hi","text":{"format":{"type":"text"}}}`, kindForbidden, "remote URL"},
		{"file_url anywhere", resp, `{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x","file_url":"https://evil.example/"}]}]}`,
			`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]}]}`, kindForbidden, "remote URL"},
		{"screenshot by url", resp,
			`{"model":"m","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","image_url":"https://evil.example/s.png"}}]}`,
			`{"model":"m","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","image_url":"` + img + `"}}]}`, kindForbidden, "remote URL"},
		{"hosted shell container_auto", resp,
			`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_auto"}}]}`,
			`{"model":"m","input":"hi","tools":[{"type":"shell"}]}`, kindForbidden, "container_auto"},
		{"hosted shell container_reference", resp,
			`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_1"}}]}`,
			`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"local"}}]}`, kindForbidden, "container_reference"},
		{"hosted shell environment without type", resp,
			`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":["local"]}}]}`,
			`{"model":"m","input":"hi","tools":[{"type":"shell","environment":null}]}`, kindForbidden, "environment"},
		{"remote mcp tool", resp, `{"model":"m","input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.example/mcp"}]}`,
			`{"model":"m","input":"hi","tools":[{"type":"function","name":"mcp"}]}`, kindForbidden, "MCP"},
		{"server_url anywhere", resp, `{"model":"m","input":"hi","metadata":{"x":{"server_url":"https://evil.example/mcp"}}}`,
			`{"model":"m","input":"hi","metadata":{"x":"y"}}`, kindForbidden, "MCP"},
		{"mcp connector", resp, `{"model":"m","input":"hi","tools":[{"type":"mcp","server_label":"g","connector_id":"connector_gmail"}]}`,
			`{"model":"m","input":"hi"}`, kindForbidden, `"mcp"`},
		{"file_search", resp, `{"model":"m","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, `{"model":"m","input":"hi"}`, kindForbidden, "file_search"},
		{"code_interpreter", resp, `{"model":"m","input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, `{"model":"m","input":"hi"}`, kindForbidden, "code_interpreter"},
		{"web_search", resp, `{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`, `{"model":"m","input":"hi"}`, kindForbidden, "web_search"},
		{"previous_response_id", resp, `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, `{"model":"m","input":"hi","previous_response_id":null}`, kindForbidden, "previous_response_id"},
		{"conversation", resp, `{"model":"m","input":"hi","conversation":"conv_1"}`, `{"model":"m","input":"hi","conversation":null}`, kindForbidden, "conversation"},
		{"stored prompt", resp, `{"model":"m","prompt":{"id":"pmpt_1"}}`, `{"model":"m","input":"hi"}`, kindForbidden, "prompt"},
		{"item_reference", resp, `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`,
			`{"model":"m","input":[{"type":"message","role":"user","content":"hi"}]}`, kindForbidden, "item references"},
		{"background", resp, `{"model":"m","input":"hi","background":true}`, `{"model":"m","input":"hi","background":false}`, kindForbidden, "background"},
		// OpenAI-compatible upstreams (a route's upstream is any URL:
		// vLLM, gateways) fetch more members than OpenAI's own schema
		// names: any "url" or "*_url" member that is not a data: URL.
		{"video_url object (compatible upstreams)", chat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"https://evil.example/v.mp4"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"data:video/mp4;base64,AAAA"}}]}]}`,
			kindForbidden, "remote URL"},
		{"audio_url string (compatible upstreams)", chat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"audio_url","audio_url":"https://evil.example/a.mp3"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"https://evil.example/a.mp3"}]}]}`,
			kindForbidden, "remote URL"},
		{"document_url string (compatible upstreams)", chat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"document_url","document_url":"HTTPS://evil.example/d.pdf"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"document_url","document_url":"data:application/pdf;base64,AAAA"}]}]}`,
			kindForbidden, "remote URL"},
		{"url in an object of any type", resp,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_video","video":{"url":"https://evil.example/v"}}]}]}`,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"https://evil.example/v"}]}]}`,
			kindForbidden, "remote URL"},
		{"computer_call_output current_url is not fetched", resp,
			`{"model":"m","input":[{"type":"computer_call_output","call_id":"c","current_url":"https://example.com/","output":{"type":"computer_screenshot","image_url":"https://evil.example/s.png"}}]}`,
			`{"model":"m","input":[{"type":"computer_call_output","call_id":"c","current_url":"https://example.com/","output":{"type":"computer_screenshot","image_url":"` + img + `"}}]}`,
			kindForbidden, "remote URL"},
		// One inline member must not vouch for the others of its object.
		{"file_url beside an inline image_url", resp,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"` + img + `","file_url":"https://evil.example/f"}]}]}`,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"` + img + `"}]}]}`,
			kindForbidden, "remote URL"},
		{"video_url beside an inline image_url", chat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"x","image_url":"` + img + `","video_url":"https://evil.example/v"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"x","image_url":"` + img + `"}]}]}`,
			kindForbidden, "remote URL"},
		{"source url beside an inline image_url", msgs,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"y","image_url":"` + img + `","source":{"type":"url","url":"https://evil.example/d"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"y","image_url":"` + img + `"}]}]}`,
			kindForbidden, "remote URL"},
		{"vector store file ids", resp, `{"model":"m","input":"hi","tool_resources":{"file_ids":["file-1"]}}`, `{"model":"m","input":"hi"}`, kindForbidden, "file_id"},
	}
	lim := testLimits()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, b := range []string{tt.refused, tt.allowed} {
				if !json.Valid([]byte(b)) {
					t.Fatalf("test body is not JSON: %s", b)
				}
			}
			_, ref := guardRequest([]byte(tt.refused), &lim, &endpoints[tt.ep])
			if ref == nil || ref.kind != tt.kind || !strings.Contains(ref.msg, tt.inMsg) {
				t.Errorf("guardRequest(%s) = %v, want kind %d naming %q", tt.refused, ref, tt.kind, tt.inMsg)
			}
			if _, ref := guardRequest([]byte(tt.allowed), &lim, &endpoints[tt.ep]); ref != nil {
				t.Errorf("control guardRequest(%s) refused: %v", tt.allowed, ref)
			}
		})
	}
}

// A tool call's arguments are the model's own output, echoed back in the
// history: URLs there are data, not references the provider resolves.
func TestToolCallInputURLsPass(t *testing.T) {
	lim := testLimits()
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"fetch","input":{"source":{"type":"url","url":"https://x/"},"image_url":"https://x/i.png"}}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"x","input":{"file_url":"https://x/"}}]}]}`,
	} {
		if _, ref := guardRequest([]byte(body), &lim, &endpoints[0]); ref != nil {
			t.Errorf("guardRequest(%s) refused: %v", body, ref)
		}
	}
	// The same members under "input" of an object that is not a tool
	// call are still refused.
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x","input":{"image_url":"https://x/i.png"}}]}]}`
	if _, ref := guardRequest([]byte(body), &lim, &endpoints[0]); ref == nil || ref.kind != kindForbidden {
		t.Errorf("guardRequest(%s) = %v, want refused", body, ref)
	}
	// A tool call's dropped reference does not stand in for the real one.
	body = `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x","input":[` +
		`{"type":"tool_use","input":{"image_url":"https://x/i.png"}},{"server_url":"https://x/mcp"}]}]}]}`
	if _, ref := guardRequest([]byte(body), &lim, &endpoints[0]); ref == nil || !strings.Contains(ref.msg, "MCP") {
		t.Errorf("guardRequest(%s) = %v, want the MCP refusal", body, ref)
	}
}
