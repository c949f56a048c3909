package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "recovery.daemon-restart",
		Class:   record.Reset,
		Clause:  "§2.5 recovery; §9: recovery cannot resume consumed authority (a reservation the crash left open)",
		Title:   "the daemon SIGKILLed mid-stream and restarted: it adopts the running sandbox and charges the lost reservation in full; the budget then refuses",
		Daemon:  true,
		Timeout: 90 * time.Second,
		Run:     gatewayProbe(daemonRestart),
	})
}

// daemonSandbox is one entry of `sandbox ls --json`.
type daemonSandbox struct {
	Name    string `json:"name"`
	ID      string `json:"id"`
	State   string `json:"state"`
	Profile string `json:"profile"`
	InitPid int    `json:"init_pid"`
}

func daemonLs(ctx context.Context, d *conformance.Daemon, name string) (daemonSandbox, error) {
	r, err := d.Cordon(ctx, "sandbox", "ls", "--json")
	if err != nil {
		return daemonSandbox{}, err
	}
	var is []daemonSandbox
	if err := json.Unmarshal([]byte(r.Stdout), &is); err != nil {
		return daemonSandbox{}, fmt.Errorf("sandbox ls --json: exit %d: %v: %s", r.Code, err, strings.TrimSpace(r.Stderr))
	}
	for _, i := range is {
		if i.Name == name {
			return i, nil
		}
	}
	return daemonSandbox{}, fmt.Errorf("sandbox ls lists no %s: %s", name, r.Stdout)
}

// curlStream is the streamed model call a daemon sandbox makes with the
// host's curl (a daemon sandbox has no probe binary bound).
const curlStream = `curl -sS --max-time 60 -H 'content-type: application/json' -d '{"model":"claude-probe-1","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"`

// daemonRestart: a daemon sandbox streams a model call reserving 256 of a
// 400 output token budget; with the stream in flight the probe SIGKILLs
// the daemon and starts it again. From outside: the sandbox's processes
// outlive the crash and the restarted daemon lists it running under the
// same id (adopted); the reservation the dead gateway left open is
// charged in full (one gateway_lost receipt of 256 output tokens); the
// same call then never reaches the upstream. Controls: the first call,
// under the same budget, reached the upstream; the daemon listed the
// sandbox running before the crash.
func daemonRestart(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := newSlowUpstream(e, key)
	cfg, err := keyedModelConfig(e, up.srv.URL, key, "budgets:\n  output_tokens: 400\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	d, err := e.Daemon(ctx)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := d.Create(ctx, "gw", "--config", cfg, "--", "/bin/sleep", "1000"); err != nil {
		return conformance.Outcome{Err: err}
	}
	before, err := daemonLs(ctx, d, "gw")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	var procs []hostProc
	for _, pid := range cgroupProcs(before.ID) {
		if p, ok := readHostProc(pid); ok && inOtherUserns(pid) {
			procs = append(procs, p)
		}
	}
	if r, err := d.Cordon(ctx, "sandbox", "exec", "gw", "--", "/bin/sh", "-c", curlStream+" >/dev/null 2>&1 </dev/null &"); err != nil || r.Code != 0 {
		return errf("sandbox exec of the stream: exit %d, %v: %s", r.Code, err, r.Stderr)
	}
	select {
	case <-up.started:
	case <-time.After(30 * time.Second):
		return errf("the stream never reached the upstream")
	}
	admitted := up.requests.Load()
	d.Kill()
	if err := d.Start(ctx); err != nil {
		return conformance.Outcome{Err: err}
	}
	after, err := daemonLs(ctx, d, "gw")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	survived := len(procs) > 0 && !slices.ContainsFunc(procs, func(p hostProc) bool { return !p.alive() })
	rcs, err := receipts(ctx, e, d.StateDir)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	var lost []receipt
	for _, rc := range rcs {
		if rc.Identity.SandboxID == before.ID && rc.Reason == "gateway_lost" {
			lost = append(lost, rc)
		}
	}
	up.unblock()
	r, err := d.Cordon(ctx, "sandbox", "exec", "gw", "--", "/bin/sh", "-c", curlStream)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	again := up.requests.Load() - admitted
	lostGot := fmt.Sprintf("%d gateway_lost receipts", len(lost))
	if len(lost) == 1 {
		lostGot += fmt.Sprintf(", %d output tokens", lost[0].Usage.OutputTokens)
	}
	return conformance.Outcome{Hint: "the call after the restart printed: " + firstLine(r.Stdout), Facts: []record.Fact{
		{Name: "the sandbox's processes after the daemon's SIGKILL and restart", Want: "all alive (the same processes)", Got: fmt.Sprintf("%d processes, all alive %v", len(procs), survived),
			OK: survived, Source: "the host's /proc (pid and start time of the processes in the sandbox's cgroups)"},
		{Name: "the restarted daemon's view of the sandbox", Want: "running, id " + before.ID, Got: fmt.Sprintf("%s, id %s", after.State, after.ID),
			OK: after.State == "running" && after.ID == before.ID, Source: "cordon sandbox ls --json"},
		{Name: "the open reservation after the restart", Want: "1 gateway_lost receipt, 256 output tokens", Got: lostGot,
			OK: len(lost) == 1 && lost[0].Usage.OutputTokens == 256, Source: "the daemon's store, via cordon receipts --json"},
		{Name: "the same call after the charge (144 of 400 output tokens left)", Want: "0 upstream requests (refused by the budget)", Got: fmt.Sprintf("%d upstream requests", again),
			OK: again == 0, Source: "the slow model upstream on the host, request count"},
		{Name: "the first call under the same budget", Want: "1 upstream request", Got: fmt.Sprintf("%d upstream requests", admitted),
			OK: admitted == 1, Source: "the slow model upstream on the host, request count", Control: true},
		{Name: "the daemon's view of the sandbox before the crash", Want: "running", Got: before.State, OK: before.State == "running",
			Source: "cordon sandbox ls --json", Control: true},
	}}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
