package probes

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/hostmgr"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "reset.profile",
		Class:   record.Reset,
		Clause:  "§2.5 reset; §7: the lab profile resets to SAFE_GUIDED on restart",
		Title:   "a FULL_CONTROL_LAB sandbox, whose budget gate is bypassed, is SAFE_GUIDED after a daemon restart: its budget gates crossings again",
		Daemon:  true,
		Timeout: 90 * time.Second,
		Run:     gatewayProbe(profileReset),
	})
}

// curlCall is one non-streamed model call from a daemon sandbox.
const curlCall = `curl -sS --max-time 20 -H 'content-type: application/json' -d '{"model":"claude-probe-1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"; echo`

// profileReset: a daemon sandbox created FULL_CONTROL_LAB (risk accepted)
// under a one-request model budget; two calls both reach the upstream
// (control: the lab bypasses the budget gate). The daemon is SIGKILLed
// and restarted: it must list the sandbox SAFE_GUIDED, and two more calls
// must reach the upstream at most once (the budget gates again).
func profileReset(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	cfg, err := keyedModelConfig(e, up.URL(), key, "budgets:\n  requests: 1\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	d, err := e.Daemon(ctx)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	lab := string(hostmgr.FullControlLab)
	create := []string{"sandbox", "create", "lab", "--profile", lab, "--accept", hostmgr.AcceptPhrase("lab"), "--config", cfg}
	if e.Level != "" {
		create = append(create, "--level", e.Level)
	}
	for _, args := range [][]string{
		append(create, "--", "/bin/sleep", "1000"),
		{"sandbox", "start", "lab"},
	} {
		if r, err := d.Cordon(ctx, args...); err != nil || r.Code != 0 {
			return errf("%v: exit %d, %v: %s", args, r.Code, err, r.Stderr)
		}
	}
	before, err := daemonLs(ctx, d, "lab")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	calls := func() (int, string, error) {
		n := len(up.Seen())
		r, err := d.Cordon(ctx, "sandbox", "exec", "lab", "--", "/bin/sh", "-c", curlCall+"; "+curlCall)
		if err != nil {
			return 0, "", err
		}
		return len(up.Seen()) - n, strings.TrimSpace(r.Stdout), nil
	}
	inLab, labOut, err := calls()
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	d.Kill()
	if err := d.Start(ctx); err != nil {
		return conformance.Outcome{Err: err}
	}
	after, err := daemonLs(ctx, d, "lab")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	afterN, afterOut, err := calls()
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: "in the lab: " + labOut + " | after the restart: " + afterOut, Facts: []record.Fact{
		{Name: "the restarted daemon's view of the sandbox", Want: "SAFE_GUIDED, running, id " + before.ID,
			Got: fmt.Sprintf("%s, %s, id %s", after.Profile, after.State, after.ID),
			OK:  after.Profile == string(hostmgr.SafeGuided) && after.State == "running" && after.ID == before.ID, Source: "cordon sandbox ls --json"},
		{Name: "of two model calls after the restart under a one-request budget, requests reaching the upstream", Want: "at most 1",
			Got: fmt.Sprint(afterN), OK: afterN <= 1, Source: "the fake model upstream on the host, request count"},
		{Name: "two model calls in the lab sandbox under the same budget", Want: "FULL_CONTROL_LAB, 2 requests reach the upstream (the budget gate bypassed)",
			Got: fmt.Sprintf("%s, %d requests", before.Profile, inLab), OK: before.Profile == lab && inLab == 2,
			Source: "cordon sandbox ls --json; the fake model upstream on the host, request count", Control: true},
	}}
}
