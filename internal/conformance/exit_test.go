package conformance

import (
	"context"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

func TestExitStatus(t *testing.T) {
	res := func(c record.Class, v record.Verdict) record.ProbeResult {
		return record.ProbeResult{Class: c, Verdict: v}
	}
	all := func(v record.Verdict) []record.ProbeResult {
		var out []record.ProbeResult
		for _, c := range record.Classes() {
			out = append(out, res(c, v))
		}
		return out
	}
	tests := []struct {
		name string
		r    Report
		want int
	}{
		{"every class passes", Report{Full: true, Results: all(record.Pass)}, ExitPass},
		{"one fail", Report{Full: true, Results: append(all(record.Pass), res(record.Bypass, record.Fail))}, ExitFail},
		{"a class missing", Report{Full: true, Results: all(record.Pass)[1:]}, ExitIncomplete},
		{"all not evidenced", Report{Full: true, Results: all(record.NotEvidenced)}, ExitIncomplete},
		{"partial: its class passes", Report{Results: []record.ProbeResult{res(record.Bypass, record.Pass)}}, ExitPass},
		{"partial: nothing passed", Report{Results: []record.ProbeResult{res(record.Bypass, record.NotEvidenced)}}, ExitIncomplete},
		{"partial: a selected class without pass", Report{Results: []record.ProbeResult{res(record.Bypass, record.Pass), res(record.Failure, record.NotEvidenced)}}, ExitIncomplete},
		{"nothing ran", Report{}, ExitIncomplete},
	}
	for _, tc := range tests {
		if got := tc.r.ExitStatus(); got != tc.want {
			t.Errorf("%s: ExitStatus = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A provider that cannot evidence the level requested runs no probe:
// each is not evidenced with the reason, never run (the probe's Run
// would fail the test).
func TestCannotEvidenceRunsNothing(t *testing.T) {
	Register(Probe{ID: "bypass.test-only.never-run", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(context.Context, *Env) Outcome { t.Error("the probe ran"); return Outcome{} }})
	rep, err := Run(context.Background(), Options{Bin: "/nonexistent/cordon", Only: []string{"bypass.test-only.never-run"},
		Dir: t.TempDir(), CannotEvidence: "provider x evidences at most SHARED here"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Verdict != record.NotEvidenced || rep.Results[0].Reason == "" {
		t.Fatalf("results = %+v, want one not_evidenced with its reason", rep.Results)
	}
	if rep.Baseline != nil || rep.BaselineError == "" {
		t.Errorf("baseline = %v, %q: want none, and why", rep.Baseline, rep.BaselineError)
	}
	if rep.ExitStatus() != ExitIncomplete {
		t.Errorf("exit status %d, want %d", rep.ExitStatus(), ExitIncomplete)
	}
}

// A scratch directory too deep for the sockets the suite's sandboxes make
// under it is refused before anything runs; a short one is not.
func TestScratchDirTooDeep(t *testing.T) {
	Register(Probe{ID: "bypass.test-only.depth", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(context.Context, *Env) Outcome { return Outcome{} }})
	o := Options{Bin: "/nonexistent/cordon", Only: []string{"bypass.test-only.depth"}, CannotEvidence: "x"}
	o.Dir = "/" + strings.Repeat("d", maxSocketPath-len(longestSocket))
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "TMPDIR") {
		t.Fatalf("Run in %d-byte dir = %v, want a refusal naming TMPDIR", len(o.Dir), err)
	}
	o.Dir = t.TempDir()
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("control: Run in %s: %v", o.Dir, err)
	}
}
