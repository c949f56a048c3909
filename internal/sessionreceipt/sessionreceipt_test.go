package sessionreceipt

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/sandbox/level"
)

// fixedKey is a test key from a fixed seed, so the fuzz seeds stay valid.
func fixedKey() (attest.Key, ed25519.PublicKey) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	return attest.Key{Private: priv, ID: evlog.KeyID("test", pub)}, pub
}

func testRecord() *evidence.Record {
	sum := sha256.Sum256([]byte("cordon"))
	return &evidence.Record{Schema: evidence.Schema, SandboxID: "0123456789abcdef", LevelRequested: level.DedicatedContainer, LevelAdmitted: level.DedicatedContainer, CordonSHA256: hex.EncodeToString(sum[:]),
		InSitu: &evidence.InSitu{Set: "default", Checks: []evidence.Check{{Name: "insitu_write_outside_writable", OK: true, Boundary: evidence.Filesystem}}}}
}

func signed(t testing.TB, rec *evidence.Record, cfg string) []byte {
	t.Helper()
	k, _ := fixedKey()
	st, err := Statement(rec, "", cfg)
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
	return b
}

func TestSignVerify(t *testing.T) {
	_, pub := fixedKey()
	sum := sha256.Sum256([]byte("config: yes"))
	for _, cfg := range []string{"", "sha256:" + hex.EncodeToString(sum[:])} {
		v, err := Verify(signed(t, testRecord(), cfg), pub)
		if err != nil {
			t.Fatalf("config %q: Verify = %v", cfg, err)
		}
		if v.Record.SandboxID != "0123456789abcdef" || v.Record.InSitu == nil || len(v.Record.InSitu.Checks) != 1 {
			t.Errorf("config %q: verified record %+v", cfg, v.Record)
		}
		name := SubjectConfig
		if cfg == "" {
			name = SubjectNoConfig
		}
		if _, ok := v.Subjects[name]; !ok {
			t.Errorf("config %q: subjects %v, want %s", cfg, v.Subjects, name)
		}
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if _, err := Verify(signed(t, testRecord(), ""), other); !errors.Is(err, attest.ErrSignature) {
		t.Errorf("Verify with another key = %v, want ErrSignature", err)
	}
}

// TestEveryByteMatters: any one byte of a receipt changed, it no longer
// verifies (or no longer parses).
func TestEveryByteMatters(t *testing.T) {
	_, pub := fixedKey()
	b := signed(t, testRecord(), "")
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x20
		if _, err := Verify(c, pub); err == nil {
			// A flipped case in a JSON key or base64 padding may still
			// decode to the same envelope only if it changed nothing signed.
			env1, _ := attest.ParseEnvelope(b)
			env2, err2 := attest.ParseEnvelope(c)
			if err2 != nil || env1.Payload != env2.Payload || env1.Signatures[0].Sig != env2.Signatures[0].Sig {
				t.Errorf("byte %d (%q) flipped: still verifies", i, b[i])
			}
		}
	}
}

func TestStatementRefuses(t *testing.T) {
	r := testRecord()
	r.CordonSHA256 = ""
	if _, err := Statement(r, "", ""); err == nil {
		t.Error("Statement of a record without a binary digest: want an error")
	}
	sum := sha256.Sum256([]byte("another binary"))
	if _, err := Statement(testRecord(), "sha256:"+hex.EncodeToString(sum[:]), ""); err == nil {
		t.Error("Statement naming another binary than the record's: want an error")
	}
	if _, err := Statement(r, "sha256:"+hex.EncodeToString(sum[:]), ""); err != nil {
		t.Errorf("Statement of a record without a binary digest, given one: %v", err)
	}
	if _, err := Statement(testRecord(), "", "sha256:xyz"); err == nil {
		t.Error("Statement with a bad config digest: want an error")
	}
	if _, err := Statement(nil, "", ""); err == nil {
		t.Error("Statement(nil): want an error")
	}
}

func FuzzVerify(f *testing.F) {
	_, pub := fixedKey()
	f.Add(signed(f, testRecord(), ""))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"","signatures":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Verify(b, pub)
		if err == nil && v.Record.Schema != evidence.Schema {
			t.Fatalf("verified a record of schema %q", v.Record.Schema)
		}
	})
}
