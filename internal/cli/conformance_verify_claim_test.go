package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
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

// TestConformanceVerifyRefusesAmbiguousStatement: a statement signed with
// the host's key whose subject carries "digest" twice reads, to
// encoding/json (last wins), as the record's binary, and to a first-wins
// parser as another file. verify refuses a payload that is not the
// statement as cordon encodes it; the control is the same statement
// encoded canonically and signed the same way.
func TestConformanceVerifyRefusesAmbiguousStatement(t *testing.T) {
	f := newConformanceFixture(t)
	k, err := attest.LoadKey(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := record.Sample().Statement()
	if err != nil {
		t.Fatal(err)
	}
	canon, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	evil := `"digest":{"sha256":"` + strings.Repeat("e", 64) + `"},"digest":`
	ambiguous := strings.Replace(string(canon), `"digest":`, evil, 1)
	sign := func(body string) string {
		sig := ed25519.Sign(k.Private, attest.PAE(attest.PayloadType, []byte(body)))
		b, _ := attest.Marshal(attest.Envelope{PayloadType: attest.PayloadType, Payload: base64.StdEncoding.EncodeToString([]byte(body)),
			Signatures: []attest.Signature{{KeyID: k.ID, Sig: base64.StdEncoding.EncodeToString(sig)}}})
		p := filepath.Join(t.TempDir(), "record.json")
		os.WriteFile(p, b, 0o644)
		return p
	}
	if rep := f.g.conformanceVerify(context.Background(), sign(string(canon)), verifyFlagsC{key: f.pub}); !rep.OK {
		t.Fatalf("control: %+v", rep.Problems)
	}
	rep := f.g.conformanceVerify(context.Background(), sign(ambiguous), verifyFlagsC{key: f.pub})
	if rep.OK || len(rep.Problems) != 1 || rep.Problems[0].Check != "statement" || rep.Problems[0].Where != "payload" {
		t.Fatalf("the ambiguous statement: ok %v %+v", rep.OK, rep.Problems)
	}
}
