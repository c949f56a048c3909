package probes

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "stale.budget-window",
		Class:   record.StaleState,
		Clause:  "§2.5 stale state, §9 expired authority: an expired budget window carries neither its unspent authority nor its spending into the next",
		Title:   "under requests: 2 per 4s window, one call in a window, then four calls in a later window: exactly two reach the upstream",
		Timeout: 60 * time.Second,
		Run:     staleBudgetWindow,
	})
}

// budgetWindow is the probe's budget window (the store aligns windows to
// multiples of it since the epoch; the docs call them rolling: the probe
// waits long enough for either).
const budgetWindow = 4 * time.Second

// untilWindow sleeps until 100 ms into the first window that starts at or
// after t.
func untilWindow(ctx context.Context, t time.Time) error {
	w := int64(budgetWindow / time.Second)
	start := (t.Unix() + w - 1) / w * w
	if start*int64(time.Second) < t.UnixNano() {
		start += w
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(time.Unix(start, 0).Add(100 * time.Millisecond))):
		return nil
	}
}

func windowOf(t time.Time) int64 { return t.Unix() / int64(budgetWindow/time.Second) }

// staleBudgetWindow: the workload's budget is 2 model requests per
// window. In one window a sandbox makes one call (it reaches the
// upstream: the control). Once that window has expired (a whole window
// after the call ended), another sandbox makes four calls within one
// window. From outside: the upstream counts exactly two more — not three
// (the expired window's unspent request carried over) and not one (its
// spending charged to the new window) — and the store holds two deny
// receipts naming the budget.
func staleBudgetWindow(ctx context.Context, e *conformance.Env) conformance.Outcome {
	up := fixture.NewModelUpstream(upstreamKey, "ok")
	e.Cleanup(up.Close)
	cfg, err := budgetModelConfig(e, "conformance-window", up, fmt.Sprintf("budgets:\n  window: %s\n  requests: 2\n", budgetWindow))
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	call := conformance.ProbeBin + ` __probe request POST '$ANTHROPIC_BASE_URL/v1/messages' '{"model":"claude-conformance","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'`
	run := func(n int) (conformance.RunResult, error) {
		r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg, "--ro", e.Bin + ":" + conformance.ProbeBin},
			Argv: []string{"/bin/sh", "-c", strings.TrimSuffix(strings.Repeat(call+"; ", n), "; ")}})
		if err == nil {
			err = startRefused(r)
		}
		return r, err
	}
	if err := untilWindow(ctx, time.Now()); err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := run(1); err != nil {
		return conformance.Outcome{Err: err}
	}
	first := len(up.Seen())
	deniedBefore, _, err := budgetDenials(ctx, e, st, "model")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := untilWindow(ctx, time.Now().Add(budgetWindow)); err != nil {
		return conformance.Outcome{Err: err}
	}
	start := time.Now()
	r, err := run(4)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if windowOf(start) != windowOf(time.Now()) {
		return conformance.Outcome{Err: fmt.Errorf("the four calls took longer than their %s window (the host is too loaded to time this probe)", budgetWindow)}
	}
	later := len(up.Seen()) - first
	denied, rule, err := budgetDenials(ctx, e, st, "model")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	denied -= deniedBefore
	return conformance.Outcome{Hint: strings.TrimSpace(r.Stdout), Facts: []record.Fact{
		{Name: "calls reaching the upstream in a later window, of 4 (budget 2 per window; 1 used in the expired one)", Want: "2", Got: strconv.Itoa(later), OK: later == 2,
			Source: "the fake upstream's request count, on the host"},
		{Name: "deny receipts naming the budget in the later window", Want: "2", Got: fmt.Sprintf("%d (%s)", denied, rule), OK: denied == 2,
			Source: "cordon receipts --json --broker model"},
		{Name: "the call in the first window", Want: "reached the upstream", Got: fmt.Sprintf("%d request(s) reached", first), OK: first == 1,
			Source: "the fake upstream's request count, on the host", Control: true},
	}}
}
