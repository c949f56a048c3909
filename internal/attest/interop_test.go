package attest

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// libVerifier is an ed25519 dsse.Verifier for the interop check.
type libVerifier struct {
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	id   string
}

func (v libVerifier) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(v.priv, data), nil
}

func (v libVerifier) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(v.pub, data, sig) {
		return errors.New("bad signature")
	}
	return nil
}
func (v libVerifier) KeyID() (string, error)   { return v.id, nil }
func (v libVerifier) Public() crypto.PublicKey { return v.pub }

// TestInteropWithSecureSystemsLibDSSE: the reference DSSE implementation
// computes the same PAE, verifies what Sign makes, and what it signs
// verifies here. The library stays in this test only: its verifier links
// golang.org/x/crypto/ssh and decodes base64 leniently (standard, then
// URL alphabet), which would let two encodings of one record both verify.
func TestInteropWithSecureSystemsLibDSSE(t *testing.T) {
	if got, want := string(PAE(PayloadType, []byte("{}"))), string(dsse.PAE(PayloadType, []byte("{}"))); got != want {
		t.Fatalf("PAE %q, library %q", got, want)
	}
	k, pub := testKey(t)
	lv := libVerifier{pub: pub, priv: k.Private, id: k.ID}
	env, err := Sign(testStatement(), k)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := dsse.NewEnvelopeVerifier(lv)
	if err != nil {
		t.Fatal(err)
	}
	lenv := &dsse.Envelope{PayloadType: env.PayloadType, Payload: env.Payload,
		Signatures: []dsse.Signature{{KeyID: env.Signatures[0].KeyID, Sig: env.Signatures[0].Sig}}}
	if _, err := ev.Verify(context.Background(), lenv); err != nil {
		t.Fatalf("the library refuses our envelope: %v", err)
	}
	signer, err := dsse.NewEnvelopeSigner(lv)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := b64.DecodeString(env.Payload)
	le, err := signer.SignPayload(context.Background(), PayloadType, body)
	if err != nil {
		t.Fatal(err)
	}
	ours := Envelope{PayloadType: le.PayloadType, Payload: le.Payload,
		Signatures: []Signature{{KeyID: le.Signatures[0].KeyID, Sig: le.Signatures[0].Sig}}}
	if _, err := VerifyKeyID(ours, pub, k.ID); err != nil {
		t.Fatalf("we refuse the library's envelope: %v", err)
	}
	// Control: the library refuses a changed payload too.
	lenv.Payload = le.Payload[:len(le.Payload)-4] + "AAAA"
	if _, err := ev.Verify(context.Background(), lenv); err == nil {
		t.Fatal("the library verified a changed payload")
	}
}
