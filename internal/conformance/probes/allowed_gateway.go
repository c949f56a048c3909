package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "allowed.model",
		Class:  record.Allowed,
		Clause: "§2.1 each declared crossing works, through the trusted gateway: model",
		Title:  "a model call through the model broker reaches the declared upstream with the custodied key, never the placeholder, and is receipted",
		Run:    allowedModel,
	})
	conformance.Register(conformance.Probe{
		ID:     "allowed.egress",
		Class:  record.Allowed,
		Clause: "§2.1 each declared crossing works, through the trusted gateway: egress to an allowed host",
		Title:  "an HTTP request to an allowed host:port through the egress proxy reaches it once and is receipted",
		Run:    allowedEgress,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.net.egress-undeclared",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: egress to an undeclared host or port",
		Title:  "requests through the egress proxy to an undeclared host, to an allowed host on an undeclared port, and to an IP literal never reach their target",
		Run:    egressUndeclared,
	})
}

// custodiedKey is the upstream key the probes' configs custody: it must
// reach the upstream and never the sandbox.
const custodiedKey = "sk-ant-conformance-custodied-3b9d0e"

// gatewayConfig writes a cordon/v1 config under the probe's directory: a
// model route to upstream (when not "") with its key custodied in a 0600
// file, then extra.
func gatewayConfig(e *conformance.Env, upstream, extra string) (string, error) {
	keyFile := filepath.Join(e.Dir, "upstream-key")
	if err := os.WriteFile(keyFile, []byte(custodiedKey+"\n"), 0o600); err != nil {
		return "", err
	}
	cfg := "version: cordon/v1\nworkload: conformance\ntenant: conformance\npurpose: testing\n"
	if upstream != "" {
		cfg += fmt.Sprintf(`models:
  - name: claude
    api: anthropic
    upstream: %s
    credential: upstream-key
    models: ["claude-*"]
secrets:
  upstream-key: {file: %s}
`, upstream, keyFile)
	}
	p := filepath.Join(e.Dir, "cordon-"+randToken(3)+".yaml")
	return p, os.WriteFile(p, []byte(cfg+extra), 0o600)
}

// brokerReceipts lists the store's receipts of one broker (`cordon receipts
// --json --broker B`, read on the host).
func brokerReceipts(ctx context.Context, e *conformance.Env, stateDir, broker string) ([]map[string]any, error) {
	r, err := e.Cordon(ctx, stateDir, "receipts", "--json", "--broker", broker)
	if err != nil {
		return nil, err
	}
	if r.Code != 0 {
		return nil, fmt.Errorf("cordon receipts: exit %d: %s", r.Code, headLine(r.Stderr))
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			return nil, fmt.Errorf("cordon receipts --json: %v: %q", err, l)
		}
		out = append(out, m)
	}
	return out, nil
}

func decisions(rs []map[string]any) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		d, _ := r["decision"].(string)
		out[d]++
	}
	return out
}

// allowedModel: the program sends one Messages request to the model
// broker with the placeholder key the sandbox was given; the fake
// upstream, on the host, records what arrived.
func allowedModel(ctx context.Context, e *conformance.Env) conformance.Outcome {
	const answer = "hello from the conformance upstream"
	up := fixture.NewModelUpstream(custodiedKey, answer)
	e.Cleanup(up.Close)
	cfg, err := gatewayConfig(e, up.URL(), "")
	if err != nil {
		return broke(err)
	}
	st := e.StateDir()
	r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"model-call"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	seen := up.Seen()
	custodied, placeholder := 0, 0
	for _, s := range seen {
		if s.APIKey == custodiedKey {
			custodied++
		}
		if s.APIKey != custodiedKey || strings.Contains(s.APIKey+s.Auth, "placeholder") {
			placeholder++
		}
	}
	rs, err := brokerReceipts(ctx, e, st, "model")
	if err != nil {
		return broke(err)
	}
	out, _ := json.Marshal(rs)
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("model requests that reached the declared upstream with the custodied key", "1", fmt.Sprint(custodied), custodied == 1, "the fake model upstream on the host, requests seen"),
		fact("requests that reached the upstream with any other key (the placeholder)", "0", fmt.Sprint(placeholder), placeholder == 0, "the fake model upstream on the host, x-api-key of each request"),
		fact("model receipts in the store", "1 allow", fmt.Sprint(decisions(rs)), decisions(rs)["allow"] == 1, "cordon receipts --json --broker model, on the host"),
		fact("the custodied key in the store's receipts", "absent", seenOrNot(string(out), custodiedKey), !strings.Contains(string(out), custodiedKey), "cordon receipts --json, on the host"),
		fact("the custodied key in what the sandbox printed", "absent", seenOrNot(r.Stdout+r.Stderr, custodiedKey), !strings.Contains(r.Stdout+r.Stderr, custodiedKey), "cordon run's stdout and stderr"),
	}}
}

