package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "reset.state-scope",
		Class:  record.Reset,
		Clause: "§2.5 reset; §8: reset removes only scoped mutable state while preserving other workloads; §9: reset is ownership-scoped",
		Title:  "cordon state reset, and the agent's own reset, remove only their one scope's entries; another purpose's and another workload's survive; a partial scope is refused",
		Run:    gatewayProbe(stateScopeReset),
	})
}

// stateScopes are the three scopes the probe writes: the one it resets,
// then another purpose and another workload of the same tenant.
var stateScopes = []struct{ workload, purpose string }{
	{"probe-w1", "testing"}, {"probe-w1", "other"}, {"probe-w2", "testing"},
}

// stateScopeReset: a sandbox of each scope writes the same key through
// the state broker. Then the operator's reset without the whole scope
// must be refused and remove nothing, and the reset of the first scope
// must leave that scope empty and the other two intact, as the store
// lists them on the host (cordon state ls). Control: before the reset the
// first scope's entry is listed, so the reset is what removed it.
func stateScopeReset(ctx context.Context, e *conformance.Env) conformance.Outcome {
	st := e.StateDir()
	var hint []string
	for i, s := range stateScopes {
		cfg, err := writeFile(e, fmt.Sprintf("s%d.yaml", i), fmt.Sprintf("version: cordon/v1\nworkload: %s\ntenant: probe\npurpose: %s\n", s.workload, s.purpose))
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		r, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg},
			Op: []string{"http", "PUT", "$CORDON_STATE_URL/notes/a", "value of " + s.workload + "/" + s.purpose}})
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		hint = append(hint, r.Hint())
	}
	before, err := stateEntries(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	partial, err := e.Cordon(ctx, st, "state", "reset", "--workload", stateScopes[0].workload)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	afterPartial, err := stateEntries(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	reset, err := e.Cordon(ctx, st, "state", "reset", "--tenant", "probe", "--workload", stateScopes[0].workload, "--purpose", stateScopes[0].purpose)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	after, err := stateEntries(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	// The agent's own reset, from a sandbox of the second scope.
	ar, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", filepath.Join(e.Dir, "s1.yaml")},
		Op: []string{"http", "POST", "$CORDON_STATE_URL:reset"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	hint = append(hint, "agent reset: "+ar.Hint())
	afterAgent, err := stateEntries(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	const src = "the store, via cordon state ls --json on the host"
	want := func(n0, n1, n2 int) string {
		return fmt.Sprintf("%s=%d %s=%d %s=%d", scopeName(0), n0, scopeName(1), n1, scopeName(2), n2)
	}
	return conformance.Outcome{Hint: strings.Join(hint, " | "), Facts: []record.Fact{
		{Name: "a reset naming only the workload", Want: "refused (exit 125), entries unchanged", Got: fmt.Sprintf("exit %d, entries %s", partial.Code, countsOf(afterPartial)),
			OK: partial.Code == 125 && countsOf(afterPartial) == countsOf(before), Source: "cordon state reset's exit status; " + src},
		{Name: "entries per scope after resetting " + scopeName(0), Want: want(0, 1, 1), Got: countsOf(after) + fmt.Sprintf(" (reset exit %d)", reset.Code),
			OK: reset.Code == 0 && countsOf(after) == want(0, 1, 1), Source: src},
		{Name: "entries per scope after the agent of " + scopeName(1) + " reset its state", Want: want(0, 0, 1), Got: countsOf(afterAgent),
			OK: countsOf(afterAgent) == want(0, 0, 1), Source: src},
		{Name: "entries per scope before the reset", Want: want(1, 1, 1), Got: countsOf(before), OK: countsOf(before) == want(1, 1, 1),
			Source: src, Control: true},
	}}
}

func scopeName(i int) string {
	return "probe/" + stateScopes[i].workload + "/" + stateScopes[i].purpose
}

// stateEntries lists every entry of the state dir's store by scope.
func stateEntries(ctx context.Context, e *conformance.Env, st string) (map[string]int, error) {
	r, err := e.Cordon(ctx, st, "state", "ls", "--json")
	if err != nil {
		return nil, err
	}
	if r.Code != 0 {
		return nil, fmt.Errorf("cordon state ls: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
	}
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if l == "" {
			continue
		}
		var en struct{ Tenant, Workload, Purpose string }
		if err := json.Unmarshal([]byte(l), &en); err != nil {
			return nil, fmt.Errorf("state entry %q: %v", l, err)
		}
		out[en.Tenant+"/"+en.Workload+"/"+en.Purpose]++
	}
	return out, nil
}

// countsOf renders the three scopes' counts, then any other scope.
func countsOf(m map[string]int) string {
	var parts []string
	seen := map[string]bool{}
	for i := range stateScopes {
		n := scopeName(i)
		seen[n] = true
		parts = append(parts, fmt.Sprintf("%s=%d", n, m[n]))
	}
	var other []string
	for k, v := range m {
		if !seen[k] {
			other = append(other, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(other)
	return strings.Join(append(parts, other...), " ")
}
