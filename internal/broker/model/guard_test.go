package model

import (
	"strings"
	"testing"
)

func TestGuardRequest(t *testing.T) {
	lim := testLimits()
	tests := []struct {
		name     string
		body     string
		kind     kind // checked when refused
		refused  bool
		model    string
		stream   bool
		maxOut   int64
		attached int
	}{
		{name: "minimal", body: `{"model":"claude-x"}`, model: "claude-x", maxOut: -1},
		{name: "escaped model", body: `{"model":"claude-\u0078","max_tokens":1e3}`, model: "claude-x", maxOut: 1000},
		{name: "largest output limit", body: `{"model":"m","max_tokens":10,"max_completion_tokens":20}`, model: "m", maxOut: 20},
		{name: "stream", body: ` {"stream":true,"model":"m"} `, model: "m", stream: true, maxOut: -1},
		{name: "null stream", body: `{"stream":null,"model":"m"}`, model: "m", maxOut: -1},
		{name: "anthropic image", body: `{"model":"m","messages":[{"content":[{"type":"image","source":{"type":"base64","media_type":"IMAGE/PNG","data":"iVBO"}}]}]}`, model: "m", maxOut: -1, attached: 1},
		{name: "text document", body: `{"model":"m","messages":[{"content":[{"type":"document","source":{"type":"text","media_type":"application/pdf","data":"hi"}}]}]}`, model: "m", maxOut: -1, attached: 1},
		{name: "openai data url", body: `{"model":"m","messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/"}}]}]}`, model: "m", maxOut: -1, attached: 1},
		{name: "escaped data url", body: `{"model":"m","input":[{"content":[{"type":"input_image","image_url":"data:image\/png;base64,AAAA"}]}]}`, model: "m", maxOut: -1, attached: 1},
		{name: "chat file", body: `{"model":"m","messages":[{"content":[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBE"}}]}]}`, model: "m", maxOut: -1, attached: 1},
		{name: "json schema type array", body: `{"model":"m","tools":[{"input_schema":{"type":["string","null"],"properties":{"type":{"type":"string"}}}}]}`, model: "m", maxOut: -1},
		{name: "tool input mentioning image", body: `{"model":"m","messages":[{"content":[{"type":"tool_use","input":{"type":"image"}}]}]}`, model: "m", maxOut: -1},

		{name: "audio format not allowed", body: `{"model":"m","messages":[{"content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`, refused: true, kind: kindInvalid},
		{name: "bare base64 file", body: `{"model":"m","input":[{"content":[{"type":"input_file","file_data":"JVBE"}]}]}`, refused: true, kind: kindInvalid},
		{name: "file url", body: `{"model":"m","input":[{"content":[{"type":"input_file","file_url":"https://x/y.pdf"}]}]}`, refused: true, kind: kindForbidden},
		{name: "input_image file id", body: `{"model":"m","input":[{"content":[{"type":"input_image","file_id":"file-1"}]}]}`, refused: true, kind: kindForbidden},
		{name: "ftp url", body: `{"model":"m","messages":[{"content":[{"type":"image_url","image_url":{"url":"ftp://x"}}]}]}`, refused: true, kind: kindInvalid},
		{name: "unknown source", body: `{"model":"m","messages":[{"content":[{"type":"image","source":{"type":"s3"}}]}]}`, refused: true, kind: kindInvalid},
		{name: "duplicate type in block", body: `{"model":"m","messages":[{"content":[{"type":"text","type":"image","source":{"type":"url","url":"https://x"}}]}]}`, refused: true, kind: kindInvalid},
		{name: "duplicate max_tokens", body: `{"model":"m","max_tokens":1,"max_tokens":100000}`, refused: true, kind: kindInvalid},
		{name: "n too large", body: `{"model":"m","n":1000}`, refused: true, kind: kindInvalid},
		{name: "fractional max_tokens", body: `{"model":"m","max_tokens":1.5}`, refused: true, kind: kindInvalid},
		{name: "empty model", body: `{"model":""}`, refused: true, kind: kindInvalid},
		{name: "invalid utf8 model", body: "{\"model\":\"\xff\"}", refused: true, kind: kindInvalid},
		{name: "raw control in string", body: "{\"model\":\"m\",\"x\":\"a\x01\"}", refused: true, kind: kindInvalid},
		{name: "bad escape", body: `{"model":"m","x":"\q"}`, refused: true, kind: kindInvalid},
		{name: "too deep", body: `{"model":"m","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, refused: true, kind: kindInvalid},
		{name: "leading zero", body: `{"model":"m","x":01}`, refused: true, kind: kindInvalid},
		{name: "empty", body: ``, refused: true, kind: kindInvalid},
	}
	for _, tt := range tests {
		info, ref := guardRequest([]byte(tt.body), &lim, &endpoints[0])
		if tt.refused {
			if ref == nil || ref.kind != tt.kind {
				t.Errorf("%s: guardRequest(%q) = %v, want refusal kind %d", tt.name, tt.body, ref, tt.kind)
			}
			continue
		}
		if ref != nil {
			t.Errorf("%s: guardRequest(%q) refused: %v", tt.name, tt.body, ref)
			continue
		}
		if string(info.model) != tt.model || info.stream != tt.stream || info.maxOut != tt.maxOut || info.attachments != tt.attached {
			t.Errorf("%s: guardRequest = %+v, want model %q stream %v maxOut %d attachments %d", tt.name, info, tt.model, tt.stream, tt.maxOut, tt.attached)
		}
	}
}

func TestHasControl(t *testing.T) {
	for n := 0; n < 40; n++ {
		for pos := -1; pos < n; pos++ {
			for _, c := range []byte{0x00, 0x1f, 0x20, 0x7f, 0x80, 0xff} {
				b := []byte(strings.Repeat("a", n))
				want := false
				if pos >= 0 {
					b[pos] = c
					want = c < 0x20
				}
				if got := hasControl(b); got != want {
					t.Fatalf("hasControl(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}

func TestUintValue(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "1e3": 1000, "2.0": 2, "-1": -1, "1.5": -1, "1e300": -1, "9007199254740993": -1} {
		n, ok := uintValue([]byte(in))
		if !ok {
			n = -1
		}
		if n != want {
			t.Errorf("uintValue(%s) = %d, want %d", in, n, want)
		}
	}
}
