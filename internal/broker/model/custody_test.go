package model

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/custody"
)

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// leaks reports whether b, or b decompressed, holds the secret in any
// letter case.
func leaks(b []byte, secret string) bool {
	low := strings.ToLower(secret)
	if bytes.Contains(bytes.ToLower(b), []byte(low)) {
		return true
	}
	if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
		plain, _ := io.ReadAll(zr)
		return bytes.Contains(bytes.ToLower(plain), []byte(low))
	}
	return false
}

// An upstream that answers with a compressed body the broker did not ask
// for (it asks for identity) is refused: neither the compressed bytes nor
// the secret inside them reach the agent, whatever the status and content
// type, and the call is receipted with the reason. The control: the same
// answer in identity encoding is relayed, with the secret redacted.
func TestCompressedResponseRefused(t *testing.T) {
	secretBody := `{"id":"msg_1","type":"message","content":[{"type":"text","text":"key ` + anthropicKey + `"}],"usage":{"input_tokens":1,"output_tokens":2}}`
	errBody := `{"type":"error","error":{"type":"invalid_request_error","message":"bad key ` + anthropicKey + `"}}`
	sse := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + anthropicKey + "\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	tests := []struct {
		name, encoding, ctype, body string
		status                      int
		stream                      bool
		charged                     bool // the whole reservation is settled
	}{
		{"json 200 gzip", "gzip", "application/json", secretBody, 200, false, true},
		{"error 400 gzip", "gzip", "application/json", errBody, 400, false, false},
		{"stream gzip", "gzip", "text/event-stream", sse, 200, true, true},
		{"upper case", "GZIP", "application/json", secretBody, 200, false, true},
		{"list", "identity, gzip", "application/json", errBody, 500, false, false},
		{"br", "br", "application/json", secretBody, 200, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Content-Type", tt.ctype)
				w.Header().Set("Content-Encoding", tt.encoding)
				w.WriteHeader(tt.status)
				w.Write(gzipped(t, tt.body))
			})
			s := newSetup(t, up.URL, nil)
			body := `{"model":"claude-x","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
			if tt.stream {
				body = `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
			// The agent's own client asks for gzip and would decode it.
			resp, out := s.post(t, "/v1/messages", body)
			if seen.count() != 1 || seen.requests[0].Header.Get("Accept-Encoding") != "identity" {
				t.Fatalf("upstream requests %d, Accept-Encoding %q; want one asking for identity", seen.count(), seen.requests[0].Header.Get("Accept-Encoding"))
			}
			if resp.StatusCode != 502 {
				t.Errorf("status %d, want 502: %q", resp.StatusCode, out)
			}
			if leaks(out, anthropicKey) || bytes.Contains(out, gzipped(t, tt.body)[:10]) {
				t.Fatalf("the agent got the upstream's body: %q", out)
			}
			for k, vs := range resp.Header {
				if leaks([]byte(k+strings.Join(vs, "")), anthropicKey) {
					t.Fatalf("header %s: %q leaks the secret", k, vs)
				}
			}
			e := decodeError(t, out)
			if !strings.Contains(e.Error.Message, "compressed") {
				t.Errorf("error %s does not say why", out)
			}
			rc := s.authority.lastReceipt(t)
			if rc.Decision != crossing.Allow || !strings.Contains(rc.Reason, "upstream response encoding refused") || rc.UpstreamCode != tt.status {
				t.Errorf("receipt %q %q %d, want the refusal reason and status %d", rc.Decision, rc.Reason, rc.UpstreamCode, tt.status)
			}
			if n := s.authority.openReservations(); n != 0 {
				t.Errorf("%d reservations left open", n)
			}
			s.authority.mu.Lock()
			settled := s.authority.settled[len(s.authority.settled)-1]
			s.authority.mu.Unlock()
			if got := settled.OutputTokens == 100; got != tt.charged {
				t.Errorf("settled %+v, want the reservation charged: %v", settled, tt.charged)
			}
		})
	}

	t.Run("control: identity is relayed, redacted", func(t *testing.T) {
		for _, enc := range []string{"", "identity"} {
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Content-Type", "application/json")
				if enc != "" {
					w.Header().Set("Content-Encoding", enc)
				}
				io.WriteString(w, secretBody)
			})
			s := newSetup(t, up.URL, nil)
			resp, out := s.post(t, "/v1/messages", `{"model":"claude-x","max_tokens":100,"messages":[]}`)
			if resp.StatusCode != 200 || !bytes.Contains(out, []byte("key "+custody.Replacement)) || leaks(out, anthropicKey) {
				t.Errorf("encoding %q: status %d body %q, want the body with the secret redacted", enc, resp.StatusCode, out)
			}
		}
	})
}

// Transfer codings other than chunked never reach the broker as a body:
// net/http refuses the response, and the call fails without relaying it.
func TestTransferEncodingRefused(t *testing.T) {
	up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		c, bw, _ := hj.Hijack()
		defer c.Close()
		z := gzipped(t, `{"text":"`+anthropicKey+`"}`)
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
		fmt.Fprintf(bw, "%x\r\n", len(z))
		bw.Write(z)
		bw.WriteString("\r\n0\r\n\r\n")
		bw.Flush()
	})
	s := newSetup(t, up.URL, nil)
	resp, out := s.post(t, "/v1/messages", `{"model":"claude-x","max_tokens":100,"messages":[]}`)
	if resp.StatusCode != 502 || leaks(out, anthropicKey) {
		t.Errorf("status %d body %q, want 502 without the secret", resp.StatusCode, out)
	}
	if n := s.authority.openReservations(); n != 0 {
		t.Errorf("%d reservations left open", n)
	}
}

// A custodied value in a response header's name (which the HTTP stack
// re-cases) or value (in any case) never reaches the agent; the other
// allowlisted headers still do.
func TestSecretInResponseHeaderNameDropped(t *testing.T) {
	up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h["anthropic-ratelimit-"+strings.ToLower(anthropicKey)] = []string{"1"}
		h["X-Ratelimit-"+anthropicKey] = []string{"2"}
		h.Set("Anthropic-Ratelimit-Tokens-Reset", strings.ToUpper(anthropicKey))
		h.Set("Anthropic-Ratelimit-Requests-Limit", "50")
		io.WriteString(w, `{"usage":{"input_tokens":1,"output_tokens":1}}`)
	})
	s := newSetup(t, up.URL, nil)
	resp, out := s.post(t, "/v1/messages", `{"model":"claude-x","max_tokens":10,"messages":[]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	for k, vs := range resp.Header {
		if leaks([]byte(k), anthropicKey) || leaks([]byte(strings.Join(vs, ",")), anthropicKey) {
			t.Errorf("header %s: %q reached the agent", k, vs)
		}
	}
	if got := resp.Header.Get("Anthropic-Ratelimit-Requests-Limit"); got != "50" {
		t.Errorf("control header = %q, want 50 (headers: %v)", got, resp.Header)
	}
}
