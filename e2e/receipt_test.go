package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/sessionreceipt"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// defaultInSitu is the default in-situ set: attempts and their controls.
var defaultInSitu = []string{
	"insitu_write_outside_writable", "insitu_write_control",
	"insitu_host_abstract_socket", "insitu_host_abstract_socket_control",
	"insitu_host_loopback_port", "insitu_host_loopback_port_control",
	"insitu_kernel_object_control", "insitu_io_uring_setup", "insitu_userfaultfd",
	"insitu_route_out", "insitu_route_control",
}

func readRecord(t *testing.T, path string) evidence.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec evidence.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("record %s: %v", path, err)
	}
	return rec
}

// checkInSitu: every check of set is present and OK, each boundary the
// set touches has a positive control, and the set's timings are recorded.
func checkInSitu(t *testing.T, s *evidence.InSitu, set string, names []string) {
	t.Helper()
	if s == nil {
		t.Fatal("the record has no in_situ set")
	}
	var got []string
	controls := map[string]bool{}
	for _, c := range s.Checks {
		got = append(got, c.Name)
		if !c.OK {
			t.Errorf("in-situ check %s = not OK (want %q, got %q, from %s)", c.Name, c.Want, c.Got, c.Source)
		}
		if c.Control {
			controls[c.Boundary] = true
		}
	}
	for _, c := range s.Checks {
		if !c.Control && !controls[c.Boundary] && c.Name != "insitu_mount_over_probe_dir" {
			t.Errorf("in-situ check %s (%s): no positive control for its boundary", c.Name, c.Boundary)
		}
	}
	slices.Sort(got)
	want := slices.Clone(names)
	slices.Sort(want)
	if s.Set != set || !slices.Equal(got, want) {
		t.Errorf("in-situ set %q = %v, want %q = %v", s.Set, got, set, want)
	}
	// The budget: what the set cost is in the record (a measure; the
	// default set takes well under a millisecond of the init's time here).
	if s.AttemptMicros <= 0 || s.JudgeMicros <= 0 {
		t.Errorf("in-situ timings attempt_us=%d judge_us=%d, want both recorded", s.AttemptMicros, s.JudgeMicros)
	}
	t.Logf("in-situ set %s: attempts %dµs in the init, judged in %dµs", s.Set, s.AttemptMicros, s.JudgeMicros)
}

// verifyReceipt checks env with only the public key file, and returns
// the record it signs.
func verifyReceipt(t *testing.T, env attest.Envelope, pubFile, wantBinary string) evidence.Record {
	t.Helper()
	vkey, err := os.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := evlog.PublicKeyFromVkey(string(vkey))
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.Verify(env, pub)
	if err != nil {
		t.Fatalf("receipt does not verify with %s: %v", pubFile, err)
	}
	if st.PredicateType != sessionreceipt.PredicateType {
		t.Errorf("predicateType %q, want %q", st.PredicateType, sessionreceipt.PredicateType)
	}
	subj := map[string]string{}
	for _, s := range st.Subject {
		subj[s.Name] = s.Digest["sha256"]
	}
	if subj[sessionreceipt.SubjectBinary] != wantBinary {
		t.Errorf("subject cordon = %q, want the binary's own digest %q", subj[sessionreceipt.SubjectBinary], wantBinary)
	}
	var rec evidence.Record
	if err := json.Unmarshal(st.Predicate, &rec); err != nil {
		t.Fatalf("predicate: %v", err)
	}
	// Tamper: one byte of the payload changed fails the signature.
	bad := env
	p := []byte(bad.Payload)
	p[len(p)/2] ^= 0x01
	if p[len(p)/2] == '=' || p[len(p)/2] == 0 {
		p[len(p)/2] = 'A'
	}
	bad.Payload = string(p)
	if _, err := attest.Verify(bad, pub); err == nil {
		t.Error("a receipt with one payload byte changed verifies")
	}
	return rec
}

