package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

const fakeKey = "sk-ant-real-custodied-key-7f3a9c1e5b"

// gatewayConfig writes a config for a fake model upstream and returns its
// path. The secret comes from a file only the trusted side can read.
func gatewayConfig(t *testing.T, upstreamURL string, extra string) string {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(fakeKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`version: cordon/v1
workload: e2e
tenant: acme
purpose: testing
models:
  - name: claude
    api: anthropic
    upstream: %[1]s
    credential: upstream-key
    models: ["claude-*"]
  - name: gpt
    api: openai
    upstream: %[1]s
    credential: upstream-key
    models: ["gpt-*"]
secrets:
  upstream-key: {file: %[2]s}
%[3]s`, upstreamURL, keyFile, extra)
	p := filepath.Join(dir, "cordon.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The official SDKs inside the sandbox reach the fake upstream only through
// the broker, which injects the real key; the placeholder never arrives.
func TestGatewaySDKClients(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	const answer = "hello from the fake upstream"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	cfg := gatewayConfig(t, up.URL(), "")
	for _, tc := range []struct{ op, model string }{
		{"anthropic", "claude-test-1"},
		{"anthropic-stream", "claude-test-1"},
		{"openai-chat", "gpt-test"},
		{"openai-chat-stream", "gpt-test"},
		{"openai-responses", "gpt-test"},
	} {
		t.Run(tc.op, func(t *testing.T) {
			r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", tc.op, tc.model, "say hello")
			if r.Code != 0 || !strings.Contains(r.Stdout, "ANSWER: "+answer) {
				t.Fatalf("sdkclient %s = %d\nstdout: %s\nstderr: %s", tc.op, r.Code, r.Stdout, r.Stderr)
			}
		})
	}
	seen := up.Seen()
	if len(seen) < 5 {
		t.Fatalf("upstream saw %d requests, want >= 5", len(seen))
	}
	for _, s := range seen {
		if strings.Contains(s.APIKey+s.Auth, "placeholder") || (s.APIKey != fakeKey && s.Auth != "Bearer "+fakeKey) {
			t.Errorf("upstream request %s carried x-api-key %q / Authorization %q, want the custodied key only", s.Path, s.APIKey, s.Auth)
		}
	}
	// A model outside the allow-list is refused with an API-shaped error.
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", "anthropic", "other-model", "hi")
	if r.Code == 0 || !strings.Contains(r.Stdout, "ERROR") {
		t.Fatalf("disallowed model = %d %q, want an SDK error", r.Code, r.Stdout)
	}
	// Receipts were recorded, none carrying the key.
	rc := cordon(t, cordonBin, st, "receipts", "--json")
	if rc.Code != 0 || strings.Count(rc.Stdout, `"broker":"model"`) < 6 || strings.Contains(rc.Stdout, fakeKey) {
		t.Fatalf("receipts = %d\n%s", rc.Code, rc.Stdout)
	}
}

// The key is never in the sandbox: not in the environment, not in any
// file the program can read.
func TestGatewayKeyNeverInSandbox(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), "")
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/bin/sh", "-c",
		"env; grep -rs --no-messages -l '"+fakeKey+"' /etc /tmp /home /workspace /proc/self/environ /proc/1/environ 2>/dev/null; echo done")
	if r.Code != 0 || strings.Contains(r.Stdout, fakeKey) || !strings.Contains(r.Stdout, "ANTHROPIC_BASE_URL=http://127.0.0.1:80") {
		t.Fatalf("env in sandbox = %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// An --env carrying the custodied value is refused before anything runs.
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--env", "LEAK="+fakeKey, "--", "/bin/true")
	if r.Code != 125 || strings.Contains(r.Stderr, fakeKey) {
		t.Fatalf("--env with the secret = %d %q, want 125 without the value", r.Code, r.Stderr)
	}
}
