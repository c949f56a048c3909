package probes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "stale.approval-revoked",
		Class:   record.StaleState,
		Clause:  "§2.5 stale state, §9 recovery cannot resume revoked authority: a revoked approval never authorizes a crossing again",
		Title:   "a sandbox-scoped egress approval admits connections while granted; once revoked with `cordon approvals revoke` the next connection never reaches the target",
		Timeout: 90 * time.Second,
		Run:     staleApprovalRevoked,
	})
	conformance.Register(conformance.Probe{
		ID:      "stale.stopped-listeners",
		Class:   record.StaleState,
		Clause:  "§2.5 stale state: a stopped sandbox's host listeners are gone",
		Title:   "the host listener of a sandbox's declared ingress route accepts while the sandbox runs and refuses once it stopped",
		Timeout: 60 * time.Second,
		Run:     staleStoppedListeners,
	})
}

// probeFile writes a file under the probe's directory.
func probeFile(e *conformance.Env, name, body string, mode os.FileMode) (string, error) {
	p := filepath.Join(e.Dir, name)
	return p, os.WriteFile(p, []byte(body), mode)
}

// approvalEntry is one line of `cordon approvals list --json`.
type approvalEntry struct {
	ID, State, Action, Target string
}

// listApprovals lists the approvals of stateDir (all of them with all).
func listApprovals(ctx context.Context, e *conformance.Env, stateDir string, all bool) ([]approvalEntry, error) {
	args := []string{"approvals", "list", "--json"}
	if all {
		args = append(args, "--all")
	}
	r, err := e.Cordon(ctx, stateDir, args...)
	if err != nil {
		return nil, err
	}
	if r.Code != 0 {
		return nil, fmt.Errorf("cordon approvals list: exit %d: %s", r.Code, firstLineOf(r.Stderr))
	}
	var out []approvalEntry
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var a approvalEntry
		if json.Unmarshal([]byte(l), &a) == nil && a.ID != "" {
			out = append(out, a)
		}
	}
	return out, nil
}

// pollUntil polls cond every 100 ms until it holds or ctx ends.
func pollUntil(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// staleApprovalRevoked: policy holds egress to stale.test for a
// sandbox-scoped approval. The program retries until a connection passes,
// waits for the host's signal, and connects once more. The host approves
// the pending request from outside (`cordon approvals approve`), waits
// until the target counted the connection (the control: while granted it
// admits), revokes it (`cordon approvals revoke`), signals, and then reads
// the target's count: unchanged. The store shows the approval revoked
// while the sandbox still runs.
func staleApprovalRevoked(ctx context.Context, e *conformance.Env) conformance.Outcome {
	target := fixture.NewTarget("stale")
	e.Cleanup(target.Close)
	port := target.Port()
	cfg, err := approvalConfig(e, port)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	sig := filepath.Join(e.Dir, "signal")
	if err := os.Mkdir(sig, 0o755); err != nil {
		return conformance.Outcome{Err: err}
	}
	script := fmt.Sprintf(`get() { %[1]s __probe request GET http://stale.test:%[2]s/; }
i=0; until get | grep -q '"data":"status=200 '; do i=$((i+1)); [ $i -gt 400 ] && exit 3; sleep 0.2; done
i=0; until [ -e /signal/revoked ]; do i=$((i+1)); [ $i -gt 400 ] && exit 4; sleep 0.1; done
get
`, conformance.ProbeBin, port)
	st := e.StateDir()
	done := make(chan conformance.RunResult, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := e.Run(ctx, conformance.RunOpts{StateDir: st,
			Flags: []string{"--config", cfg, "--ro", e.Bin + ":" + conformance.ProbeBin, "--ro", sig + ":/signal"},
			Argv:  []string{"/bin/sh", "-c", script}})
		if err != nil {
			errc <- err
			return
		}
		done <- r
	}()
	var id string
	err = pollUntil(ctx, func() (bool, error) {
		// A run that ended (refused, or broke) will never ask.
		select {
		case r := <-done:
			return false, fmt.Errorf("the run ended (exit %d) before it asked: %s", r.Code, firstLineOf(r.Stderr))
		case err := <-errc:
			return false, err
		default:
		}
		as, err := listApprovals(ctx, e, st, false)
		for _, a := range as {
			if a.State == "pending" && a.Target == "stale.test" && a.Action == "egress.connect" {
				id = a.ID
			}
		}
		return id != "", err
	})
	if err != nil {
		return conformance.Outcome{Err: fmt.Errorf("no pending approval for stale.test appeared: %w", err)}
	}
	if r, err := e.Cordon(ctx, st, "approvals", "approve", id); err != nil || r.Code != 0 {
		return conformance.Outcome{Err: fmt.Errorf("cordon approvals approve: %v %s", err, firstLineOf(r.Stderr))}
	}
	if err := pollUntil(ctx, func() (bool, error) { return target.Hits() >= 1, nil }); err != nil {
		return conformance.Outcome{Err: fmt.Errorf("the approved connection never reached the target: %w", err)}
	}
	granted := target.Hits()
	if r, err := e.Cordon(ctx, st, "approvals", "revoke", id); err != nil || r.Code != 0 {
		return conformance.Outcome{Err: fmt.Errorf("cordon approvals revoke: %v %s", err, firstLineOf(r.Stderr))}
	}
	// Read back before the sandbox ends (its end revokes its approvals
	// anyway): the revocation itself is what the store shows.
	state := "absent"
	as, err := listApprovals(ctx, e, st, true)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	for _, a := range as {
		if a.ID == id {
			state = a.State
		}
	}
	if err := os.WriteFile(filepath.Join(sig, "revoked"), nil, 0o644); err != nil {
		return conformance.Outcome{Err: err}
	}
	var r conformance.RunResult
	select {
	case r = <-done:
	case err := <-errc:
		return conformance.Outcome{Err: err}
	}
	if r.Code != 0 {
		return conformance.Outcome{Err: fmt.Errorf("the program exited %d: %s", r.Code, firstLineOf(r.Stderr))}
	}
	time.Sleep(100 * time.Millisecond)
	after := target.Hits()
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		{Name: "requests reaching the target after the approval was revoked", Want: "0", Got: strconv.FormatInt(after-granted, 10), OK: after == granted,
			Source: "the runner's egress target on the host, request count"},
		{Name: "the approval in the store after `cordon approvals revoke`, the sandbox still running", Want: "revoked", Got: state, OK: state == "revoked", Source: "cordon approvals list --all --json"},
		{Name: "requests reaching the target while the approval was granted", Want: "1", Got: strconv.FormatInt(granted, 10), OK: granted == 1,
			Source: "the runner's egress target on the host, request count", Control: true},
	}}
}

