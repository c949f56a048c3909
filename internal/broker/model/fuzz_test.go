package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzSSEParser feeds arbitrary upstream bytes, in arbitrary pieces, to the
// parser and to every API's event inspector: no panic, events are exactly
// the input's bytes in order, and the chunking never changes the events.
func FuzzSSEParser(f *testing.F) {
	for _, e := range anthropicStream {
		f.Add([]byte(e), uint16(3))
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"x\"}}]}}],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n"), uint16(1))
	f.Add([]byte("event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":2}}}\r\n\r\n"), uint16(5))
	f.Add([]byte("data: a\rdata: b\r\r: c\n\n"), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, step uint16) {
		whole, werr := fuzzParse(t, data, 0)
		pieces, perr := fuzzParse(t, data, int(step%64)+1)
		if werr == nil && perr == nil {
			if diff := cmp.Diff(whole, pieces); diff != "" {
				t.Fatalf("chunking changed the events (-whole +pieces):\n%s", diff)
			}
		}
	})
}

func fuzzParse(t *testing.T, data []byte, step int) ([]gotEvent, error) {
	var p sseParser
	var raw []byte
	var got []gotEvent
	xs := []*exchange{
		{ep: &endpoints[0], api: apiAnthropic},
		{ep: &endpoints[2], api: apiOpenAI},
		{ep: &endpoints[3], api: apiOpenAI},
		{ep: &endpoints[5], api: apiGemini},
	}
	emit := func(ev *sseEvent) error {
		if len(ev.raw) > maxSSEEvent || len(ev.data) > len(ev.raw) {
			t.Fatalf("event bounds: raw %d data %d", len(ev.raw), len(ev.data))
		}
		raw = append(raw, ev.raw...)
		got = append(got, gotEvent{string(ev.name), string(ev.data), string(ev.raw)})
		for _, x := range xs {
			_ = x.inspectEvent(ev)
		}
		return nil
	}
	if step == 0 {
		step = len(data) + 1
	}
	var err error
	for i := 0; i < len(data) && err == nil; i += step {
		err = p.feed(data[i:min(i+step, len(data))], emit)
	}
	if err == nil {
		err = p.finish(emit)
	}
	if !bytes.HasPrefix(data, raw) || err == nil && !bytes.Equal(raw, data) {
		t.Fatalf("events are not the input: %q of %q (err %v)", raw, data, err)
	}
	return got, err
}

