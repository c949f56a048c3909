package model

import (
	"bytes"
	"encoding/json"
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

// FuzzRequestGuard checks that the guard never panics and that whatever it
// accepts, encoding/json reads the same way: valid JSON, the same model,
// the same stream flag.
func FuzzRequestGuard(f *testing.F) {
	f.Add([]byte(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}],"n":2}`))
	f.Add([]byte(`{"model":"m","mod\u0065l":"x"}`))
	f.Add([]byte(`{"model":"m","messages":[{"content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}`))
	f.Add([]byte(`{"model":"gpt-5","input":[{"content":[{"type":"input_file","file_data":"data:application/pdf;base64,JVBE"}]}],"max_output_tokens":1e2}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		lim := testLimits()
		info, ref := guardRequest(body, &lim)
		if ref != nil {
			if ref.msg == "" || int(ref.kind) >= len(kinds) {
				t.Fatalf("refusal without a message or kind: %+v", ref)
			}
			return
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
	})
}

// FuzzRedactor checks that a secret never survives redaction, however the
// stream is cut, and that the cuts never change the output.
func FuzzRedactor(f *testing.F) {
	f.Add([]byte("data: sk-live-0123456789\n\n"), []byte("sk-live-0123456789"), []byte("0123"), uint16(5), uint16(9))
	f.Add([]byte("aaaaaaaaaa"), []byte("aaa"), []byte("aab"), uint16(1), uint16(2))
	f.Fuzz(func(t *testing.T, in, s1, s2 []byte, cut1, cut2 uint16) {
		m := newMatcher([][]byte{s1, s2})
		i, j := int(cut1)%(len(in)+1), int(cut2)%(len(in)+1)
		if i > j {
			i, j = j, i
		}
		r := redactor{m: m}
		out := r.write(nil, in[:i])
		out = r.write(out, in[i:j])
		out = r.write(out, in[j:])
		out = r.flush(out)
		if whole := m.redactAll(nil, in); !bytes.Equal(out, whole) {
			t.Fatalf("pieces %q != whole %q", out, whole)
		}
		for _, seg := range bytes.Split(out, []byte(redactedMark)) {
			for _, p := range m.pats {
				if bytes.Contains(seg, p) {
					t.Fatalf("secret %q survived in %q", p, out)
				}
			}
		}
	})
}