// approvalConfig writes the policy and config of staleApprovalRevoked:
// egress to stale.test:port needs a sandbox-scoped approval.
func approvalConfig(e *conformance.Env, port string) (string, error) {
	pol, err := probeFile(e, "egress.cedar", `@id("stale") @approval("required") @approval_scope("sandbox")
permit (principal, action == Action::"egress.connect", resource == Host::"stale.test");
`, 0o644)
	if err != nil {
		return "", err
	}
	return probeFile(e, "cordon.yaml", fmt.Sprintf(`version: cordon/v1
workload: conformance-stale
tenant: conformance
purpose: testing
policy: [%s]
approvals: {ttl: 5m}
egress:
  allow:
    - {host: stale.test, ports: [%s]}
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    stale.test: 127.0.0.1
`, pol, port), 0o600)
}

// freePort finds a free loopback TCP port (closed again at once: a tiny
// window in which another process could take it).
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, p, err := net.SplitHostPort(ln.Addr().String())
	return p, err
}

// staleStoppedListeners: a sandbox with one declared ingress route, whose
// host listener is on a free loopback port. While the program holds, a
// connect from the host is accepted (the control); after the sandbox
// stopped, the same connect is refused, and none of the processes cordon
// ran for it (the gateway's brokers, whose own listeners live in the
// sandbox's network namespace, included) still runs.
func staleStoppedListeners(ctx context.Context, e *conformance.Env) conformance.Outcome {
	port, err := freePort()
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	addr := "127.0.0.1:" + port
	cfg, err := probeFile(e, "cordon.yaml", fmt.Sprintf(`version: cordon/v1
workload: conformance-stopped
tenant: conformance
purpose: testing
ingress:
  - {name: ui, port: 18789, listen: %q}
`, addr), 0o600)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	h, err := e.Start(ctx, conformance.RunOpts{Flags: []string{"--config", cfg}, Op: []string{"hold", "ids"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	running := dial(addr)
	// Everything cordon started for this sandbox: its init and program,
	// the gateway's broker processes (whose listeners are in the
	// sandbox's network namespace) and the ingress broker.
	procs := descendants(h.Pid())
	r, err := h.Finish(ctx)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if r.Code != 0 {
		return conformance.Outcome{Err: fmt.Errorf("the held run exited %d: %s", r.Code, firstLineOf(r.Stderr))}
	}
	stopped := dial(addr)
	left := stillRunning(procs)
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		{Name: fmt.Sprintf("of the %d processes cordon ran for the sandbox and its gateway, those running after the stop", len(procs)), Want: "none",
			Got: fmt.Sprint(left), OK: len(procs) > 0 && len(left) == 0, Source: "the host's /proc (pid and start time)"},
		{Name: "a connect from the host to the route's listener " + addr + " after the sandbox stopped", Want: "refused", Got: errText(stopped),
			OK: stopped != nil && isRefused(stopped), Source: "the runner's TCP connect on the host"},
		{Name: "the same connect while the sandbox ran", Want: "accepted", Got: errText(running), OK: running == nil,
			Source: "the runner's TCP connect on the host", Control: true},
	}}
}

func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func errText(err error) string {
	if err == nil {
		return "accepted"
	}
	if isRefused(err) {
		return "refused"
	}
	return err.Error()
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}
