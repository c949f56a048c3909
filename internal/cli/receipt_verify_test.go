package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/sandbox/level"
	"github.com/cordon-project/cordon/internal/sessionreceipt"
)

// TestVerifyReceiptWantsTheWholeInSituSet: a receipt whose in-situ set
// leaves out checks (a provider that reports only what passed, or none
// at all under a set's name) must not verify as "every in-situ check
// OK". Control: the same receipt with every check of its set verifies.
func TestVerifyReceiptWantsTheWholeInSituSet(t *testing.T) {
	state, sign := receiptSigner(t)
	write := func(set string, names []string) string {
		in := &evidence.InSitu{Set: set}
		for _, n := range names {
			in.Checks = append(in.Checks, evidence.Check{Name: n, OK: true})
		}
		rec := verifiedRecord()
		rec.InSitu = in
		return sign(rec)
	}
	var out bytes.Buffer
	g := &globals{stateDir: state, stdout: &out, stderr: &out}
	def := evidence.InSituChecks(evidence.InSituSetDefault)
	full := evidence.InSituChecks(evidence.InSituSetFull)
	if len(def) < 11 || len(full) <= len(def) {
		t.Fatalf("in-situ sets: default %v, full %v", def, full)
	}
	for _, c := range []struct {
		name, set string
		checks    []string
		ok        bool
	}{
		{"whole default set", "default", def, true},
		{"whole full set", "full", full, true},
		{"empty default set", "default", nil, false},
		{"default set without io_uring", "default", def[:len(def)-1], false},
		{"full set with the default's checks", "full", def, false},
		{"unknown set", "quick", def, false},
	} {
		r, err := g.verifyReceipt(context.Background(), write(c.set, c.checks), "", "", "", false)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.OK != c.ok {
			t.Errorf("%s: ok = %v, want %v; problems %v", c.name, r.OK, c.ok, r.Problems)
		}
		if !c.ok && !strings.Contains(strings.Join(r.Problems, "\n"), "in_situ") {
			t.Errorf("%s: problems %v name no in_situ check", c.name, r.Problems)
		}
	}
}

// receiptSigner makes a state dir with an evidence-log key and returns a
// function that signs a record as a session receipt into a file.
func receiptSigner(t *testing.T) (string, func(*evidence.Record) string) {
	t.Helper()
	state := t.TempDir()
	if _, err := evlog.GenerateKey(evlog.KeyDir(state), "test"); err != nil {
		t.Fatal(err)
	}
	k, err := attest.LoadKey(state)
	if err != nil {
		t.Fatal(err)
	}
	return state, func(rec *evidence.Record) string {
		st, err := sessionreceipt.Statement(rec, "", "")
		if err != nil {
			t.Fatal(err)
		}
		env, err := attest.Sign(st, k)
		if err != nil {
			t.Fatal(err)
		}
		b, err := attest.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "receipt.json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
}

// verifiedRecord is an admitted record whose every boundary has one OK
// fact, and whose in-situ set is whole and OK.
func verifiedRecord() *evidence.Record {
	sum := sha256.Sum256([]byte("cordon"))
	rec := &evidence.Record{Schema: evidence.Schema, SandboxID: "0123456789abcdef", LevelRequested: level.DedicatedContainer,
		LevelAdmitted: level.DedicatedContainer, EnforcementMode: evidence.Verified, CordonSHA256: hex.EncodeToString(sum[:]),
		Boundaries: map[string]evidence.Boundary{}, InSitu: &evidence.InSitu{Set: evidence.InSituSetDefault}}
	for _, b := range evidence.Boundaries() {
		rec.Boundaries[b] = evidence.Boundary{Verified: true, Facts: []evidence.Check{{Name: b + "_fact", OK: true}}}
	}
	for _, n := range evidence.InSituChecks(evidence.InSituSetDefault) {
		rec.InSitu.Checks = append(rec.InSitu.Checks, evidence.Check{Name: n, OK: true})
	}
	return rec
}

// TestVerifyReceiptRejudgesTheLevel: the receipt's admitted level and
// mode must follow from its own facts. A record that says VERIFIED at
// DEDICATED_CONTAINER over a boundary with a failed fact, or with no
// facts, or whose boundaries admit less, is a problem. Control: the
// same record with its facts OK verifies.
func TestVerifyReceiptRejudgesTheLevel(t *testing.T) {
	state, sign := receiptSigner(t)
	var out bytes.Buffer
	g := &globals{stateDir: state, stdout: &out, stderr: &out}
	for _, c := range []struct {
		name string
		edit func(*evidence.Record)
		ok   bool
	}{
		{"every fact OK", func(*evidence.Record) {}, true},
		{"a failed fact under a verified boundary", func(r *evidence.Record) {
			b := r.Boundaries[evidence.Network]
			b.Facts = append(b.Facts, evidence.Check{Name: "netns_empty", OK: false})
			r.Boundaries[evidence.Network] = b
		}, false},
		{"a verified boundary with no facts", func(r *evidence.Record) {
			r.Boundaries[evidence.IPC] = evidence.Boundary{Verified: true}
		}, false},
		{"a boundary missing", func(r *evidence.Record) { delete(r.Boundaries, evidence.Process) }, false},
		{"a level its boundaries do not admit", func(r *evidence.Record) {
			b := r.Boundaries[evidence.Filesystem]
			b.Verified = false
			r.Boundaries[evidence.Filesystem] = b
		}, false},
	} {
		rec := verifiedRecord()
		c.edit(rec)
		r, err := g.verifyReceipt(context.Background(), sign(rec), "", "", "", false)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.OK != c.ok {
			t.Errorf("%s: ok = %v, want %v; problems %v", c.name, r.OK, c.ok, r.Problems)
		}
	}
}
