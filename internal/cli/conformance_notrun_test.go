package cli

import (
	"slices"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// TestNotRunCountsSelectionAndDeadline: the probes --only left out and
// those --timeout cut off (not_evidenced, "not run: the suite's deadline
// passed") are the record's not_run, so neither can drop a probe that
// fails on this host and keep the claim; a probe that ran and was not
// evidenced for another reason is not counted (the control).
func TestNotRunCountsSelectionAndDeadline(t *testing.T) {
	all := conformance.All()
	if len(all) < 3 {
		t.Fatalf("%d probes registered", len(all))
	}
	sel := all[:2]
	res := []record.ProbeResult{
		{ID: all[0].ID, Verdict: record.NotEvidenced, Reason: conformance.NotRunDeadline + " (--timeout 1s)"},
		{ID: all[1].ID, Verdict: record.NotEvidenced, Reason: "destructive probe: runs only when …"},
	}
	got := notRun(sel, res)
	if !slices.Contains(got, all[0].ID) || slices.Contains(got, all[1].ID) || !slices.Contains(got, all[2].ID) || len(got) != len(all)-1 {
		t.Fatalf("not_run = %v", got)
	}
	full := make([]record.ProbeResult, len(all))
	for i, p := range all {
		full[i] = record.ProbeResult{ID: p.ID, Verdict: record.Pass}
	}
	if got := notRun(all, full); len(got) != 0 {
		t.Fatalf("a full run: not_run = %v", got)
	}
}
