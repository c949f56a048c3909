package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// TestConformanceRecordVerify drives the built binary as a third party and
// the host's operator would: a record signed with the state dir's evidence
// key (made by `cordon evidence keygen`) and appended to its log verifies
// with only the public key `cordon evidence pubkey` prints, binds the
// binary, is proven in the log after `cordon evidence checkpoint`, and
// the whole log still verifies; a record whose payload was changed is
// refused (exit 1), the change named by its JSON path.
func TestConformanceRecordVerify(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	if r := cordon(t, cordonBin, st, "evidence", "keygen"); r.Code != 0 {
		t.Fatalf("keygen: %d %s", r.Code, r.Stderr)
	}
	dir := t.TempDir()
	recPath := filepath.Join(dir, "record.json")
	env := signAndLog(t, st, recPath)

	pub := cordon(t, cordonBin, st, "evidence", "pubkey")
	pubPath := filepath.Join(dir, "log.pub")
	if pub.Code != 0 || os.WriteFile(pubPath, []byte(pub.Stdout), 0o644) != nil {
		t.Fatalf("pubkey: %d %s", pub.Code, pub.Stderr)
	}
	other := t.TempDir() // no state of the host: the third party
	if r := cordon(t, cordonBin, other, "conformance", "verify", recPath, "--key", pubPath, "--binary", cordonBin); r.Code != 0 ||
		!strings.Contains(r.Stdout, "ok  binding binary") {
		t.Fatalf("verify with the public key: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := cordon(t, cordonBin, st, "conformance", "verify", recPath, "--log"); r.Code != 1 || !strings.Contains(r.Stdout, "no inclusion proof") {
		t.Fatalf("--log before a checkpoint: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := cordon(t, cordonBin, st, "evidence", "checkpoint"); r.Code != 0 {
		t.Fatalf("checkpoint: %d %s", r.Code, r.Stderr)
	}
	if r := cordon(t, cordonBin, st, "conformance", "verify", recPath, "--log"); r.Code != 0 || !strings.Contains(r.Stdout, "ok  log (receipt 1") {
		t.Fatalf("--log: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := cordon(t, cordonBin, st, "evidence", "verify", "--receipt", "1"); r.Code != 0 {
		t.Fatalf("evidence verify with the record's receipt: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	// Change one fact in the payload (the signature is left as it was).
	body, _ := base64.StdEncoding.DecodeString(env.Payload)
	changed := strings.Replace(string(body), `"got":"denied"`, `"got":"reached"`, 1)
	if changed == string(body) {
		t.Fatal("the sample has no denied fact to change")
	}
	env.Payload = base64.StdEncoding.EncodeToString([]byte(changed))
	b, _ := attest.Marshal(env)
	tampered := filepath.Join(dir, "tampered.json")
	os.WriteFile(tampered, b, 0o644)
	if r := cordon(t, cordonBin, other, "conformance", "verify", tampered, "--key", pubPath); r.Code != 1 || !strings.Contains(r.Stdout, "signatures[0].sig") {
		t.Fatalf("tampered, key only: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r := cordon(t, cordonBin, st, "conformance", "verify", tampered, "--log", "--json")
	var out struct {
		OK       bool
		Problems []struct{ Check, Where, Logged, Given string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != 1 || out.OK {
		t.Fatalf("tampered --log: %d %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	named := false
	for _, p := range out.Problems {
		named = named || (p.Where == "$.payload.predicate.probes[0].facts[0].got" && p.Logged == `"denied"` && p.Given == `"reached"`)
	}
	if !named {
		t.Errorf("the changed fact is not named: %+v", out.Problems)
	}
	html := filepath.Join(dir, "r.html")
	if r := cordon(t, cordonBin, other, "conformance", "report", recPath, "--key", pubPath, "-o", html); r.Code != 0 {
		t.Fatalf("report: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := cordon(t, cordonBin, other, "conformance", "report", tampered, "--key", pubPath, "-o", html+".2"); r.Code == 0 {
		t.Fatal("a tampered record was rendered without --unverified")
	}
}

// signAndLog signs a sample record binding cordonBin with the state dir's
// evidence key, appends it to the log, and writes it to path.
func signAndLog(t *testing.T, stateDir, path string) attest.Envelope {
	t.Helper()
	r := record.Sample()
	d, err := record.FileDigest(cordonBin)
	if err != nil {
		t.Fatal(err)
	}
	r.Cordon.BinarySHA256 = strings.TrimPrefix(d, "sha256:")
	k, err := attest.LoadKey(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	env, err := record.Sign(r, k)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(stateDir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := attest.Append(context.Background(), s, env, attest.KindConformance, "", ""); err != nil {
		t.Fatal(err)
	}
	b, _ := attest.Marshal(env)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return env
}
