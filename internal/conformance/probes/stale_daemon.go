package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "stale.drained-sandbox",
		Class:   record.StaleState,
		Clause:  "§2.5 stale state, §9 stale generation: a drained sandbox (admitted under a policy that changed) runs nothing new",
		Title:   "after the host policy changes, a daemon sandbox in DRAIN refuses exec: the program never runs; before the change it did",
		Daemon:  true,
		Timeout: 90 * time.Second,
		Run:     staleDrained,
	})
}

// lsEntry is one line of `cordon sandbox ls --json`.
type lsEntry struct {
	Name    string `json:"name"`
	State   string `json:"state"`
	Drain   string `json:"drain"`
	InitPid int    `json:"init_pid"`
}

func lsSandboxes(ctx context.Context, d *conformance.Daemon) (map[string]lsEntry, error) {
	r, err := d.Cordon(ctx, "sandbox", "ls", "--json")
	if err != nil {
		return nil, err
	}
	if r.Code != 0 {
		return nil, fmt.Errorf("sandbox ls: exit %d: %s", r.Code, firstLineOf(r.Stderr))
	}
	var ls []lsEntry
	if err := json.Unmarshal([]byte(r.Stdout), &ls); err != nil {
		return nil, fmt.Errorf("sandbox ls --json: %v: %s", err, r.Stdout)
	}
	out := map[string]lsEntry{}
	for _, s := range ls {
		out[s.Name] = s
	}
	return out, nil
}

// staleDrained: a daemon with a host policy directory creates a sandbox
// with a workspace. An exec writing a marker into the workspace works
// (the control: the host sees the marker). The host policy changes; once
// `sandbox ls` shows the sandbox draining, the same exec with another
// marker is refused and the host never sees that marker. The sandbox's
// init still runs (draining stops nothing that ran).
func staleDrained(ctx context.Context, e *conformance.Env) conformance.Outcome {
	pdir := filepath.Join(e.Dir, "policy")
	if err := os.Mkdir(pdir, 0o755); err != nil {
		return conformance.Outcome{Err: err}
	}
	pol := filepath.Join(pdir, "host.cedar")
	rule := `@id("conformance-drift") forbid(principal, action == Action::"model.invoke", resource == Model::"%s");`
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(rule, "before")), 0o644); err != nil {
		return conformance.Outcome{Err: err}
	}
	ws, err := ownedWorkspace(e, "ws")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	d, err := e.DaemonWith(ctx, "--policy-dir", pdir, "--drift-interval", "200ms")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := d.Create(ctx, "dr", "--workspace", ws, "--", "/bin/sleep", "1000"); err != nil {
		return conformance.Outcome{Err: err}
	}
	mark := func(name string) (conformance.RunResult, bool, error) {
		r, err := d.Cordon(ctx, "sandbox", "exec", "dr", "--", "/bin/sh", "-c", "echo ran > /workspace/"+name)
		if err != nil {
			return r, false, err
		}
		_, serr := os.Stat(filepath.Join(ws, name))
		return r, serr == nil, nil
	}
	before, ranBefore, err := mark("before")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(rule, "after")), 0o644); err != nil {
		return conformance.Outcome{Err: err}
	}
	var drain string
	var initPid int
	if err := pollUntil(ctx, func() (bool, error) {
		ls, err := lsSandboxes(ctx, d)
		drain, initPid = ls["dr"].Drain, ls["dr"].InitPid
		return drain != "", err
	}); err != nil {
		return conformance.Outcome{Err: fmt.Errorf("the sandbox never drained after the policy changed: %w", err)}
	}
	after, ranAfter, err := mark("after")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	initAlive := false
	if p, _, ok := readProcStamp(initPid); ok {
		initAlive = p.running()
	}
	return conformance.Outcome{Hint: strings.TrimSpace(after.Stderr), Facts: []record.Fact{
		{Name: "an exec's marker in the workspace while the sandbox drains (" + drain + ")", Want: "absent", Got: presence(ranAfter), OK: !ranAfter,
			Source: "the workspace directory on the host"},
		{Name: "cordon sandbox exec while draining", Want: "refused (non-zero exit)", Got: fmt.Sprintf("exit %d", after.Code), OK: after.Code != 0,
			Source: "the daemon's answer to the host-side client"},
		{Name: "the sandbox's init while draining", Want: "still running", Got: fmt.Sprintf("pid %d running=%v", initPid, initAlive), OK: initAlive,
			Source: "the host's /proc"},
		{Name: "the same exec's marker before the policy changed", Want: "present, exit 0", Got: fmt.Sprintf("%s, exit %d", presence(ranBefore), before.Code),
			OK: ranBefore && before.Code == 0, Source: "the workspace directory on the host", Control: true},
	}}
}

func presence(ok bool) string {
	if ok {
		return "present"
	}
	return "absent"
}

func init() {
	conformance.Register(conformance.Probe{
		ID:      "stale.daemon-listeners",
		Class:   record.StaleState,
		Clause:  "§2.5 stale state: a stopped sandbox's host listeners are gone",
		Title:   "a daemon sandbox's declared ingress route accepts a host connect while it runs and refuses it after `cordon sandbox stop`",
		Daemon:  true,
		Timeout: 60 * time.Second,
		Run:     staleStoppedDaemon,
	})
}

// staleStoppedDaemon: a daemon sandbox with one ingress route on a free
// loopback port. While it runs a host connect is accepted (the control);
// after `cordon sandbox stop` the same connect is refused and the
// sandbox's init no longer runs.
func staleStoppedDaemon(ctx context.Context, e *conformance.Env) conformance.Outcome {
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
`, addr), 0o644)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	d, err := e.Daemon(ctx)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := d.Create(ctx, "ln", "--config", cfg, "--", "/bin/sleep", "1000"); err != nil {
		return conformance.Outcome{Err: err}
	}
	ls, err := lsSandboxes(ctx, d)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	initProc, _, _ := readProcStamp(ls["ln"].InitPid)
	running := dial(addr)
	r, err := d.Cordon(ctx, "sandbox", "stop", "ln")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if r.Code != 0 {
		return conformance.Outcome{Err: fmt.Errorf("sandbox stop: exit %d: %s", r.Code, firstLineOf(r.Stderr))}
	}
	stopped := dial(addr)
	return conformance.Outcome{Facts: []record.Fact{
		{Name: "a connect from the host to the route's listener " + addr + " after sandbox stop", Want: "refused", Got: errText(stopped),
			OK: stopped != nil && isRefused(stopped), Source: "the runner's TCP connect on the host"},
		{Name: "the sandbox's init after sandbox stop", Want: "not running", Got: fmt.Sprintf("pid %d running=%v", initProc.Pid, initProc.running()),
			OK: initProc.Pid > 0 && !initProc.running(), Source: "the host's /proc (pid and start time)"},
		{Name: "the same connect while the sandbox ran", Want: "accepted", Got: errText(running), OK: running == nil,
			Source: "the runner's TCP connect on the host", Control: true},
	}}
}
