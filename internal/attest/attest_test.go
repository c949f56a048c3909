package attest

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/store"
)

// TestPAE: the DSSE spec's test vector (protocol.md).
func TestPAE(t *testing.T) {
	got := string(PAE("http://example.com/HelloWorld", []byte("hello world")))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; got != want {
		t.Fatalf("PAE = %q, want %q", got, want)
	}
	if got := string(PAE("", nil)); got != "DSSEv1 0  0 " {
		t.Fatalf("PAE of empty = %q", got)
	}
}

func testKey(t testing.TB) (Key, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Private: priv, ID: evlog.KeyID("test", pub)}, pub
}

func testStatement() Statement {
	return Statement{Type: StatementType,
		Subject:       []Subject{{Name: "cordon", Digest: SubjectDigest(sha256.Sum256([]byte("bin")))}},
		PredicateType: "https://cordon.dev/conformance/v1",
		Predicate:     json.RawMessage(`{"schema":"x","n":1}`)}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	k, pub := testKey(t)
	env, err := Sign(testStatement(), k)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	env2, err := ParseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	st, err := VerifyKeyID(env2, pub, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Subject[0].Name != "cordon" || string(st.Predicate) != `{"schema":"x","n":1}` {
		t.Errorf("statement = %+v", st)
	}
	// Another key: refused, naming the signature.
	_, other := testKey(t)
	_, err = Verify(env2, other)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "signatures[0].sig" || !errors.Is(err, ErrSignature) {
		t.Errorf("other key: err = %v", err)
	}
	// Wrong key id: named.
	if _, err := VerifyKeyID(env2, pub, "00000000"); !errors.As(err, &fe) || fe.Field != "signatures[0].keyid" {
		t.Errorf("other key id: err = %v", err)
	}
}

// TestSignRefusesBadStatements: Sign never signs a statement that Verify
// would refuse.
func TestSignRefusesBadStatements(t *testing.T) {
	k, _ := testKey(t)
	for name, mut := range map[string]func(*Statement){
		"type":      func(s *Statement) { s.Type = "x" },
		"nosubject": func(s *Statement) { s.Subject = nil },
		"digest":    func(s *Statement) { s.Subject[0].Digest = map[string]string{"sha256": "AB"} },
		"predicate": func(s *Statement) { s.Predicate = json.RawMessage(`[1]`) },
		"ptype":     func(s *Statement) { s.PredicateType = "" },
	} {
		st := testStatement()
		mut(&st)
		if _, err := Sign(st, k); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// TestParseEnvelopeIsExact: encoding/json would accept a field name in
// another case, an unknown field or a repeated one; ParseEnvelope names each.
func TestParseEnvelopeIsExact(t *testing.T) {
	for _, bad := range []string{
		`{"PayloadType":"a","payload":"","signatures":[]}`,
		`{"payloadType":"a","payload":"","signatures":[],"x":1}`,
		`{"payloadType":"a","payloadType":"a","payload":"","signatures":[]}`,
		`{"payloadType":"a","payload":"","signatures":[{"KeyID":"","sig":""}]}`,
		`{"payloadType":"a","payload":"","signatures":[]} {}`,
		`{"payloadType":"a","payload":""}`,
		`[]`,
	} {
		if _, err := ParseEnvelope([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseEnvelope(%s) err = %v", bad, err)
		}
	}
	if _, err := ParseEnvelope([]byte(`{"payloadType":"a","payload":"","signatures":[{"keyid":"","sig":""}]}`)); err != nil {
		t.Errorf("control: %v", err)
	}
}

// TestAppendIsProvable: an appended envelope is a receipt of broker
// "evidence" whose inclusion proof checks with only log.pub, and the store
// keeps the envelope byte for byte.
func TestAppendIsProvable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(dir, store.Pool{Base: 1 << 30, Size: 65536, Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lg, err := evlog.Open(st, dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	env, err := Sign(testStatement(), k)
	if err != nil {
		t.Fatal(err)
	}
	id, err := Append(ctx, st, env, KindConformance, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := evlog.Prove(ctx, st, id)
	if err != nil {
		t.Fatal(err)
	}
	vk, err := evlog.LoadVerifier(filepath.Join(evlog.KeyDir(dir), evlog.PubFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(vk); err != nil {
		t.Fatalf("proof: %v", err)
	}
	b, _ := Marshal(env)
	if !strings.Contains(p.Receipt, `"broker":"evidence"`) || !strings.Contains(p.Receipt, Digest(b)) {
		t.Errorf("logged receipt %s does not carry the envelope digest %s", p.Receipt, Digest(b))
	}
	a, err := st.AttestationByDigest(ctx, Digest(b))
	if err != nil || a.ReceiptID != id || string(a.Envelope) != string(b) {
		t.Fatalf("stored attestation = %+v, %v", a, err)
	}
	// log.pub verifies the record too.
	pubText, _ := os.ReadFile(filepath.Join(evlog.KeyDir(dir), evlog.PubFile))
	pub, name, err := evlog.PublicKeyFromVkey(string(pubText))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyKeyID(env, pub, evlog.KeyID(name, pub)); err != nil {
		t.Fatalf("log.pub does not verify the record: %v", err)
	}
	if rep, err := evlog.Verify(ctx, st, vk); err != nil || !rep.OK() {
		t.Fatalf("evidence log verify: %+v, %v", rep, err)
	}
}
