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
	state := t.TempDir()
	if _, err := evlog.GenerateKey(evlog.KeyDir(state), "test"); err != nil {
		t.Fatal(err)
	}
	k, err := attest.LoadKey(state)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("cordon"))
	write := func(set string, names []string) string {
		in := &evidence.InSitu{Set: set}
		for _, n := range names {
			in.Checks = append(in.Checks, evidence.Check{Name: n, OK: true})
		}
		rec := &evidence.Record{Schema: evidence.Schema, SandboxID: "0123456789abcdef", LevelRequested: level.DedicatedContainer,
			LevelAdmitted: level.DedicatedContainer, CordonSHA256: hex.EncodeToString(sum[:]), InSitu: in}
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
