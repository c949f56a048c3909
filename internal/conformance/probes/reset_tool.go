package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "recovery.killed-run-tool",
		Class:  record.Reset,
		Clause: "§2.5 recovery; §9: ambiguous effect outcomes quarantine until reconciliation; §8: Replay safety is preserved",
		Title:  "cordon SIGKILLed with a tool call in flight: after cordon gc the call is quarantined, and its retransmission in a later run does not run the tool again",
		Run:    gatewayProbe(killedRunTool),
	})
}

// toolCall is one line of `cordon calls list --json`.
type toolCall struct {
	ID    json.RawMessage `json:"id"`
	Tool  string          `json:"tool"`
	State string          `json:"state"`
}

func toolCalls(ctx context.Context, e *conformance.Env, st string) ([]toolCall, error) {
	r, err := e.Cordon(ctx, st, "calls", "list", "--json", "--limit", "0")
	if err != nil {
		return nil, err
	}
	if r.Code != 0 {
		return nil, fmt.Errorf("cordon calls list: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
	}
	var out []toolCall
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if l == "" {
			continue
		}
		var c toolCall
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			return nil, fmt.Errorf("call line %q: %v", l, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func callStates(cs []toolCall) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Tool+":"+c.State)
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// copyBin copies the binary under test into a fresh directory under
// e.Dir (what a tool server's bind may show, and nothing else).
func copyBin(e *conformance.Env) (string, error) {
	d := filepath.Join(e.Dir, "tools")
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", err
	}
	in, err := os.Open(e.Bin)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(d, "cordon"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	return d, out.Close()
}

// killedRunTool: a tool server (the binary's mcp-server op, in its own
// sandbox) appends a line to a host file each time its tool really runs.
// A held run calls it with an idempotency key; with the call in flight
// (the store lists it started, the host file has its line) the probe
// SIGKILLs cordon and runs cordon gc. From outside: the store lists the
// call quarantined, none started; a later run retransmitting the same
// call (same key) leaves the host file at one line. Control: a call with
// a new key runs the tool (a second line).
func killedRunTool(ctx context.Context, e *conformance.Env) conformance.Outcome {
	tools, err := copyBin(e)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	count, _, _, err := outDir(e, "count")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	pol, err := writeFile(e, "tools.cedar", `@id("sleep") permit(principal, action == Action::"tool.call", resource == Tool::"t/sleep");`)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	cfg, err := writeFile(e, "c.yaml", fmt.Sprintf(`version: cordon/v1
workload: conformance
tenant: probe
purpose: testing
policy: [%s]
tools:
  - name: t
    command: [/tools/cordon, __probe, mcp-server, /count/calls]
    binds:
      - {source: %s, target: /tools}
      - {source: %s, target: /count, writable: true}
    timeout: 60s
`, pol, tools, count))
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	invocations := func() int {
		b, _ := os.ReadFile(filepath.Join(count, "calls"))
		return strings.Count(string(b), "\n")
	}
	st := e.StateDir()
	const args = `{"seconds":20}`
	h, err := e.Start(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"hold", "mcp-call-bg", "t__sleep", args, "probe-key-1"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	var inflight []toolCall
	if !waitFor(20*time.Second, func() bool {
		inflight, _ = toolCalls(ctx, e, st)
		return (len(inflight) == 1 && inflight[0].State == "started" && invocations() == 1) || ctx.Err() != nil
	}) || len(inflight) != 1 {
		return errf("the tool call was not in flight: calls %s, %d invocations (op %s)", callStates(inflight), invocations(), opJSON(h.Op))
	}
	if err := syscall.Kill(h.Pid(), syscall.SIGKILL); err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := h.Finish(ctx); err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := runGC(ctx, e, st); err != nil {
		return conformance.Outcome{Err: err}
	}
	afterGC, err := toolCalls(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	re, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"mcp-call", "t__sleep", args, "probe-key-1"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	replayed := invocations()
	c, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"mcp-call", "t__sleep", `{"seconds":0}`, "probe-key-2"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	control := invocations()
	return conformance.Outcome{Hint: "retransmission: " + re.Hint() + " | control: " + c.Hint(), Facts: []record.Fact{
		{Name: "the call in flight at the kill, after cordon gc", Want: "sleep:quarantined", Got: callStates(afterGC),
			OK: callStates(afterGC) == "sleep:quarantined", Source: "the store, via cordon calls list --json"},
		{Name: "times the tool ran after a later run retransmitted the call (same idempotency key)", Want: "1 (the killed call only)", Got: fmt.Sprint(replayed),
			OK: replayed == 1, Source: "the host file the tool server appends to on each run of the tool"},
		{Name: "times the tool ran after a call with a new key", Want: "2", Got: fmt.Sprint(control), OK: control == 2,
			Source: "the host file the tool server appends to on each run of the tool", Control: true},
	}}
}
