package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// curl inside the sandbox reaches an allowed test host through the proxy
// (the name resolved by the trusted side through egress.resolve) and is
// refused for a denied one; the denied host's server never sees a request.
func TestEgressCurl(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	allowed := testkit.NewTarget(t, "allowed-host-body")
	denied := testkit.NewTarget(t, "denied-host-body")
	aport, dport := allowed.Port(), denied.Port()
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), fmt.Sprintf(`egress:
  allow:
    - host: allowed.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    allowed.test: 127.0.0.1
    denied.test: 127.0.0.1
`, aport))
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://allowed.test:"+aport+"/")
	if r.Code != 0 || !strings.Contains(r.Stdout, "allowed-host-body") || allowed.Hits() != 1 {
		t.Fatalf("curl allowed = %d %q %q (hits %d)", r.Code, r.Stdout, r.Stderr, allowed.Hits())
	}
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "-i", "--max-time", "10", "http://denied.test:"+dport+"/")
	if !strings.Contains(r.Stdout, "403") || !strings.Contains(strings.ToLower(r.Stdout), "x-cordon-reason") || denied.Hits() != 0 {
		t.Fatalf("curl denied = %d %q %q (denied host hits %d)", r.Code, r.Stdout, r.Stderr, denied.Hits())
	}
	// CONNECT to a port the rule does not list, and to an IP literal.
	for _, target := range []string{"https://allowed.test:1/", "https://[::ffff:7f00:1]:" + aport + "/"} {
		r = cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "-k", "--max-time", "10", target)
		if r.Code == 0 || !strings.Contains(r.Stderr, "403") {
			t.Fatalf("curl %s = %d %q %q, want a 403 from the proxy", target, r.Code, r.Stdout, r.Stderr)
		}
	}
	// Without the proxy there is no route at all.
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "--noproxy", "*", "--max-time", "5", "http://127.0.0.1:"+aport+"/")
	if r.Code == 0 || allowed.Hits() != 1 {
		t.Fatalf("curl without the proxy = %d %q (hits %d), want no connection", r.Code, r.Stdout, allowed.Hits())
	}
	rc := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "egress")
	if rc.Code != 0 || !strings.Contains(rc.Stdout, `"decision":"allow"`) || !strings.Contains(rc.Stdout, `"decision":"deny"`) {
		t.Fatalf("egress receipts = %d\n%s", rc.Code, rc.Stdout)
	}
}
