package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// Policy decides every crossing in addition to the config's allow-lists:
// a model and an egress host that the config allows but a Cedar forbid
// names are refused, the upstream never sees them, and the receipts name
// the deciding policy and the set's digest. An invalid policy refuses the
// run before anything starts.
func TestPolicyDecidesEveryCrossing(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	target := testkit.NewTarget(t, "reached")
	port := target.Port()
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.cedar")
	os.WriteFile(pol, []byte(`
@id("all-models") permit(principal, action == Action::"model.invoke", resource);
@id("no-opus") forbid(principal, action == Action::"model.invoke", resource) when { resource.name like "claude-opus*" };
@id("hosts") permit(principal, action == Action::"egress.connect", resource) when { resource.name like "*.test" };
@id("no-blocked") forbid(principal, action == Action::"egress.connect", resource == Host::"blocked.test");
`), 0o644)
	up := testkit.NewModelUpstream(t, fakeKey, "model-answer")
	extra := fmt.Sprintf(`policy: [%s]
egress:
  allow:
    - {host: open.test, ports: [%[2]s]}
    - {host: blocked.test, ports: [%[2]s]}
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve: {open.test: 127.0.0.1, blocked.test: 127.0.0.1}
`, pol, port)
	cfg := gatewayConfig(t, up.URL(), extra)
	// Positive controls: what policy permits goes through.
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", "anthropic", "claude-sonnet-4-5", "hi")
	if r.Code != 0 || !strings.Contains(r.Stdout, "model-answer") {
		t.Fatalf("permitted model: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://open.test:"+port+"/")
	if r.Code != 0 || r.Stdout != "reached" || target.Hits() != 1 {
		t.Fatalf("permitted host: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	// Allowed by the config, forbidden by policy: refused before any upstream.
	before := len(up.Seen())
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", "anthropic", "claude-opus-4-1", "hi")
	if r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, "denied by policy") || len(up.Seen()) != before {
		t.Fatalf("forbidden model: %d %s %s (upstream requests %d -> %d)", r.Code, r.Stdout, r.Stderr, before, len(up.Seen()))
	}
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "-i", "--max-time", "10", "http://blocked.test:"+port+"/")
	if !strings.Contains(r.Stdout, "403") || !strings.Contains(r.Stdout, "policy-denied") || target.Hits() != 1 {
		t.Fatalf("forbidden host: %d %q %q (hits %d)", r.Code, r.Stdout, r.Stderr, target.Hits())
	}
	rc := cordon(t, cordonBin, st, "receipts", "--json")
	for _, want := range []string{`"determining":["no-opus"]`, `"determining":["no-blocked"]`, `"determining":["all-models"]`, `"determining":["hosts"]`} {
		if !strings.Contains(rc.Stdout, want) {
			t.Errorf("receipts lack %s:\n%s", want, rc.Stdout)
		}
	}
	// A policy with a type error refuses the run; the program never starts.
	bad := filepath.Join(dir, "bad.cedar")
	os.WriteFile(bad, []byte(`permit(principal, action == Action::"model.invoke", resource) when { resource.name > 3 };`), 0o644)
	badCfg := gatewayConfig(t, up.URL(), "policy: ["+bad+"]\n")
	r = cordon(t, cordonBin, st, "run", "--config", badCfg, "--", "/bin/echo", "started")
	if r.Code != 125 || strings.Contains(r.Stdout, "started") || !strings.Contains(r.Stderr, "bad.cedar") {
		t.Fatalf("invalid policy: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}
