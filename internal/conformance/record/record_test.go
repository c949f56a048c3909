package record

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
)

func testKey(t testing.TB) (attest.Key, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return attest.Key{Private: priv, ID: "0a0b0c0d"}, pub
}

func TestSampleAdmitsRequestedLevel(t *testing.T) {
	r := Sample()
	if r.Claim.Admitted != "DEDICATED_CONTAINER" || len(r.Claim.Why) != 0 {
		t.Fatalf("claim = %+v", r.Claim)
	}
	if r.Maturity.Is != "contract-tested, reference-adapter-proven, environment-evidenced" {
		t.Errorf("maturity = %+v", r.Maturity)
	}
}

// TestClaimCeiling: a class without a pass, a failed probe, a
// not_evidenced probe or a provider that evidences less each lower the
// claim, and say why.
func TestClaimCeiling(t *testing.T) {
	capab := sandbox.Capability{Provider: "p", MaxLevel: level.DedicatedContainer}
	all := Sample().Probes
	cases := []struct {
		name string
		mut  func([]ProbeResult) []ProbeResult
		cap  level.Level
		want string
		why  string
	}{
		{"all pass", func(p []ProbeResult) []ProbeResult { return p }, level.DedicatedContainer, "DEDICATED_CONTAINER", ""},
		{"one fail", func(p []ProbeResult) []ProbeResult {
			p = append(p, ProbeResult{ID: "bypass.x", Class: Bypass, Verdict: Fail})
			return p
		}, level.DedicatedContainer, NoClaim, "failed: bypass.x"},
		{"class not evidenced", func(p []ProbeResult) []ProbeResult {
			p[1].Verdict = NotEvidenced
			return p
		}, level.DedicatedContainer, NoClaim, "no passing probe in class bypass"},
		{"class missing", func(p []ProbeResult) []ProbeResult { return p[:6] }, level.DedicatedContainer, NoClaim, "reset_recovery"},
		{"unknown verdict", func(p []ProbeResult) []ProbeResult { p[0].Verdict = "PASS"; return p }, level.DedicatedContainer, NoClaim, "failed: allowed.sample"},
		{"unknown class", func(p []ProbeResult) []ProbeResult {
			return append(p, ProbeResult{ID: "z", Class: "zzz", Verdict: Pass})
		}, level.DedicatedContainer, NoClaim, "unknown class"},
		{"provider lower", func(p []ProbeResult) []ProbeResult { return p }, level.Shared, "SHARED", "evidences at most SHARED"},
	}
	for _, c := range cases {
		ps := c.mut(append([]ProbeResult(nil), all...))
		capab.MaxLevel = c.cap
		got := Judge("DEDICATED_CONTAINER", "", capab, ps)
		if got.Admitted != c.want || !strings.Contains(strings.Join(got.Why, "; "), c.why) {
			t.Errorf("%s: admitted %s why %q; want %s with %q", c.name, got.Admitted, got.Why, c.want, c.why)
		}
	}
}

func TestStatementRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cordon.toml")
	os.WriteFile(cfg, []byte("x = 1\n"), 0o600)
	b, err := Bind(cfg, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	r := Sample()
	r.Bindings = b
	k, pub := testKey(t)
	env, err := Sign(r, k)
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.VerifyKeyID(env, pub, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range st.Subject {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "cordon,config,rootfs" {
		t.Errorf("subjects = %v", names)
	}
	got, err := FromStatement(st)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(r)
	c, _ := json.Marshal(got)
	if string(a) != string(c) {
		t.Errorf("round trip differs:\n%s\n%s", a, c)
	}
	// A subject that is not the record's binding is refused.
	st.Subject[1].Digest = map[string]string{"sha256": strings.Repeat("0", 64)}
	var fe *attest.FieldError
	if _, err := FromStatement(st); !errors.As(err, &fe) || fe.Field != "statement.subject" {
		t.Errorf("changed subject: err = %v", err)
	}
}

func TestRootfsDigest(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "a"), []byte("a"), 0o644)
	os.Symlink("etc/a", filepath.Join(dir, "l"))
	d1, err := RootfsDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := RootfsDigest(dir)
	if d1 != d2 {
		t.Fatal("not deterministic")
	}
	for name, change := range map[string]func(){
		"content": func() { os.WriteFile(filepath.Join(dir, "etc", "a"), []byte("b"), 0o644) },
		"mode":    func() { os.Chmod(filepath.Join(dir, "etc", "a"), 0o755) },
		"link":    func() { os.Remove(filepath.Join(dir, "l")); os.Symlink("etc/b", filepath.Join(dir, "l")) },
		"new":     func() { os.WriteFile(filepath.Join(dir, "n"), nil, 0o644) },
	} {
		change()
		d, err := RootfsDigest(dir)
		if err != nil || d == d1 {
			t.Errorf("%s: digest unchanged (%v)", name, err)
		}
		d1 = d
	}
}

