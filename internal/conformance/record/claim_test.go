package record

import (
	"testing"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
)

// TestNotEvidencedNarrowsTheClaim: a probe not evidenced is named in the
// claim and among the record's non-claims (the claim does not cover it),
// once, however often Finish runs.
func TestNotEvidencedNarrowsTheClaim(t *testing.T) {
	var probes []ProbeResult
	for _, c := range Classes() {
		probes = append(probes, ProbeResult{ID: string(c) + ".ok", Class: c, Verdict: Pass})
	}
	probes = append(probes, ProbeResult{ID: "reset_recovery.crash", Class: Reset, Verdict: NotEvidenced, Reason: "needs the test build"})
	capability := sandbox.Capability{Provider: "p", MaxLevel: level.DedicatedContainer}
	c := Judge("DEDICATED_CONTAINER", "", capability, probes)
	if c.Admitted != "DEDICATED_CONTAINER" {
		t.Fatalf("claim = %+v, want DEDICATED_CONTAINER admitted (a not_evidenced probe is not a failure)", c)
	}
	want := notEvidencedPrefix + "reset_recovery.crash: needs the test build"
	if nc := c.NonClaims(); len(nc) != 1 || nc[0] != want {
		t.Errorf("NonClaims = %q, want [%q]", nc, want)
	}
}
