package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// curl inside the sandbox reaches an allowed test host through the proxy
// (the name resolved by the trusted side through egress.resolve) and is
// refused for a denied one; the denied host's server never sees a request.
func TestEgressCurl(t *testing.T) {
	requireRoot(t)
	st := newStateDir(t)
	var allowedHits, deniedHits atomic.Int64
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowedHits.Add(1)
		fmt.Fprint(w, "allowed-host-body")
	}))
	defer allowed.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deniedHits.Add(1)
		fmt.Fprint(w, "denied-host-body")
	}))
	defer denied.Close()
	_, aport, _ := net.SplitHostPort(allowed.Listener.Addr().String())
	_, dport, _ := net.SplitHostPort(denied.Listener.Addr().String())
	up := newFakeUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up, fmt.Sprintf(`egress:
  allow:
    - host: allowed.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    allowed.test: 127.0.0.1
    denied.test: 127.0.0.1
`, aport))
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://allowed.test:"+aport+"/")
	if r.Code != 0 || !strings.Contains(r.Stdout, "allowed-host-body") || allowedHits.Load() != 1 {
		t.Fatalf("curl allowed = %d %q %q (hits %d)", r.Code, r.Stdout, r.Stderr, allowedHits.Load())
	}
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "-i", "--max-time", "10", "http://denied.test:"+dport+"/")
	if !strings.Contains(r.Stdout, "403") || !strings.Contains(strings.ToLower(r.Stdout), "x-cordon-reason") || deniedHits.Load() != 0 {
		t.Fatalf("curl denied = %d %q %q (denied host hits %d)", r.Code, r.Stdout, r.Stderr, deniedHits.Load())
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
	if r.Code == 0 || allowedHits.Load() != 1 {
		t.Fatalf("curl without the proxy = %d %q (hits %d), want no connection", r.Code, r.Stdout, allowedHits.Load())
	}
	rc := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "egress")
	if rc.Code != 0 || !strings.Contains(rc.Stdout, `"decision":"allow"`) || !strings.Contains(rc.Stdout, `"decision":"deny"`) {
		t.Fatalf("egress receipts = %d\n%s", rc.Code, rc.Stdout)
	}
}
