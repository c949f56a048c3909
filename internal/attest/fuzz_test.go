package attest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"testing"
)

// fuzzKey is a fixed key: the seeds in testdata/fuzz are signed with it.
func fuzzKey() (Key, ed25519.PublicKey) {
	seed := sha256.Sum256([]byte("cordon attest fuzz key"))
	priv := ed25519.NewKeyFromSeed(seed[:])
	pub := priv.Public().(ed25519.PublicKey)
	return Key{Private: priv, ID: "0011aabb"}, pub
}

// fuzzEnvelope is the one envelope the fuzz key signed (Sign is
// deterministic: ed25519 and encoding/json are).
func fuzzEnvelope(t testing.TB) []byte {
	k, _ := fuzzKey()
	env, err := Sign(testStatement(), k)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParseEnvelope: any bytes (a record handed in by anyone) give an
// envelope or an error, never a panic; what parses re-encodes to JSON that
// parses to the same envelope.
func FuzzParseEnvelope(f *testing.F) {
	f.Add(fuzzEnvelope(f))
	f.Add([]byte(`{"payloadType":"","payload":"","signatures":[{"keyid":"","sig":""}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := ParseEnvelope(b)
		if err != nil {
			return
		}
		out, err := Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		env2, err := ParseEnvelope(out)
		if err != nil {
			t.Fatalf("re-encoded envelope does not parse: %v\n%s", err, out)
		}
		out2, _ := Marshal(env2)
		if !bytes.Equal(out, out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
	})
}

// FuzzVerify: only the payload the fuzz key signed ever verifies, however
// the envelope around it is changed.
func FuzzVerify(f *testing.F) {
	signed := fuzzEnvelope(f)
	f.Add(signed)
	f.Add(bytes.Replace(signed, []byte(`"sig":"`), []byte(`"sig":"A`), 1))
	k, pub := fuzzKey()
	good, err := ParseEnvelope(signed)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := ParseEnvelope(b)
		if err != nil {
			return
		}
		st, err := VerifyKeyID(env, pub, k.ID)
		if err != nil {
			return
		}
		if env.Payload != good.Payload || env.PayloadType != PayloadType {
			t.Fatalf("verified an envelope the key never signed: %s", b)
		}
		if st.Type != StatementType || len(st.Subject) == 0 {
			t.Fatalf("verified statement of bad shape: %+v", st)
		}
	})
}
