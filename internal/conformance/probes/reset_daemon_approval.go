package probes

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "recovery.daemon-approval",
		Class:   record.Reset,
		Clause:  "§2.5 recovery; §9: recovery cannot resume consumed authority (a used approval)",
		Title:   "an approval used once by a daemon sandbox stays consumed across a daemon SIGKILL and restart: the same request never reaches the host again",
		Daemon:  true,
		Timeout: 90 * time.Second,
		Run:     gatewayProbe(daemonRestartApproval),
	})
}

// daemonRestartApproval: policy makes each connection to approve.test
// need an operator's approval, once. A daemon sandbox retries the request
// while the operator approves it: it reaches the target once (control:
// the approval route works). The daemon is SIGKILLed and restarted. From
// outside: the store lists the approval consumed, and the sandbox's same
// request never reaches the target again.
func daemonRestartApproval(ctx context.Context, e *conformance.Env) conformance.Outcome {
	target := fixture.NewTarget("approved")
	e.Cleanup(target.Close)
	key := secretValue()
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	pol, err := writeFile(e, "approve.cedar", `@id("approve") @approval("required")
permit (principal, action == Action::"egress.connect", resource == Host::"approve.test");
`)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	port := target.Port()
	cfg, err := modelConfig(e, "c.yaml", "http://127.0.0.1:9", keyFile, fmt.Sprintf(`policy: [%s]
approvals: {ttl: 5m}
egress:
  allow:
    - {host: approve.test, ports: [%s]}
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve: {approve.test: 127.0.0.1}
`, pol, port))
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	d, err := e.Daemon(ctx)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := d.Create(ctx, "ap", "--config", cfg, "--", "/bin/sleep", "1000"); err != nil {
		return conformance.Outcome{Err: err}
	}
	get := `curl -sS -o /dev/null -w '%{http_code}' --max-time 5 http://approve.test:` + port + `/`
	retry := `i=0; c=$(` + get + `); while [ "$c" != 200 ] && [ $i -lt 100 ]; do sleep 0.2; c=$(` + get + `); i=$((i+1)); done; echo "$c"`
	done := make(chan conformance.RunResult, 1)
	go func() {
		r, _ := d.Cordon(ctx, "sandbox", "exec", "ap", "--", "/bin/sh", "-c", retry)
		done <- r
	}()
	id, perr := pendingFor(ctx, e, d.StateDir, "approve.test", nil)
	var appr conformance.RunResult
	if perr == nil {
		appr, perr = e.Cordon(ctx, d.StateDir, "approvals", "approve", id)
	}
	first := <-done
	if perr != nil {
		return conformance.Outcome{Err: perr}
	}
	used := target.Hits()
	d.Kill()
	if err := d.Start(ctx); err != nil {
		return conformance.Outcome{Err: err}
	}
	as, err := approvals(ctx, e, d.StateDir)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	state := "absent"
	for _, a := range as {
		if a.ID == id {
			state = a.State
		}
	}
	again, err := d.Cordon(ctx, "sandbox", "exec", "ap", "--", "/bin/sh", "-c", get)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	n := target.Hits() - used
	return conformance.Outcome{Hint: "first: " + strings.TrimSpace(first.Stdout) + " | after the restart: " + strings.TrimSpace(again.Stdout), Facts: []record.Fact{
		{Name: "the used approval after the daemon's SIGKILL and restart", Want: "consumed", Got: state, OK: state == "consumed",
			Source: "the daemon's store, via cordon approvals list --all --json"},
		{Name: "the sandbox's same request after the restart, requests reaching the target", Want: "0", Got: fmt.Sprint(n), OK: n == 0,
			Source: "the target on the host, request count"},
		{Name: "the request while the operator approves it, before the crash", Want: "approve exit 0, 1 request reaches the target",
			Got: fmt.Sprintf("approve exit %d, %d requests", appr.Code, used), OK: appr.Code == 0 && used == 1,
			Source: "cordon approvals approve's exit status; the target on the host, request count", Control: true},
	}}
}
