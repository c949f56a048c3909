package cli

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// evidenceTest is a state dir holding receipts, and a way to run
// `cordon evidence …` against it.
type evidenceTest struct {
	t   *testing.T
	dir string
}

func newEvidenceTest(t *testing.T, receipts int) *evidenceTest {
	t.Helper()
	testkit.RequireRoot(t)
	et := &evidenceTest{t: t, dir: t.TempDir()}
	st, err := store.Open(et.dir, store.DefaultPool)
	if err != nil {
		t.Fatalf("store.Open = %v", err)
	}
	defer st.Close()
	for i := 0; i < receipts; i++ {
		rc := crossing.Receipt{Time: time.Unix(1700000000, int64(i)), Identity: crossing.Identity{Workload: "wl", SandboxID: "sb-1"},
			Broker: "model", Action: "anthropic.messages", Target: "m", Decision: crossing.Allow, Reason: fmt.Sprint("r", i)}
		if _, err := st.RecordReceipt(context.Background(), rc); err != nil {
			t.Fatalf("RecordReceipt = %v", err)
		}
	}
	return et
}

// run runs `cordon --state-dir DIR evidence ARGS…` and returns its stdout
// and error.
func (et *evidenceTest) run(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	g := &globals{stateDir: et.dir, leaseSlots: store.DefaultPool.Slots, stdout: &out, stderr: &errOut}
	cmd := evidenceCmd(g)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func (et *evidenceTest) mustRun(args ...string) string {
	et.t.Helper()
	out, err := et.run(args...)
	if err != nil {
		et.t.Fatalf("cordon evidence %s = %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return -1
}

func TestEvidenceVerifyAndProve(t *testing.T) {
	et := newEvidenceTest(t, 12)
	// No key yet: verify says how to get one.
	if _, err := et.run("verify"); err == nil || !strings.Contains(err.Error(), "no public key") {
		t.Fatalf("verify before any key = %v, want a missing-public-key error", err)
	}
	note := et.mustRun("checkpoint")
	if !strings.HasPrefix(note, "go.sum database tree\n12\n") || !strings.Contains(note, "\n— cordon-evidence@") {
		t.Fatalf("checkpoint printed %q, want a signed tree note of 12 leaves", note)
	}
	saved := filepath.Join(t.TempDir(), "cp.txt")
	if err := os.WriteFile(saved, []byte(note), 0o600); err != nil {
		t.Fatal(err)
	}
	out := et.mustRun("verify", "--checkpoint", saved)
	if !strings.HasPrefix(out, "ok: 12 receipts, 12 leaves, 2 checkpoints, latest checkpoint size 12 root ") {
		t.Errorf("verify = %q, want ok over 12 receipts and 2 checkpoints (stored + given)", out)
	}
	out = et.mustRun("verify", "--receipt", "5")
	for _, want := range []string{"receipt 5 is leaf 4 of the tree of 12 leaves", "proof hashes", "  go.sum database tree", "proof of receipt 5: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify --receipt 5 = %q, want it to contain %q", out, want)
		}
	}
	var got verifyOutput
	if err := json.Unmarshal([]byte(et.mustRun("verify", "--json", "--receipt", "5")), &got); err != nil {
		t.Fatal(err)
	}
	if !got.OK || got.Proof == nil || got.Proof.Leaf != 4 || got.Report.Latest == nil || got.Report.Latest.Size != 12 {
		t.Errorf("verify --json = %+v", got)
	}
	// The proof from the JSON checks with the printed public key alone.
	pub := filepath.Join(t.TempDir(), "log.pub")
	if err := os.WriteFile(pub, []byte(et.mustRun("pubkey")), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := evlog.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Proof.Check(v); err != nil {
		t.Errorf("proof from --json: Check = %v", err)
	}
	// A receipt not covered by a checkpoint has no proof yet.
	if out, err := et.run("verify", "--receipt", "99"); exitCode(err) != 1 || !strings.Contains(out, "proof of receipt 99: FAILED") {
		t.Errorf("verify --receipt 99 = %q, %v, want exit 1 and a failed proof", out, err)
	}
}

func TestEvidenceVerifyReportsTampering(t *testing.T) {
	et := newEvidenceTest(t, 8)
	et.mustRun("checkpoint")
	u := url.URL{Scheme: "file", Path: filepath.Join(et.dir, "cordon.db"), RawQuery: "_pragma=" + url.QueryEscape("busy_timeout(5000)")}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`DROP TRIGGER receipts_append_only_u`,
		`UPDATE receipts SET body = json_set(body, '$.decision', 'deny') WHERE id = 3`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	out, err := et.run("verify")
	if exitCode(err) != 1 {
		t.Fatalf("verify after tampering = %v, want exit 1", err)
	}
	for _, want := range []string{"PROBLEM receipt_modified at leaf 2, receipt 3", "PROBLEM checkpoint_root_mismatch at checkpoint 8", "FAILED: 2 problems"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify = %q, want it to contain %q", out, want)
		}
	}
	// The log was changed since the last checkpoint: nothing is signed.
	record := func() {
		st, err := store.Open(et.dir, store.DefaultPool)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.RecordReceipt(context.Background(), crossing.Receipt{Broker: "model", Decision: crossing.Allow}); err != nil {
			t.Fatal(err)
		}
	}
	record()
	if _, err := db.Exec(`UPDATE receipts SET body = json_set(body, '$.decision', 'deny') WHERE id = 9`); err != nil {
		t.Fatal(err)
	}
	if _, err := et.run("checkpoint"); err == nil || !strings.Contains(err.Error(), "inconsistent") {
		t.Errorf("checkpoint over a changed log = %v, want a refusal", err)
	}
}

func TestEvidenceKeygen(t *testing.T) {
	et := newEvidenceTest(t, 0)
	if _, err := et.run("pubkey"); err == nil {
		t.Fatalf("pubkey before keygen = nil error")
	}
	vkey := strings.TrimSpace(et.mustRun("keygen", "--name", "audit-test"))
	if !strings.HasPrefix(vkey, "audit-test+") {
		t.Errorf("keygen printed %q, want an audit-test verifier key", vkey)
	}
	if got := strings.TrimSpace(et.mustRun("pubkey")); got != vkey {
		t.Errorf("pubkey = %q, want %q", got, vkey)
	}
	if _, err := et.run("keygen"); err == nil || !strings.Contains(err.Error(), "never replaces") {
		t.Errorf("second keygen = %v, want a refusal", err)
	}
	// The chosen key signs the first checkpoint.
	if out, err := et.run("checkpoint"); err != nil || out != "" {
		t.Errorf("checkpoint of an empty log = %q, %v, want nothing printed", out, err)
	}
	if _, err := et.run("keygen", "--name", "has space"); err == nil {
		t.Errorf("keygen --name 'has space' = nil error")
	}
}

// A log whose key is gone gets no new key: it could not extend the
// checkpoints the old one signed.
func TestEvidenceKeyLost(t *testing.T) {
	et := newEvidenceTest(t, 3)
	et.mustRun("checkpoint")
	if err := os.Remove(filepath.Join(evlog.KeyDir(et.dir), evlog.KeyFile)); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"keygen"}, {"checkpoint"}} {
		if _, err := et.run(args...); err == nil || !strings.Contains(err.Error(), "key missing") {
			t.Errorf("%s after the key was lost = %v, want a key-missing refusal", args[0], err)
		}
	}
	// What was signed still verifies with the public key.
	if out := et.mustRun("verify"); !strings.HasPrefix(out, "ok: 3 receipts") {
		t.Errorf("verify = %q", out)
	}
}
