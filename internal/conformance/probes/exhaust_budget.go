package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// upstreamKey is the custodied credential of the probes' fake model
// upstream: it exists only in a 0600 file the trusted side reads.
const upstreamKey = "sk-ant-conformance-custodied-5d1f0b"

func init() {
	for _, b := range []struct{ id, what, budget, body string }{
		{"model-requests", "model requests", "requests: 1", `{"model":"claude-conformance","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"model-tokens", "model output tokens", "output_tokens: 10", `{"model":"claude-conformance","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		conformance.Register(conformance.Probe{
			ID:      "exhaust.budget." + b.id,
			Class:   record.Exhaustion,
			Clause:  "§2.5 exhaustion, §3 budgets: a crossing past its budget is refused, recorded, and never reaches the upstream",
			Title:   "past a workload's " + b.what + " budget (" + b.budget + ") model calls never reach the upstream and are recorded as denied (the agent is answered 429)",
			Timeout: 60 * time.Second,
			Run: func(ctx context.Context, e *conformance.Env) conformance.Outcome {
				return modelBudget(ctx, e, b.budget, b.body)
			},
		})
	}
	for _, b := range []struct{ id, budget, body string }{
		{"egress-connections", "connections: 1", "budget"},
		{"egress-bytes", "egress_bytes: 16K", strings.Repeat("b", 64<<10)},
	} {
		conformance.Register(conformance.Probe{
			ID:      "exhaust.budget." + b.id,
			Class:   record.Exhaustion,
			Clause:  "§2.5 exhaustion, §3 budgets: a crossing past its budget is refused, recorded, and never reaches the upstream",
			Title:   "past a workload's egress budget (" + b.budget + ") the next connection never reaches the target and is recorded as denied",
			Timeout: 60 * time.Second,
			Run: func(ctx context.Context, e *conformance.Env) conformance.Outcome {
				return egressBudget(ctx, e, b.budget, b.body)
			},
		})
	}
}

// budgetModelConfig writes a config with one Anthropic route to up (its key in
// a 0600 file) and extra, and returns its path.
func budgetModelConfig(e *conformance.Env, workload string, up *fixture.ModelUpstream, extra string) (string, error) {
	key, err := probeFile(e, "upstream.key", upstreamKey+"\n", 0o600)
	if err != nil {
		return "", err
	}
	return probeFile(e, "cordon.yaml", fmt.Sprintf(`version: cordon/v1
workload: %s
tenant: conformance
purpose: testing
models:
  - name: claude
    api: anthropic
    upstream: %s
    credential: upstream-key
    models: ["claude-*"]
secrets:
  upstream-key: {file: %s}
%s`, workload, up.URL(), key, extra), 0o600)
}

// budgetReceipt is the part of a receipt the budget probes read.
type budgetReceipt struct {
	Broker   string `json:"broker"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Rule     string `json:"rule"`
}

// budgetDenials counts the broker's deny receipts that name a budget.
func budgetDenials(ctx context.Context, e *conformance.Env, st, broker string) (int, string, error) {
	r, err := e.Cordon(ctx, st, "receipts", "--json", "--broker", broker)
	if err != nil {
		return 0, "", err
	}
	n, last := 0, ""
	for _, l := range strings.Split(r.Stdout, "\n") {
		var rc budgetReceipt
		if json.Unmarshal([]byte(l), &rc) == nil && rc.Decision == "deny" && strings.Contains(strings.ToLower(rc.Reason+" "+rc.Rule), "budget") {
			n++
			last = rc.Rule
		}
	}
	return n, last, nil
}

// modelBudget: one sandbox makes three identical model calls under
// budget. From outside: the fake upstream counted exactly one (the
// control: the call within the budget reached it), and the store holds a
// deny receipt naming the budget for each of the other two.
func modelBudget(ctx context.Context, e *conformance.Env, budget, body string) conformance.Outcome {
	up := fixture.NewModelUpstream(upstreamKey, "ok")
	e.Cleanup(up.Close)
	cfg, err := budgetModelConfig(e, "conformance-budget", up, "budgets:\n  "+budget+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	call := conformance.ProbeBin + ` __probe request POST '$ANTHROPIC_BASE_URL/v1/messages' '` + body + `'`
	r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg, "--ro", e.Bin + ":" + conformance.ProbeBin},
		Argv: []string{"/bin/sh", "-c", call + "; " + call + "; " + call}})
	if err == nil {
		err = startRefused(r)
	}
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	reached := len(up.Seen())
	denied, rule, err := budgetDenials(ctx, e, st, "model")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: strings.TrimSpace(r.Stdout), Facts: []record.Fact{
		{Name: "model calls past the budget (" + budget + ") reaching the upstream", Want: "0 of 2", Got: fmt.Sprintf("%d of 2", max(reached-1, 0)), OK: reached <= 1,
			Source: "the fake upstream's request count, on the host"},
		{Name: "deny receipts naming the budget", Want: "2", Got: fmt.Sprintf("%d (%s)", denied, rule), OK: denied == 2, Source: "cordon receipts --json --broker model"},
		{Name: "the first call, within the budget", Want: "reached the upstream", Got: fmt.Sprintf("%d request(s) reached", reached), OK: reached == 1,
			Source: "the fake upstream's request count, on the host", Control: true},
	}}
}

// egressBudget: egress to one allowed host under budget (the target
// answers body); the program fetches it three times. The target counts
// exactly one request (the control: within the budget it reached), and
// the store holds deny receipts naming the budget for the other two.
func egressBudget(ctx context.Context, e *conformance.Env, budget, body string) conformance.Outcome {
	target := fixture.NewTarget(body)
	e.Cleanup(target.Close)
	cfg, err := probeFile(e, "cordon.yaml", fmt.Sprintf(`version: cordon/v1
workload: conformance-egress-budget
tenant: conformance
purpose: testing
egress:
  allow:
    - {host: budget.test, ports: [%s]}
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    budget.test: 127.0.0.1
budgets:
  %s
`, target.Port(), budget), 0o600)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	get := conformance.ProbeBin + " __probe request GET http://budget.test:" + target.Port() + "/"
	r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg, "--ro", e.Bin + ":" + conformance.ProbeBin},
		Argv: []string{"/bin/sh", "-c", get + "; " + get + "; " + get}})
	if err == nil {
		err = startRefused(r)
	}
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	time.Sleep(100 * time.Millisecond)
	reached := target.Hits()
	denied, rule, err := budgetDenials(ctx, e, st, "egress")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: strings.TrimSpace(r.Stdout), Facts: []record.Fact{
		{Name: "connections past the budget (" + budget + ") reaching the target", Want: "0 of 2", Got: fmt.Sprintf("%d of 2", max(reached-1, 0)), OK: reached <= 1,
			Source: "the runner's egress target, request count on the host"},
		{Name: "deny receipts naming the budget", Want: "2", Got: fmt.Sprintf("%d (%s)", denied, rule), OK: denied == 2, Source: "cordon receipts --json --broker egress"},
		{Name: "the first connection, within the budget", Want: "reached the target", Got: fmt.Sprintf("%d request(s) reached", reached), OK: reached == 1,
			Source: "the runner's egress target, request count on the host", Control: true},
	}}
}