func TestDiffNamesPaths(t *testing.T) {
	a := []byte(`{"a":{"b":[1,2,{"c":"x"}]},"d":true}`)
	b := []byte(`{"a":{"b":[1,2,{"c":"y"}]},"d":true,"e":1}`)
	got := DiffJSON("$", a, b)
	if len(got) != 2 || got[0].Path != `$.a.b[2].c` || got[1].Path != "$.e" || got[1].Logged != "(absent)" {
		t.Fatalf("diff = %+v", got)
	}
	if p := PathAt(a, strings.Index(string(a), `"x"`), "$"); p != "$.a.b[2].c" {
		t.Errorf("PathAt = %s", p)
	}
	if p := PathAt(a, strings.Index(string(a), `true`), "$"); p != "$.d" {
		t.Errorf("PathAt = %s", p)
	}
	// Not JSON any more: the path of the byte in the logged copy.
	bad := []byte(strings.Replace(string(a), `"x"`, `"x`, 1))
	got = DiffJSON("$", a, bad)
	if len(got) != 1 || !strings.HasPrefix(got[0].Path, "$.a.b[2].c @byte") {
		t.Errorf("diff of broken JSON = %+v", got)
	}
}

func TestHostFrom(t *testing.T) {
	h := HostFrom(evidence.Host{Kernel: "k", Cgroups: map[string]string{"memory": "v1", "pids": "v2"}},
		sandbox.Capability{Features: map[string]string{"arch": "arm64", "landlock_abi": "7"}})
	if h.CgroupMode != "v1 hybrid" || h.Arch != "arm64" || h.Facts["landlock_abi"] != "7" || h.Kernel != "k" {
		t.Errorf("HostFrom = %+v", h)
	}
}

// TestNewAndFinish: New binds what it is given (None otherwise) and
// refuses what it cannot read; Finish closes the window and judges.
func TestNewAndFinish(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.toml")
	os.WriteFile(cfg, []byte("a"), 0o600)
	r, err := New(Inputs{Config: cfg, Level: "DEDICATED_CONTAINER", Provider: Provider{Name: "fake-plain-child",
		Capability: sandbox.Capability{Provider: "fake-plain-child", MaxLevel: level.Shared}}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := FileDigest(cfg)
	if r.Bindings.Config != want || r.Bindings.PolicySet != None || r.Bindings.Rootfs != None || len(r.RunID) != 24 {
		t.Errorf("bindings %+v run %q", r.Bindings, r.RunID)
	}
	r.Finish(Sample().Probes, r.Window.Started.Add(time.Second))
	if r.Claim.Admitted != "SHARED" || r.Window.Finished.IsZero() {
		t.Errorf("claim %+v window %+v", r.Claim, r.Window)
	}
	for _, l := range r.Maturity.Labels {
		if l.Label == ReferenceAdapterProven && l.Holds {
			t.Error("a fake provider's record is reference-adapter-proven")
		}
	}
	if _, err := New(Inputs{Config: filepath.Join(dir, "missing")}); err == nil {
		t.Error("New bound a config it could not read")
	}
	if _, err := New(Inputs{Policy: dir}); err == nil {
		t.Error("New bound a policy directory without policies")
	}
}

// TestFinishTwice: judging again replaces the claim's non-claim.
func TestFinishTwice(t *testing.T) {
	r := Sample()
	r.Probes[0].Verdict = Fail
	r.Finish(r.Probes, r.Window.Finished)
	r.Finish(r.Probes, r.Window.Finished)
	n := 0
	for _, s := range r.NonClaims {
		if strings.HasPrefix(s, noClaimPrefix) {
			n++
		}
	}
	if r.Claim.Admitted != NoClaim || n != 1 {
		t.Fatalf("claim %s with %d no-claim non-claims", r.Claim.Admitted, n)
	}
	r.Probes[0].Verdict = Pass
	r.Finish(r.Probes, r.Window.Finished)
	for _, s := range r.NonClaims {
		if strings.HasPrefix(s, noClaimPrefix) {
			t.Fatalf("admitted %s still says %q", r.Claim.Admitted, s)
		}
	}
}
