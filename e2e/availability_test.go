package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A budget is per workload and persisted: the second request over a
// one-request budget is refused with an API-shaped 429, in a later run too.
func TestGatewayBudgetPersists(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "ok")
	cfg := gatewayConfig(t, up.URL(), "budgets:\n  requests: 1\n")
	args := []string{"run", "--config", cfg, "--ro", probeDir + ":/probe", "--", "/probe/sdkclient", "anthropic", "claude-x", "hi"}
	if r := cordon(t, cordonBin, st, args...); r.Code != 0 {
		t.Fatalf("first request = %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	r := cordon(t, cordonBin, st, args...)
	if r.Code == 0 || !strings.Contains(r.Stdout, "429") {
		t.Fatalf("second request over budget = %d %q, want a 429 error", r.Code, r.Stdout)
	}
	if n := len(up.Seen()); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1 (the refused one must not reach it)", n)
	}
}

// A secret the custodian cannot resolve refuses the run before anything
// starts; the error names the secret, never a value.
func TestGatewayCustodianUnavailable(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`version: cordon/v1
workload: e2e
tenant: acme
purpose: testing
models:
  - name: claude
    api: anthropic
    upstream: http://127.0.0.1:9
    credential: k
    models: ["claude-*"]
secrets:
  k: {env: CORDON_E2E_UNSET_KEY}
`), 0o600)
	r := cordon(t, cordonBin, st, "run", "--json", "--config", cfg, "--", "/bin/echo", "ran")
	if r.Code != 125 || strings.Contains(r.Stdout, "ran\n") || r.Outcome.FailureKind != "custodian_unavailable" {
		t.Fatalf("run with an unresolvable secret = %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}

// An upstream that is down gives the agent an API-shaped error, not a hang
// and not a direct path.
func TestGatewayUpstreamDown(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), "")
	up.Close()
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--timeout", "60s", "--", "/probe/sdkclient", "anthropic", "claude-x", "hi")
	if r.Code != 1 || !strings.Contains(r.Stdout, "ERROR") || !(strings.Contains(r.Stdout, "502") || strings.Contains(r.Stdout, "503")) {
		t.Fatalf("upstream down = %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}
