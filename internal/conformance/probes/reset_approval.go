package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "recovery.killed-run-approval",
		Class:  record.Reset,
		Clause: "§2.5 recovery; §9: recovery cannot resume revoked or stale authority (a pending approval)",
		Title:  "cordon SIGKILLed with an approval pending: after cordon gc the approval is revoked, cannot be approved, nothing reaches the host it named, and nothing of the sandbox remains",
		Run:    gatewayProbe(killedRunApproval),
	})
}

// approvalLine is one line of `cordon approvals list --json`.
type approvalLine struct {
	ID, State, Action, Target string
}

func approvals(ctx context.Context, e *conformance.Env, st string) ([]approvalLine, error) {
	r, err := e.Cordon(ctx, st, "approvals", "list", "--all", "--json")
	if err != nil {
		return nil, err
	}
	if r.Code != 0 {
		return nil, fmt.Errorf("cordon approvals list: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
	}
	var out []approvalLine
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if l == "" {
			continue
		}
		var a approvalLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			return nil, fmt.Errorf("approval line %q: %v", l, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// pendingFor waits up to 20s for a pending approval of target whose ID
// is not in known.
func pendingFor(ctx context.Context, e *conformance.Env, st, target string, known []string) (string, error) {
	var id string
	var lerr error
	waitFor(20*time.Second, func() bool {
		as, err := approvals(ctx, e, st)
		if err != nil {
			lerr = err
			return ctx.Err() != nil
		}
		for _, a := range as {
			if a.State == "pending" && a.Target == target && !slices.Contains(known, a.ID) {
				id = a.ID
				return true
			}
		}
		return ctx.Err() != nil
	})
	if id == "" {
		return "", fmt.Errorf("no new pending approval for %s (last error: %v)", target, lerr)
	}
	return id, nil
}

// killedRunApproval: policy makes every connection to approve.test need
// an operator's approval. A held run asks (the gateway records a pending
// approval and refuses for now); the probe SIGKILLs cordon and runs cordon
// gc. From outside: the approval is no longer pending (revoked), the
// operator's approve is refused, and a later run asking the same never
// reaches the target. Control: in a live run the operator's approve of
// the same request lets it through (1 hit on the target).
func killedRunApproval(ctx context.Context, e *conformance.Env) conformance.Outcome {
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
	url := "http://approve.test:" + port + "/"
	st := e.StateDir()
	h, err := e.Start(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"hold", "http", "GET", url}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	id, err := pendingFor(ctx, e, st, "approve.test", nil)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	k, err := observeLive(ctx, e, st, h)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	seen := k.residue(st)
	if err := syscall.Kill(h.Pid(), syscall.SIGKILL); err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := h.Finish(ctx); err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := runGC(ctx, e, st); err != nil {
		return conformance.Outcome{Err: err}
	}
	left := k.residue(st)
	as, err := approvals(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	state := "absent"
	for _, a := range as {
		if a.ID == id {
			state = a.State
		}
	}
	appr, err := e.Cordon(ctx, st, "approvals", "approve", id)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	later, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"http", "GET", url}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	hits := target.Hits()
	ctl, capprove, ctlHits, err := liveApprovalControl(ctx, e, st, cfg, url, target)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: "held: " + opJSON(h.Op) + " | later: " + later.Hint() + " | control: " + ctl.Hint(), Facts: []record.Fact{
		{Name: "the killed run's pending approval after cordon gc", Want: "revoked", Got: state, OK: state == "revoked",
			Source: "the store, via cordon approvals list --all --json"},
		{Name: "the operator approving it after cordon gc", Want: "refused (non-zero exit)", Got: fmt.Sprintf("exit %d: %s", appr.Code, firstLine(appr.Stderr)),
			OK: appr.Code != 0, Source: "cordon approvals approve's exit status"},
		{Name: "requests that reached approve.test's target, a later run asking the same included", Want: "0", Got: fmt.Sprint(hits), OK: hits == 0,
			Source: "the target on the host, request count"},
		{Name: "what of the killed sandbox remains on the host after cordon gc", Want: "nothing", Got: orNothing(left), OK: len(left) == 0,
			Source: "the host's /proc; /sys/fs/cgroup/*/cordon; /proc/*/ns/{net,mnt}; /proc/self/mountinfo under the state dir"},
		{Name: "the sandbox on the host before the kill", Want: "processes, cgroups and namespaces seen where the residue check looks",
			Got: orNothing(seen), OK: hasAll(seen, "process", "cgroups", "net:[", "mnt:["), Source: "the host's /proc; /sys/fs/cgroup/*/cordon", Control: true},
		{Name: "a live run's same request once the operator approves it", Want: "approve exit 0, 1 request reaches the target",
			Got: fmt.Sprintf("approve exit %d, %d requests", capprove.Code, ctlHits), OK: capprove.Code == 0 && ctlHits == 1,
			Source: "cordon approvals approve's exit status; the target on the host, request count", Control: true},
	}}
}

// liveApprovalControl is killedRunApproval's positive control: a live run
// retries while the operator approves its request, which then reaches the
// target once. Every approval already in the store is not its.
func liveApprovalControl(ctx context.Context, e *conformance.Env, st, cfg, url string, target *fixture.Target) (ctl, approve conformance.RunResult, hits int64, err error) {
	before := target.Hits()
	var known []string
	as, err := approvals(ctx, e, st)
	if err != nil {
		return ctl, approve, 0, err
	}
	for _, a := range as {
		known = append(known, a.ID)
	}
	done := make(chan error, 1)
	go func() {
		var err error
		ctl, err = gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"http-until", "200", "20", "GET", url}})
		done <- err
	}()
	cid, perr := pendingFor(ctx, e, st, "approve.test", known)
	if perr == nil {
		approve, perr = e.Cordon(ctx, st, "approvals", "approve", cid)
	}
	if err := <-done; err != nil {
		return ctl, approve, 0, err
	}
	if perr != nil {
		return ctl, approve, 0, perr
	}
	return ctl, approve, target.Hits() - before, nil
}