// FuzzRequestGuard checks, for every endpoint, that the guard never panics
// and that whatever it accepts, encoding/json reads the same way: valid
// JSON, the same model, the same stream flag. For what it accepts it also
// checks the broker's only edit, the output cap: the forwarded body is
// valid JSON that says exactly what the agent's said plus the cap (and
// usage reporting), the guard accepts it too, and finds nothing left to
// set.
func FuzzRequestGuard(f *testing.F) {
	f.Add([]byte(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}],"n":2}`))
	f.Add([]byte(`{"model":"m","mod\u0065l":"x"}`))
	f.Add([]byte(`{"model":"m","messages":[{"content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}`))
	f.Add([]byte(`{"model":"gpt-5","input":[{"content":[{"type":"input_file","file_data":"data:application/pdf;base64,JVBE"}]}],"max_output_tokens":1e2}`))
	f.Add([]byte(` {"stream":true,"model":"gpt-4o","max_completion_tokens":null,"stream_options":null}`))
	f.Add([]byte(`{"model":"m","tools":[{"type":"web_fetch_20250910","name":"web_fetch"},{"type":"function","name":"f"}],"tool_choice":{"type":"web_search_preview"}}`))
	f.Add([]byte(`{"model":"m","input":"hi","tools":[{"type":"image_generation","input_image_mask":{"image_url":"https://x/m.png"}}]}`))
	f.Add([]byte(`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_auto"}}],"background":true}`))
	f.Add([]byte(`{"model":"m","messages":[{"content":[{"type":"tool_use","input":{"image_url":"https://x/"}},{"type":"text","input":{"file_url":"https://x/"}}]}]}`))
	f.Add([]byte(`{"model":"m","input":"hi","tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"},{"type":"custom","name":"c"}]}]}`))
	f.Add([]byte(`{"model":"m","input":"hi","tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"}],"t\u006fols":[{"type":"web_search"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		lim := testLimits()
		for i := range endpoints {
			ep := &endpoints[i]
			if ep.api == apiGemini {
				continue // FuzzGeminiGuard: the model is in the path
			}
			info, ref := guardRequest(body, &lim, ep)
			if ref != nil {
				if ref.msg == "" || int(ref.kind) >= len(kinds) {
					t.Fatalf("refusal without a message or kind: %+v", ref)
				}
				continue
			}
			if !json.Valid(body) {
				t.Fatalf("guard accepted invalid JSON %q", body)
			}
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatalf("guard accepted %q, encoding/json: %v", body, err)
			}
			if got, _ := m["model"].(string); got != string(info.model) {
				t.Fatalf("guard read model %q, encoding/json %q", info.model, got)
			}
			if got, _ := m["stream"].(bool); got != info.stream {
				t.Fatalf("guard read stream %v, encoding/json %v", info.stream, got)
			}
			if info.attachments > lim.MaxAttachments {
				t.Fatalf("accepted %d attachments", info.attachments)
			}
			if ref := providerReference(m, false); ref != "" {
				t.Fatalf("%s: guard accepted %q, which holds %s", ep.path, body, ref)
			}
			if tool := hostedTool(m, ep); tool != "" {
				t.Fatalf("%s: guard accepted %q, which declares %s", ep.path, body, tool)
			}
			checkCapEdits(t, body, m, &info, ep)
		}
	})
}

// hostedTool is the fuzz oracle for the tool rule on the OpenAI
// endpoints, over encoding/json's reading: it names a declared tool whose
// type the endpoint does not admit, or a Responses namespace that holds
// anything but function and custom tools, or returns "".
func hostedTool(m map[string]any, ep *endpoint) string {
	if ep.api != apiOpenAI {
		return ""
	}
	allowed := chatTools
	if ep.resp {
		allowed = responsesTools
	}
	tools, _ := m["tools"].([]any)
	for _, t := range tools {
		o, _ := t.(map[string]any)
		typ, _ := o["type"].(string)
		if ep.resp && typ == "namespace" {
			nested, _ := o["tools"].([]any)
			for _, n := range nested {
				no, _ := n.(map[string]any)
				if nt, _ := no["type"].(string); nt != "function" && nt != "custom" {
					return fmt.Sprintf("a namespace holding a tool of type %q", nt)
				}
			}
			continue
		}
		if !slices.Contains(allowed, typ) {
			return fmt.Sprintf("a tool of type %q", typ)
		}
	}
	return ""
}

// providerReference is the fuzz oracle for the fetch rule, written
// independently over encoding/json's reading: it names a member of v that
// would make the provider fetch a URL or resolve a stored reference
// (docs/model-broker.md), or returns "". JSON Schemas and tool calls'
// arguments are data, not references.
func providerReference(v any, opaque bool) string {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			if r := providerReference(e, opaque); r != "" {
				return r
			}
		}
	case map[string]any:
		typ, _ := v["type"].(string)
		for k, e := range v {
			inner := opaque
			switch k {
			case "input_schema", "parameters", "schema":
				inner = true
			case "input":
				if typ == "tool_use" || typ == "server_tool_use" || typ == "mcp_tool_use" {
					inner = true
				}
			}
			if !opaque {
				switch k {
				case "image_url":
					u, _ := e.(string)
					if o, ok := e.(map[string]any); ok {
						u, _ = o["url"].(string)
					}
					if strings.HasPrefix(strings.ToLower(u), "http") {
						return "a remote image_url"
					}
				case "file_url", "server_url":
					return k
				case "current_url":
				default:
					// Any other URL-named member (OpenAI-compatible
					// upstreams fetch video_url, audio_url, an object's
					// url, …) holding a remote URL.
					if k == "url" || strings.HasSuffix(k, "_url") {
						if u, _ := e.(string); strings.HasPrefix(strings.ToLower(u), "http") {
							return "a remote " + k
						}
					}
				case "file_id", "file_ids":
					if e != nil && !inner {
						return k
					}
				case "source":
					if o, ok := e.(map[string]any); ok && (o["type"] == "url" || o["type"] == "file") {
						return "a source of type " + fmt.Sprint(o["type"])
					}
				case "mcp_servers", "container", "previous_response_id", "conversation", "web_search_options":
					if e != nil {
						return k
					}
				case "background":
					if e == true {
						return k
					}
				}
			}
			if r := providerReference(e, inner); r != "" {
				return r
			}
		}
	}
	return ""
}

// checkCapEdits applies the broker's output-cap edits to an accepted body
// and checks the result.
func checkCapEdits(t *testing.T, body []byte, orig map[string]any, info *reqInfo, ep *endpoint) {
	t.Helper()
	const capN = 4096
	plan := capEdits(info, ep, capN)
	fwd := bytes.Join(plan.segments(body, nil), nil)
	if len(fwd) != len(body)+plan.grow() {
		t.Fatalf("forwarded %d bytes, want %d", len(fwd), len(body)+plan.grow())
	}
	if plan.n == 0 {
		if !bytes.Equal(fwd, body) {
			t.Fatalf("no edit, but the body changed: %q", fwd)
		}
		return
	}
	var got map[string]any
	if err := json.Unmarshal(fwd, &got); err != nil || !json.Valid(fwd) {
		t.Fatalf("%s: forwarded body %q is not JSON: %v", ep.path, fwd, err)
	}
	want := maps.Clone(orig)
	if plan.cap > 0 {
		member := "max_completion_tokens"
		if ep.resp {
			member = "max_output_tokens"
		}
		want[member] = float64(capN)
	}
	if plan.usage {
		want["stream_options"] = map[string]any{"include_usage": true}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: forwarded %q of %q (-want +got):\n%s", ep.path, fwd, body, diff)
	}
	lim := testLimits()
	again, ref := guardRequest(fwd, &lim, ep)
	if ref != nil {
		t.Fatalf("%s: the guard refuses the forwarded %q: %v", ep.path, fwd, ref)
	}
	if p := capEdits(&again, ep, capN); p.n != 0 {
		t.Fatalf("%s: forwarded %q still lacks a cap or usage: %+v", ep.path, fwd, p)
	}
}
