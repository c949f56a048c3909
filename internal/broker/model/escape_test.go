package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/custody"
)

// upperEscaped spells s as a JSON encoder that escapes "-" and "_" in
// upper-case hex would (.NET escapes "+" and HTML characters so).
func upperEscaped(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '-' || r == '_' {
			fmt.Fprintf(&b, `\u%04X`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decodedLeaks reports whether any JSON document in out (the body, or
// each SSE data line) holds secret once its strings are decoded.
func decodedLeaks(out []byte, secret string) bool {
	docs := [][]byte{out}
	for _, line := range bytes.Split(out, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			docs = append(docs, d)
		}
	}
	for _, d := range docs {
		var v any
		if json.Unmarshal(d, &v) != nil {
			continue
		}
		plain, _ := json.Marshal(v)
		if leaks(plain, secret) {
			return true
		}
	}
	return leaks(out, secret)
}

// An upstream that spells the key with JSON escapes in upper-case hex —
// in a buffered answer and in a stream — reached the agent with the key
// intact: the redactor knew four fixed spellings. Observed at the agent's
// end of the broker: the decoded body does not hold the key. Control: the
// upstream's body does (the spelling is what the agent would decode).
func TestEscapedSecretInResponseRedacted(t *testing.T) {
	spelled := upperEscaped(anthropicKey)
	if spelled == anthropicKey || !decodedLeaks([]byte(`{"t":"`+spelled+`"}`), anthropicKey) {
		t.Fatalf("control: %q does not spell the key", spelled)
	}
	buffered := `{"id":"msg_1","type":"message","content":[{"type":"text","text":"key ` + spelled + `"}],"usage":{"input_tokens":1,"output_tokens":2}}`
	sse := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + spelled + "\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, tt := range []struct {
		name, ctype, body string
		stream            bool
	}{
		{"buffered", "application/json", buffered, false},
		{"stream", "text/event-stream", sse, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Content-Type", tt.ctype)
				io.WriteString(w, tt.body)
			})
			s := newSetup(t, up.URL, nil)
			body := `{"model":"claude-x","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
			if tt.stream {
				body = `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
			resp, out := s.post(t, "/v1/messages", body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %q", resp.StatusCode, out)
			}
			if decodedLeaks(out, anthropicKey) || !bytes.Contains(out, []byte(custody.Replacement)) {
				t.Fatalf("the agent got %q, want the key redacted", out)
			}
		})
	}
}