func seenOrNot(s, sub string) string {
	if strings.Contains(s, sub) {
		return "present"
	}
	return "absent"
}

// egressConfig allows allowed.test on the allowed target's port; both
// names resolve, on the trusted side, to the host's loopback.
func egressConfig(e *conformance.Env, allowedPort string) (string, error) {
	return gatewayConfig(e, "", fmt.Sprintf(`egress:
  allow:
    - host: allowed.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    allowed.test: 127.0.0.1
    denied.test: 127.0.0.1
`, allowedPort))
}

// allowedEgress: a GET through the proxy the sandbox is given reaches the
// allowed target: its hit count, on the host, is 1.
func allowedEgress(ctx context.Context, e *conformance.Env) conformance.Outcome {
	allowed := fixture.NewTarget("allowed-host-body")
	e.Cleanup(allowed.Close)
	cfg, err := egressConfig(e, allowed.Port())
	if err != nil {
		return broke(err)
	}
	st := e.StateDir()
	r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"proxied", "GET", "http://allowed.test:" + allowed.Port() + "/"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	hits := allowed.Hits()
	rs, err := brokerReceipts(ctx, e, st, "egress")
	if err != nil {
		return broke(err)
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("requests that reached the allowed target allowed.test:"+allowed.Port(), "1", fmt.Sprint(hits), hits == 1, "the target's request count on the host"),
		fact("egress receipts in the store", "1 allow", fmt.Sprint(decisions(rs)), decisions(rs)["allow"] == 1 && len(rs) == 1, "cordon receipts --json --broker egress, on the host"),
	}}
}

// egressUndeclared: through the proxy, an undeclared host (denied.test,
// which resolves to a second target), the allowed host on an undeclared
// port (that second target's), and an IP literal of the allowed target:
// and, past the proxy, the allowed target direct on 127.0.0.1: neither
// target sees a request. Control: the allowed request, by the
// same route in the same sandbox configuration, reaches the allowed
// target once.
func egressUndeclared(ctx context.Context, e *conformance.Env) conformance.Outcome {
	allowed := fixture.NewTarget("allowed-host-body")
	e.Cleanup(allowed.Close)
	denied := fixture.NewTarget("denied-host-body")
	e.Cleanup(denied.Close)
	cfg, err := egressConfig(e, allowed.Port())
	if err != nil {
		return broke(err)
	}
	st := e.StateDir()
	urls := []string{
		"http://denied.test:" + denied.Port() + "/",
		"http://allowed.test:" + denied.Port() + "/",
		"http://[::ffff:7f00:1]:" + allowed.Port() + "/",
	}
	// The last one goes direct, past the proxy.
	ops := [][]string{{"proxied", "GET", urls[0]}, {"proxied", "GET", urls[1]}, {"proxied", "GET", urls[2]},
		{"loopback-http", "GET", "http://127.0.0.1:" + allowed.Port() + "/"}}
	var hints []string
	for _, op := range ops {
		r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: op})
		if err != nil {
			return broke(err)
		}
		if err := ranOp(r); err != nil {
			return broke(err)
		}
		hints = append(hints, r.Hint())
	}
	dh, ah := denied.Hits(), allowed.Hits()
	rs, err := brokerReceipts(ctx, e, st, "egress")
	if err != nil {
		return broke(err)
	}
	denies := decisions(rs)["deny"]
	r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"proxied", "GET", "http://allowed.test:" + allowed.Port() + "/"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	ac := allowed.Hits() - ah
	return conformance.Outcome{Hint: strings.Join(append(hints, r.Hint()), "\n"), Facts: []record.Fact{
		fact("requests that reached the undeclared target (denied.test, and allowed.test on its port)", "0", fmt.Sprint(dh), dh == 0, "the second target's request count on the host"),
		fact("requests that reached the allowed target by its IP literal through the proxy, or direct to 127.0.0.1", "0", fmt.Sprint(ah), ah == 0, "the allowed target's request count on the host"),
		fact("egress deny receipts in the store", fmt.Sprint(len(urls)), fmt.Sprint(denies), denies == len(urls), "cordon receipts --json --broker egress, on the host"),
		control("the allowed request, by the same proxy", "1", fmt.Sprint(ac), ac == 1, "the allowed target's request count on the host"),
	}}
}
