package record

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/sandbox/level"
)

// signedPredicate signs r as cordon does and returns what a verifier
// decodes: the record and the predicate bytes the signature covers.
func signedPredicate(t *testing.T, r *Record) (*Record, []byte) {
	t.Helper()
	k, pub := testKey(t)
	env, err := Sign(r, k)
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.Verify(env, pub)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromStatement(st)
	if err != nil {
		t.Fatal(err)
	}
	return got, st.Predicate
}

// TestCheckAcceptsJudgedRecords is the control: records Finish judged
// (admitted, and not) pass Check, also with a hint of invalid UTF-8
// printed inside the sandbox.
func TestCheckAcceptsJudgedRecords(t *testing.T) {
	r := Sample()
	r.Probes[2].Hint = "bad \xff\xfe utf-8 <script>"
	got, pred := signedPredicate(t, r)
	if err := got.Check(pred); err != nil {
		t.Fatalf("a judged record: %v", err)
	}
	low := Sample()
	low.Probes[1].Verdict, low.Probes[1].Facts[0].OK = Fail, false
	low.Finish(low.Probes, low.Window.Finished)
	got, pred = signedPredicate(t, low)
	if err := got.Check(pred); err != nil || got.Claim.Admitted != NoClaim {
		t.Fatalf("a record admitting no claim: %v (claim %s)", err, got.Claim.Admitted)
	}
}

// TestCheckRejudgesTheClaim: a record whose signature verifies but whose
// claim, maturity or a probe's verdict is stronger than its probes
// support (a broken or altered runner, a hand-edited record re-signed)
// is refused, naming the field.
func TestCheckRejudgesTheClaim(t *testing.T) {
	cases := []struct {
		name, field string
		mut         func(r *Record)
	}{
		{"claim over failing probe", ".claim", func(r *Record) {
			r.Probes[1].Verdict, r.Probes[1].Facts[0].OK, r.Probes[1].Facts[0].Got = Fail, false, "reached"
			// the claim and maturity stay as judged before the failure
		}},
		{"pass with a contradicting fact", ".probes[1].verdict", func(r *Record) {
			r.Probes[1].Facts[0].OK, r.Probes[1].Facts[0].Got = false, "reached"
		}},
		{"pass without a positive control", ".probes[1].verdict", func(r *Record) {
			r.Probes[1].Facts = r.Probes[1].Facts[:1]
		}},
		{"pass observing nothing", ".probes[3].verdict", func(r *Record) {
			r.Probes[3].Facts = r.Probes[3].Facts[1:]
		}},
		{"ceiling above the provider", ".claim", func(r *Record) {
			r.Provider.Capability.MaxLevel = level.Shared
		}},
		{"maturity over the claim", ".maturity.is", func(r *Record) {
			r.Provider.Name, r.Provider.Capability.Provider = "fake", "fake"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Sample()
			c.mut(r)
			got, pred := signedPredicate(t, r)
			var fe *attest.FieldError
			err := got.Check(pred)
			if !errors.As(err, &fe) || fe.Field != "statement.predicate"+c.field {
				t.Fatalf("err = %v, want a problem at statement.predicate%s", err, c.field)
			}
		})
	}
}

// TestCheckRefusesNonCanonicalPredicate: a signed predicate with a
// duplicate key, or the key in another case, reads as one record to
// encoding/json (last wins, case folded) and another to other parsers
// (jq, Python: first/other key); Check refuses both.
func TestCheckRefusesNonCanonicalPredicate(t *testing.T) {
	b, err := json.Marshal(Sample())
	if err != nil {
		t.Fatal(err)
	}
	low := Sample()
	low.Probes[1].Verdict, low.Probes[1].Facts[0].OK = Fail, false
	low.Finish(low.Probes, low.Window.Finished)
	lb, _ := json.Marshal(low)
	var lm map[string]json.RawMessage
	json.Unmarshal(lb, &lm)
	for name, pred := range map[string]string{
		"duplicate key":   `{"probes":` + string(lm["probes"]) + `,` + string(b[1:]),
		"case-folded key": strings.Replace(string(b), `"probes":`, `"PROBES":`+string(lm["probes"])+`,"probes":`, 1),
		"escaped key":     strings.Replace(string(b), `"schema"`, `"sch\u0065ma"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			var r Record
			if err := strictDecode([]byte(pred), &r); err != nil {
				t.Fatalf("control: encoding/json must accept it (the attack): %v", err)
			}
			var fe *attest.FieldError
			if err := r.Check([]byte(pred)); !errors.As(err, &fe) || fe.Field != "statement.predicate" {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TestPartialRunAdmitsNoClaim: a run that selected one passing probe per
// class (--only), leaving out the rest of the suite (some of which may
// fail on this host), admitted DEDICATED_CONTAINER. Its record now lists
// the probes not run and admits no claim; a record that lists them but
// still claims the level is refused by Check. The control: the same
// probes with nothing left out admit the level.
func TestPartialRunAdmitsNoClaim(t *testing.T) {
	full := Sample()
	if full.Claim.Admitted != "DEDICATED_CONTAINER" {
		t.Fatalf("control: %s", full.Claim.Admitted)
	}
	r := Sample()
	r.NotRun = []string{"bypass.net.host-loopback"}
	r.Finish(r.Probes, r.Window.Finished)
	if r.Claim.Admitted != NoClaim || !strings.Contains(strings.Join(r.Claim.Why, ";"), "partial run: 1 probes") {
		t.Fatalf("partial run: claim %s why %v", r.Claim.Admitted, r.Claim.Why)
	}
	got, pred := signedPredicate(t, r)
	if err := got.Check(pred); err != nil {
		t.Fatalf("the judged partial record: %v", err)
	}
	lying := Sample()
	lying.NotRun = []string{"bypass.net.host-loopback"}
	got, pred = signedPredicate(t, lying)
	var fe *attest.FieldError
	if err := got.Check(pred); !errors.As(err, &fe) || fe.Field != "statement.predicate.claim" {
		t.Fatalf("a partial record claiming the level: %v", err)
	}
}
