package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A daemon client other than root cannot point the privileged side's
// checked dialer at the host's own services by declaring them as a model
// upstream: alice's configuration names a model route at a host
// 127.0.0.1 listener, and a model call from her sandbox is refused by the
// dialer (address-denied) — the listener sees no request. Control: root's
// sandbox with the same route reaches it. (Before the checked dialer the
// gateway process itself could dial host loopback; now root dials, so the
// destinations a user declares are held to the egress address checks.)
func TestDaemonUserCannotDialHostLoopback(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	up := testkit.NewModelUpstream(t, fakeKey, "host-loopback-reached")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	key := filepath.Join(dir, "key")
	os.WriteFile(key, []byte(fakeKey+"\n"), 0o600)
	os.Chown(key, 1000, 1000)
	conf := func(name, workload, tenant string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(fmt.Sprintf(`version: cordon/v1
workload: %s
tenant: %s
purpose: testing
models:
  - name: claude
    api: anthropic
    upstream: %s
    credential: k
    models: ["claude-*"]
secrets:
  k: {file: %s}
`, workload, tenant, up.URL(), key)), 0o644)
		return p
	}
	call := []string{"--", "/usr/bin/curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-H", "content-type: application/json",
		"-d", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "http://127.0.0.1:80/v1/messages"}

	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "alice-gw", "--config", conf("alice.yaml", "u1000-agent", "u1000"), "--", "/bin/sleep", "1000"); r.Code != 0 {
		t.Fatalf("alice create: %d %s", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "start", "alice-gw"); r.Code != 0 {
		t.Fatalf("alice start: %d %s", r.Code, r.Stderr)
	}
	r := cordonSocket(t, d.socket, st, alice, append([]string{"sandbox", "exec", "alice-gw"}, call...)...)
	if strings.HasPrefix(r.Stdout, "2") {
		t.Errorf("alice's model call to a host loopback upstream = HTTP %s, want refused", r.Stdout)
	}
	if n := len(up.Seen()); n != 0 {
		t.Fatalf("the host 127.0.0.1 listener got %d requests from alice's sandbox, want 0", n)
	}
	if got := d.String(); !strings.Contains(got, "address-denied") {
		t.Errorf("the daemon's log has no address-denied refusal of the dial:\n%s", got)
	}

	// Control: root's configuration may name a local upstream.
	d.createStart("root-gw", "--config", conf("root.yaml", "root-agent", "root"), "--", "/bin/sleep", "1000")
	if r := d.cli(append([]string{"sandbox", "exec", "root-gw"}, call...)...); r.Stdout != "200" || len(up.Seen()) != 1 {
		t.Fatalf("control: root's model call = %d %q %s, upstream saw %d; want 200 and 1", r.Code, r.Stdout, r.Stderr, len(up.Seen()))
	}
	cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "alice-gw")
	d.cli("sandbox", "rm", "root-gw")
}
