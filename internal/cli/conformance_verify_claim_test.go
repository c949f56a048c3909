package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// TestConformanceVerifyRejudgesClaim: a record signed with the host's own
// key whose probe failed but whose claim still says DEDICATED_CONTAINER
// (a broken or altered runner; a hand-edited record re-signed) verified
// before: the signature covers it. verify and report re-judge the claim
// from the probes and refuse it; the same record judged honestly (the
// control) verifies.
func TestConformanceVerifyRejudgesClaim(t *testing.T) {
	f := newConformanceFixture(t)
	k, err := attest.LoadKey(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(r *record.Record) string {
		env, err := record.Sign(r, k)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := attest.Marshal(env)
		p := filepath.Join(t.TempDir(), "record.json")
		os.WriteFile(p, b, 0o644)
		return p
	}
	honest := record.Sample()
	honest.Probes[1].Verdict, honest.Probes[1].Facts[0].OK, honest.Probes[1].Facts[0].Got = record.Fail, false, "reached"
	lying := record.Sample()
	lying.Probes[1] = honest.Probes[1] // claim and maturity stay DEDICATED_CONTAINER
	honest.Finish(honest.Probes, honest.Window.Finished)

	if rep := f.g.conformanceVerify(context.Background(), sign(honest), verifyFlagsC{key: f.pub}); !rep.OK || rep.Claim != record.NoClaim {
		t.Fatalf("control: the honest record: ok %v claim %s %+v", rep.OK, rep.Claim, rep.Problems)
	}
	lp := sign(lying)
	rep := f.g.conformanceVerify(context.Background(), lp, verifyFlagsC{key: f.pub})
	if rep.OK || len(rep.Problems) != 1 || rep.Problems[0].Where != "statement.predicate.claim" || !strings.Contains(rep.Problems[0].Detail, "admit NONE") {
		t.Fatalf("the over-claiming record: ok %v claim %q problems %+v", rep.OK, rep.Claim, rep.Problems)
	}
	// report refuses it as not verified (and --unverified shows the banner).
	out := filepath.Join(t.TempDir(), "r.html")
	if err := f.g.conformanceReport(lp, out, f.pub, false); err == nil {
		t.Fatal("report rendered an over-claiming record as verified")
	}
	if err := f.g.conformanceReport(lp, out, f.pub, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "NOT VERIFIED: statement.predicate.claim") {
		t.Errorf("the report of the over-claiming record has no NOT VERIFIED banner")
	}
}
