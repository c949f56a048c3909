package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// conformanceFixture is a state dir with an evidence log key, and a small
// signed record appended to the log and covered by a checkpoint.
type conformanceFixture struct {
	dir, recPath, pub      string
	binary, config, policy string
	rootfs                 string
	env                    []byte
	g                      *globals
	out                    *bytes.Buffer
}

// smallRecord is a record small enough to flip every byte of.
func smallRecord(t *testing.T, bind record.Bindings, bin string) *record.Record {
	t.Helper()
	r := record.Sample()
	r.TCB, r.Assumptions, r.NonClaims = []string{"k"}, []string{"a"}, []string{"n"}
	r.Probes = r.Probes[:1]
	r.Probes[0].Facts = r.Probes[0].Facts[:1]
	r.Claim = record.Judge(r.Claim.Requested, "", r.Provider.Capability, r.Probes)
	r.Maturity = record.Maturity{Is: "none"}
	r.Host.Cgroups = nil
	r.Provider.Capability.Features = nil
	r.Bindings = bind
	r.Bindings.ConfigPath, r.Bindings.PolicyPath, r.Bindings.RootfsPath = "", "", ""
	r.Provider.Capability = sandbox.Capability{MaxLevel: level.DedicatedContainer}
	r.Probes[0].Title, r.Probes[0].Clause = "t", "c"
	d, err := record.FileDigest(bin)
	if err != nil {
		t.Fatal(err)
	}
	r.Cordon.BinarySHA256 = strings.TrimPrefix(d, "sha256:")
	return r
}