// proveLogged: the envelope is in the evidence log — a receipt whose
// request digest is the envelope's, with an inclusion proof that checks
// against log.pub.
func proveLogged(t *testing.T, state string, id int64, envBytes []byte) {
	t.Helper()
	st, err := store.Open(state, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	p, err := evlog.Prove(ctx, st, id)
	if err != nil {
		t.Fatalf("prove receipt %d: %v", id, err)
	}
	v, err := evlog.LoadVerifier(filepath.Join(evlog.KeyDir(state), evlog.PubFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(v); err != nil {
		t.Fatalf("inclusion proof of receipt %d: %v", id, err)
	}
	var rc crossing.Receipt
	if err := json.Unmarshal([]byte(p.Receipt), &rc); err != nil {
		t.Fatal(err)
	}
	if rc.Broker != attest.Broker || rc.Action != attest.KindSession || rc.RequestDigest != attest.Digest(envBytes) {
		t.Errorf("logged receipt %+v, want broker %s action %s request digest %s", rc, attest.Broker, attest.KindSession, attest.Digest(envBytes))
	}
}

// TestSessionReceipt: a cordon run's in-situ set is present and OK on
// this host; its signed receipt verifies with log.pub alone, binds the
// binary's digest (computed here, from the file), carries the same
// in-situ checks as the evidence record, and is in the evidence log.
func TestSessionReceipt(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	state, dir := newStateDir(t), t.TempDir()
	ev, rcpt := filepath.Join(dir, "ev.json"), filepath.Join(dir, "receipt.json")
	r := cordon(t, cordonBin, state, "run", "--json", "--evidence", ev, "--receipt", rcpt, "--", "/bin/true")
	if r.Code != 0 {
		t.Fatalf("cordon run = %d\nstderr: %s", r.Code, r.Stderr)
	}
	rec := readRecord(t, ev)
	checkInSitu(t, rec.InSitu, "default", defaultInSitu)
	var out struct {
		ReceiptID     int64  `json:"receipt_id"`
		ReceiptDigest string `json:"receipt_digest"`
	}
	if err := json.Unmarshal([]byte(r.OutcomeJSON), &out); err != nil || out.ReceiptID == 0 {
		t.Fatalf("outcome %s: no receipt id (%v)", r.OutcomeJSON, err)
	}
	b, err := os.ReadFile(rcpt)
	if err != nil {
		t.Fatal(err)
	}
	if attest.Digest(b) != out.ReceiptDigest {
		t.Errorf("--receipt file digest %s, outcome says %s", attest.Digest(b), out.ReceiptDigest)
	}
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	signed := verifyReceipt(t, env, filepath.Join(evlog.KeyDir(state), evlog.PubFile), fileSHA256(t, cordonBin))
	if signed.SandboxID != rec.SandboxID || signed.LevelAdmitted != rec.LevelAdmitted {
		t.Errorf("signed record %s at %s, --evidence says %s at %s", signed.SandboxID, signed.LevelAdmitted, rec.SandboxID, rec.LevelAdmitted)
	}
	a, _ := json.Marshal(signed.InSitu)
	w, _ := json.Marshal(rec.InSitu)
	if string(a) != string(w) {
		t.Errorf("signed in-situ set differs from the record's:\nsigned %s\nrecord %s", a, w)
	}
	proveLogged(t, state, out.ReceiptID, b)

	// A third party: only the receipt and log.pub, copied elsewhere.
	third := t.TempDir()
	pub, err := os.ReadFile(filepath.Join(evlog.KeyDir(state), evlog.PubFile))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(third, "log.pub"), pub, 0o644)
	os.WriteFile(filepath.Join(third, "receipt.json"), b, 0o644)
	if r := cordon(t, cordonBin, filepath.Join(third, "no-state"), "evidence", "verify-receipt", filepath.Join(third, "receipt.json"),
		"--pubkey", filepath.Join(third, "log.pub"), "--binary", cordonBin); r.Code != 0 || !strings.HasPrefix(r.Stdout, "ok: session "+rec.SandboxID) {
		t.Errorf("verify-receipt with log.pub only = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := cordon(t, cordonBin, state, "evidence", "verify-receipt", rcpt, "--log"); r.Code != 0 || !strings.Contains(r.Stdout, "in the evidence log as receipt") {
		t.Errorf("verify-receipt --log = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	// Positive control: the same check refuses another binary and a
	// receipt with one byte of its signature changed.
	if r := cordon(t, cordonBin, state, "evidence", "verify-receipt", rcpt, "--binary", hooksBin); r.Code != 1 || !strings.Contains(r.Stdout, "PROBLEM subject cordon") {
		t.Errorf("verify-receipt --binary of another binary = %d, want 1 naming the subject\nstdout: %s", r.Code, r.Stdout)
	}
	tampered := strings.Replace(string(b), `"sig":"`, `"sig":"AA`, 1)
	os.WriteFile(filepath.Join(third, "tampered.json"), []byte(tampered), 0o644)
	if r := cordon(t, cordonBin, state, "evidence", "verify-receipt", filepath.Join(third, "tampered.json")); r.Code != 1 || !strings.Contains(r.Stdout, "PROBLEM receipt") {
		t.Errorf("verify-receipt of a tampered receipt = %d, want 1\nstdout: %s", r.Code, r.Stdout)
	}

	t.Run("full set", func(t *testing.T) {
		t.Parallel()
		ev := filepath.Join(t.TempDir(), "ev.json")
		if r := cordon(t, cordonBin, newStateDir(t), "run", "--insitu", "full", "--evidence", ev, "--", "/bin/true"); r.Code != 0 {
			t.Fatalf("cordon run --insitu full = %d\nstderr: %s", r.Code, r.Stderr)
		}
		full := append(slices.Clone(defaultInSitu), "insitu_bpf_map_create", "insitu_perf_event_open", "insitu_mount_over_probe_dir")
		checkInSitu(t, readRecord(t, ev).InSitu, "full", full)
	})
}

// TestSessionReceiptSeesMissingLayer is the positive control: with the
// test build leaving a layer out, the in-situ attempt that layer denies
// succeeds, the trusted side sees its trace, the check turns not OK, the
// boundary it is a fact of is unverified and the run is refused — and no
// receipt is signed for it.
func TestSessionReceiptSeesMissingLayer(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	for _, tc := range []struct{ layer, check, boundary string }{
		{"landlock", "insitu_write_outside_writable", evidence.Filesystem},
		{"seccomp", "insitu_io_uring_setup", evidence.Process},
	} {
		t.Run(tc.layer, func(t *testing.T) {
			t.Parallel()
			state := newStateDir(t)
			ev := filepath.Join(t.TempDir(), "ev.json")
			r := cordon(t, hooksBin, state, withoutLayer(tc.layer, []string{"run", "--json", "--evidence", ev, "--", "/bin/true"})...)
			if r.Code != 125 || r.Outcome.FailureKind != "evidence_insufficient" || !slices.Contains(r.Outcome.Unverified, tc.boundary) {
				t.Fatalf("without %s: cordon = %d, %+v, want 125 evidence_insufficient with %s unverified\nstderr: %s", tc.layer, r.Code, r.Outcome, tc.boundary, r.Stderr)
			}
			rec := readRecord(t, ev)
			if rec.InSitu == nil {
				t.Fatal("no in-situ set in the record")
			}
			for _, c := range rec.InSitu.Checks {
				if c.Name == tc.check && c.OK {
					t.Errorf("without %s: %s = OK (%s), want the attempt seen to succeed", tc.layer, c.Name, c.Got)
				}
				if c.Control && !c.OK {
					t.Errorf("without %s: control %s = not OK (%s)", tc.layer, c.Name, c.Got)
				}
			}
			found := false
			for _, f := range rec.Boundaries[tc.boundary].Facts {
				found = found || (f.Name == "in_situ:"+tc.check && !f.OK)
			}
			if !found {
				t.Errorf("without %s: the %s boundary's facts lack the failed in_situ:%s", tc.layer, tc.boundary, tc.check)
			}
			if !strings.Contains(r.Stderr, "in_situ:"+tc.check) {
				t.Errorf("without %s: the refusal does not name in_situ:%s\nstderr: %s", tc.layer, tc.check, r.Stderr)
			}
			st, err := store.Open(state, store.DefaultPool)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if as, err := st.Attestations(context.Background(), attest.KindSession, 10); err != nil || len(as) != 0 {
				t.Errorf("refused run: %d session receipts logged (%v), want none", len(as), err)
			}
		})
	}
}

// TestDaemonSessionReceipt: a daemon sandbox's receipt is in its status
// (--json), verifies with log.pub alone and carries its in-situ set.
func TestDaemonSessionReceipt(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	state := newStateDir(t)
	d := startDaemon(t, state)
	d.createStart("rcpt", "--", "/bin/sleep", "1000")
	r := d.cli("sandbox", "status", "rcpt", "--json")
	if r.Code != 0 {
		t.Fatalf("status = %d: %s", r.Code, r.Stderr)
	}
	var st struct {
		ID       string           `json:"id"`
		Evidence *evidence.Record `json:"evidence"`
		Receipt  *struct {
			ReceiptID int64           `json:"receipt_id"`
			Digest    string          `json:"digest"`
			Envelope  json.RawMessage `json:"envelope"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || st.Receipt == nil || st.Evidence == nil {
		t.Fatalf("status --json: no receipt or evidence (%v): %s", err, r.Stdout)
	}
	env, err := attest.ParseEnvelope(st.Receipt.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	signed := verifyReceipt(t, env, filepath.Join(evlog.KeyDir(state), evlog.PubFile), fileSHA256(t, hooksBin))
	checkInSitu(t, signed.InSitu, "default", defaultInSitu)
	if signed.SandboxID != st.Evidence.SandboxID {
		t.Errorf("receipt signs sandbox %s, status shows %s", signed.SandboxID, st.Evidence.SandboxID)
	}
	b, _ := attest.Marshal(env)
	proveLogged(t, state, st.Receipt.ReceiptID, b)
	// --insitu full reaches the daemon's sandbox; anything else is refused.
	d.createStart("rcpt-full", "--insitu", "full")
	var full struct {
		Evidence *evidence.Record `json:"evidence"`
	}
	if r := d.cli("sandbox", "status", "rcpt-full", "--json"); json.Unmarshal([]byte(r.Stdout), &full) != nil || full.Evidence == nil ||
		full.Evidence.InSitu == nil || full.Evidence.InSitu.Set != "full" {
		t.Errorf("sandbox create --insitu full: status %s", r.Stdout)
	}
	if r := d.cli("sandbox", "create", "rcpt-bad", "--insitu", "some"); r.Code == 0 || !strings.Contains(r.Stderr, "insitu") {
		t.Errorf("sandbox create --insitu some = %d, want refused naming insitu\n%s", r.Code, r.Stderr)
	}
	r = d.cli("sandbox", "status", "rcpt")
	for _, want := range []string{"in-situ default set: 11 of 11 checks OK", "Receipt:", fmt.Sprintf("signed, evidence-log receipt %d", st.Receipt.ReceiptID)} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.Stdout)
		}
	}
}
