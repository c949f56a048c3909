package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// custodyUpstream is a provider that tries to hand the custodied key back
// to the agent: in a gzip body it was not asked for (with an error status
// and with 200), in a response header's name, and — the control — in a
// plain body, which the broker must redact. It records every request.
type custodyUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // models
}

func newCustodyUpstream(t *testing.T) *custodyUpstream {
	u := &custodyUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		json.Unmarshal(body, &req)
		u.mu.Lock()
		u.seen = append(u.seen, req.Model)
		u.mu.Unlock()
		if r.Header.Get("X-Api-Key") != fakeKey && r.Header.Get("Authorization") != "Bearer "+fakeKey {
			w.WriteHeader(401)
			return
		}
		reply := `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"the key is ` + fakeKey +
			`"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}}`
		h := w.Header()
		h.Set("Content-Type", "application/json")
		switch req.Model {
		case "claude-gzip-error", "claude-gzip-ok":
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			io.WriteString(zw, reply)
			zw.Close()
			h.Set("Content-Encoding", "gzip")
			if req.Model == "claude-gzip-error" {
				w.WriteHeader(400)
			}
			w.Write(z.Bytes())
		case "claude-header":
			h["anthropic-ratelimit-"+strings.ToLower(fakeKey)] = []string{"1"}
			h.Set("Anthropic-Ratelimit-Requests-Limit", "50")
			io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":1,"output_tokens":1}}`)
		default:
			io.WriteString(w, reply)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *custodyUpstream) models() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// The agent calls the model through the gateway; the upstream answers with
// the custodied key compressed, in a header name, and plain. What the
// program received (its stdout, read on the host) never holds the key in
// any letter case, raw or gunzipped; the plain answer arrives redacted (the
// control: the broker relays and the key was really in the answer). A
// request whose image_generation mask is a remote URL never reaches the
// upstream. Receipts name the refusal.
func TestModelBrokerCustodyGaps(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := newCustodyUpstream(t)
	cfg := gatewayConfig(t, up.srv.URL, "")
	call := func(model string) string {
		return fmt.Sprintf(`echo "=== %[1]s"; curl -sS -i --max-time 20 -H 'content-type: application/json' -H 'accept-encoding: gzip' `+
			`-d '{"model":"%[1]s","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"; echo`, model)
	}
	script := strings.Join([]string{
		call("claude-gzip-error"), call("claude-gzip-ok"), call("claude-header"), call("claude-plain"),
		`echo "=== mask"; curl -sS -i --max-time 20 -H 'content-type: application/json' ` +
			`-d '{"model":"gpt-x","input":"hi","tools":[{"type":"image_generation","input_image_mask":{"image_url":"https://evil.example/m.png"}}]}' "$OPENAI_BASE_URL/responses"; echo`,
		// A member outside OpenAI's own schema that OpenAI-compatible
		// upstreams fetch; control: the same URL as text is carried.
		`echo "=== video"; curl -sS -i --max-time 20 -H 'content-type: application/json' ` +
			`-d '{"model":"gpt-video","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"https://evil.example/v.mp4"}}]}]}' "$OPENAI_BASE_URL/chat/completions"; echo`,
		`echo "=== video-text"; curl -sS -i --max-time 20 -H 'content-type: application/json' ` +
			`-d '{"model":"gpt-video-text","messages":[{"role":"user","content":[{"type":"text","text":"https://evil.example/v.mp4"}]}]}' "$OPENAI_BASE_URL/chat/completions"; echo`,
	}, "\n")
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("run = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	parts := map[string]string{}
	for _, p := range strings.Split(r.Stdout, "=== ")[1:] {
		name, rest, _ := strings.Cut(p, "\n")
		parts[name] = rest
	}
	low := strings.ToLower(fakeKey)
	for name, out := range parts {
		if strings.Contains(strings.ToLower(out), low) {
			t.Errorf("%s: the agent received the key:\n%s", name, out)
		}
		_, body, _ := strings.Cut(out, "\r\n\r\n")
		if zr, err := gzip.NewReader(strings.NewReader(body)); err == nil {
			plain, _ := io.ReadAll(zr)
			t.Errorf("%s: the agent received a gzip body (%q)", name, plain)
		}
	}
	for _, name := range []string{"claude-gzip-error", "claude-gzip-ok"} {
		if !strings.Contains(parts[name], "HTTP/1.1 502") || !strings.Contains(parts[name], "compressed") {
			t.Errorf("%s: want a 502 naming the compressed response:\n%s", name, parts[name])
		}
	}
	if h := parts["claude-header"]; !strings.Contains(h, "HTTP/1.1 200") || !strings.Contains(strings.ToLower(h), "anthropic-ratelimit-requests-limit: 50") {
		t.Errorf("claude-header: want 200 with the control header:\n%s", h)
	}
	// Control: the plain answer held the key and arrives redacted.
	if p := parts["claude-plain"]; !strings.Contains(p, "HTTP/1.1 200") || !strings.Contains(p, "the key is [REDACTED]") {
		t.Errorf("claude-plain: want 200 with the key redacted:\n%s", p)
	}
	if m := parts["mask"]; !strings.Contains(m, "HTTP/1.1 403") || !strings.Contains(m, "remote URL") {
		t.Errorf("mask: want a 403 naming the remote URL:\n%s", m)
	}
	if v := parts["video"]; !strings.Contains(v, "HTTP/1.1 403") || !strings.Contains(v, "remote URL") {
		t.Errorf("video: want a 403 naming the remote URL:\n%s", v)
	}
	got := up.models()
	for _, m := range got {
		if m == "gpt-x" {
			t.Errorf("the upstream saw the request with a remote mask")
		}
		if m == "gpt-video" {
			t.Errorf("the upstream saw the request with a remote video_url")
		}
	}
	if len(got) != 5 || !slices.Contains(got, "gpt-video-text") {
		t.Errorf("upstream saw %v, want the four anthropic calls and the video-text control", got)
	}
	rc := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "model")
	if n := strings.Count(rc.Stdout, "upstream response encoding refused"); n != 2 {
		t.Errorf("%d receipts name the encoding refusal, want 2:\n%s", n, rc.Stdout)
	}
	if strings.Contains(strings.ToLower(rc.Stdout), low) {
		t.Errorf("receipts hold the key:\n%s", rc.Stdout)
	}
}