func newConformanceFixture(t *testing.T) *conformanceFixture {
	t.Helper()
	testkit.RequireRoot(t)
	ctx := context.Background()
	f := &conformanceFixture{dir: t.TempDir()}
	files := t.TempDir()
	f.binary = filepath.Join(files, "cordon")
	f.config = filepath.Join(files, "cordon.toml")
	f.policy = filepath.Join(files, "policy")
	f.rootfs = filepath.Join(files, "rootfs")
	os.WriteFile(f.binary, []byte("\x7fELF not really"), 0o755)
	os.WriteFile(f.config, []byte("[sandbox]\n"), 0o600)
	os.MkdirAll(f.policy, 0o700)
	os.WriteFile(filepath.Join(f.policy, "a.cedar"), []byte("@id(\"p\")\npermit (principal, action, resource);\n"), 0o600)
	os.MkdirAll(filepath.Join(f.rootfs, "etc"), 0o755)
	os.WriteFile(filepath.Join(f.rootfs, "etc", "hostname"), []byte("x\n"), 0o644)
	bind, err := record.Bind(f.config, f.policy, f.rootfs)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(f.dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lg, err := evlog.Open(st, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err := attest.LoadKey(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	env, err := record.Sign(smallRecord(t, bind, f.binary), k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.Append(ctx, st, env, attest.KindConformance, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	f.env, _ = attest.Marshal(env)
	f.recPath = filepath.Join(files, "record.json")
	f.pub = filepath.Join(evlog.KeyDir(f.dir), evlog.PubFile)
	os.WriteFile(f.recPath, f.env, 0o644)
	f.out = &bytes.Buffer{}
	f.g = &globals{stateDir: f.dir, leaseSlots: store.DefaultPool.Slots, stdout: f.out, stderr: f.out}
	return f
}

// verify runs the checks on the bytes of a record file.
func (f *conformanceFixture) verify(t *testing.T, b []byte, fl verifyFlagsC) *verifyReport {
	t.Helper()
	rep := &verifyReport{Record: "given", Checked: []string{}, Problems: []verifyProblem{}}
	f.g.verifyRecord(context.Background(), rep, b, fl)
	return rep
}

// TestConformanceVerifyAccepts is the positive control of every check:
// the record as signed and logged verifies with the public key alone,
// with every binding, and against the log.
func TestConformanceVerifyAccepts(t *testing.T) {
	f := newConformanceFixture(t)
	rep := f.verify(t, f.env, verifyFlagsC{key: f.pub, binary: f.binary, config: f.config, policy: f.policy, rootfs: f.rootfs, log: true})
	if !rep.OK {
		t.Fatalf("not verified: %+v", rep.Problems)
	}
	want := []string{"signature", "statement", "binding binary", "binding config", "binding policy", "binding rootfs", "log (receipt"}
	got := strings.Join(rep.Checked, "|")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("checked %q lacks %q", got, w)
		}
	}
	// Through the command: exit 0, then 1 for another key, 2 for usage.
	cmd := conformanceCmd(f.g)
	cmd.SetArgs([]string{"verify", f.recPath, "--key", f.pub})
	if err := cmd.ExecuteContext(context.Background()); err != nil || !strings.Contains(f.out.String(), "verified:") {
		t.Fatalf("verify = %v, %s", err, f.out)
	}
	other := filepath.Join(t.TempDir(), "evidence")
	if _, err := evlog.GenerateKey(other, "other"); err != nil {
		t.Fatal(err)
	}
	for args, code := range map[string]int{
		"verify " + f.recPath + " --key " + filepath.Join(other, evlog.PubFile): exitNotVerified,
		"verify":                          exitVerifyUsage,
		"verify " + f.recPath + " --nope": exitVerifyUsage,
	} {
		cmd := conformanceCmd(f.g)
		cmd.SetArgs(strings.Fields(args))
		err := cmd.ExecuteContext(context.Background())
		if ee, ok := err.(*exitError); !ok || ee.code != code {
			t.Errorf("%s: err = %v, want exit %d", args, err, code)
		}
	}
}

// TestConformanceVerifyBindings: each file that is not the one bound is
// named, with both digests.
func TestConformanceVerifyBindings(t *testing.T) {
	f := newConformanceFixture(t)
	other := filepath.Join(t.TempDir(), "x")
	os.WriteFile(other, []byte("other"), 0o600)
	otherDir := t.TempDir()
	otherPolicy := t.TempDir()
	os.WriteFile(filepath.Join(otherPolicy, "a.cedar"), []byte("@id(\"q\")\npermit (principal, action, resource);\n"), 0o600)
	for name, fl := range map[string]verifyFlagsC{
		"binary": {key: f.pub, binary: other},
		"config": {key: f.pub, config: other},
		"policy": {key: f.pub, policy: otherPolicy},
		"rootfs": {key: f.pub, rootfs: otherDir},
	} {
		rep := f.verify(t, f.env, fl)
		if rep.OK || len(rep.Problems) != 1 || rep.Problems[0].Where != name || rep.Problems[0].Logged == rep.Problems[0].Given {
			t.Errorf("%s: %+v", name, rep.Problems)
		}
	}
}

// TestConformanceVerifyNamesEveryByteFlip flips every byte of a small
// signed record, and every byte of its payload (base64-decoded, changed,
// re-encoded): each change is detected, and named by the envelope field
// without the log, and by the JSON path of the logged copy with --log.
func TestConformanceVerifyNamesEveryByteFlip(t *testing.T) {
	f := newConformanceFixture(t)
	st, err := store.Open(f.dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Now()
	for i := range f.env {
		b := bytes.Clone(f.env)
		b[i] ^= 0x01
		rep := f.verify(t, b, verifyFlagsC{key: f.pub})
		if rep.OK || !namesField(rep.Problems[0].Where) {
			t.Fatalf("byte %d: not named: %+v", i, rep.Problems)
		}
		rep = f.verify(t, b, verifyFlagsC{key: f.pub, log: true, st: st})
		want := record.PathAt(f.env, i, "$")
		if !namesLog(rep, want) {
			t.Fatalf("byte %d (in %s): the log diff does not name it: %+v", i, want, rep.Problems)
		}
	}
	env, err := attest.ParseEnvelope(f.env)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	for i := range payload {
		p := bytes.Clone(payload)
		p[i] ^= 0x01
		e := env
		e.Payload = base64.StdEncoding.EncodeToString(p)
		b, _ := attest.Marshal(e)
		rep := f.verify(t, b, verifyFlagsC{key: f.pub})
		if rep.OK || rep.Problems[0].Where != "signatures[0].sig" {
			t.Fatalf("payload byte %d: %+v", i, rep.Problems)
		}
		rep = f.verify(t, b, verifyFlagsC{key: f.pub, log: true, st: st})
		want := record.PathAt(payload, i, "$.payload")
		if !namesLog(rep, want) {
			t.Fatalf("payload byte %d (in %s): the log diff does not name it: %+v", i, want, rep.Problems)
		}
	}
	t.Logf("%d envelope and %d payload flips in %v", len(f.env), len(payload), time.Since(start))
}

// namesField reports whether where names an envelope field, or a byte
// offset in the file.
func namesField(where string) bool {
	for _, p := range []string{"payloadType", "payload", "signatures", "$", "envelope @byte", "envelope.", "signatures[0] @byte", "statement"} {
		if strings.HasPrefix(where, p) {
			return true
		}
	}
	return false
}

// namesLog reports whether a log problem's path starts with want.
func namesLog(rep *verifyReport, want string) bool {
	if rep.OK {
		return false
	}
	for _, p := range rep.Problems {
		if p.Check == "log" && strings.HasPrefix(p.Where, want) {
			return true
		}
	}
	return false
}

// TestConformanceReport: a verified record is rendered; one signed by
// another key is refused, and rendered under NOT VERIFIED only when asked.
func TestConformanceReport(t *testing.T) {
	f := newConformanceFixture(t)
	out := filepath.Join(t.TempDir(), "r.html")
	run := func(args ...string) error {
		cmd := conformanceCmd(f.g)
		cmd.SetArgs(append([]string{"report", f.recPath, "-o", out}, args...))
		cmd.SetOut(f.out)
		cmd.SetErr(f.out)
		return cmd.ExecuteContext(context.Background())
	}
	if err := run("--key", f.pub); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), `id="matrix"`) || !strings.Contains(string(b), "Signature verified with key") {
		t.Fatalf("report = %v\n%.300s", err, b)
	}
	os.Remove(out)
	other := filepath.Join(t.TempDir(), "evidence")
	if _, err := evlog.GenerateKey(other, "other"); err != nil {
		t.Fatal(err)
	}
	if err := run("--key", filepath.Join(other, evlog.PubFile)); err == nil {
		t.Fatal("a record signed by another key was rendered")
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the refused report was written")
	}
	if err := run("--key", filepath.Join(other, evlog.PubFile), "--unverified"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "NOT VERIFIED") {
		t.Fatal("--unverified report lacks the NOT VERIFIED banner")
	}
}

// TestEvidenceReceiptsTolerated: the receipt that logs a record (broker
// evidence) lists with cordon receipts (and --broker evidence), and
// policy explain --receipt refuses it plainly (it asked no policy
// question), as it does for any receipt without one.
func TestEvidenceReceiptsTolerated(t *testing.T) {
	f := newConformanceFixture(t)
	out, err := runIn(t, f.dir, receiptsCmd, "--broker", "evidence")
	if err != nil || !strings.Contains(out, "conformance.record") || !strings.Contains(out, "evidence") {
		t.Fatalf("receipts --broker evidence = %v\n%s", err, out)
	}
	out, err = runIn(t, f.dir, receiptsCmd, "--broker", "model")
	if err != nil || strings.Contains(out, "conformance.record") {
		t.Fatalf("receipts --broker model = %v\n%s", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte(replayConfig), 0o600)
	out, err = runIn(t, f.dir, policyCmd, "explain", "--config", cfg, "--receipt", "1")
	if err == nil || !strings.Contains(err.Error()+out, "asked no policy question") {
		t.Fatalf("explain --receipt of an evidence receipt = %v\n%s", err, out)
	}
}
