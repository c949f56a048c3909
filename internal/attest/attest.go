package attest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cordon-project/cordon/internal/evlog"
)

// PayloadType is the DSSE payload type of an in-toto Statement.
const PayloadType = "application/vnd.in-toto+json"

// StatementType is the in-toto Statement v1 _type.
const StatementType = "https://in-toto.io/Statement/v1"

// MaxEnvelope bounds an envelope read from anywhere (16 MiB).
const MaxEnvelope = 16 << 20

// Subject is one artifact the statement is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Statement is an in-toto Statement v1.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Envelope is a DSSE envelope; Payload is standard base64 of the payload.
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     string      `json:"payload"`
	Signatures  []Signature `json:"signatures"`
}

// Signature is one DSSE signature: the key id (the evidence log key's note
// hash) and base64 of the ed25519 signature of PAE(payloadType, payload).
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// Key is a signing key: the evidence log's, with its key id.
type Key struct {
	Private ed25519.PrivateKey
	ID      string
}

// Errors. A *FieldError wraps one of them and names the field.
var (
	// ErrMalformed: not an envelope or statement of the expected shape.
	ErrMalformed = errors.New("malformed attestation")
	// ErrSignature: the signature does not verify with the key given.
	ErrSignature = errors.New("signature does not verify")
)

// FieldError says which field of the envelope or statement is wrong.
type FieldError struct {
	Field   string // "payloadType", "payload", "signatures[0].sig", "statement.subject[1].digest", …
	Problem string
	Err     error // ErrMalformed or ErrSignature
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }
func (e *FieldError) Unwrap() error { return e.Err }

func malformed(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...), Err: ErrMalformed}
}

// b64 is strict standard base64: padding bits must be zero and no
// newlines are skipped, so one payload has exactly one encoding.
var b64 = base64.StdEncoding.Strict()

// PAE is DSSE's pre-authentication encoding:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, with LEN the ASCII
// decimal byte count and SP one 0x20 byte.
func PAE(payloadType string, body []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payloadType) + len(body) + 32)
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(body)))
	b.WriteByte(' ')
	b.Write(body)
	return b.Bytes()
}

// LoadKey reads the evidence log's signing key of a state dir
// (evlog.KeyDir(stateDir)/log.key), with evlog's file checks.
func LoadKey(stateDir string) (Key, error) {
	priv, id, err := evlog.LoadSigningKey(evlog.KeyDir(stateDir))
	if err != nil {
		return Key{}, err
	}
	return Key{Private: priv, ID: id}, nil
}

// Sign checks the statement's shape, encodes it and signs it.
func Sign(st Statement, k Key) (Envelope, error) {
	if len(k.Private) != ed25519.PrivateKeySize || k.ID == "" {
		return Envelope{}, errors.New("sign attestation: no signing key")
	}
	if err := checkStatement(st); err != nil {
		return Envelope{}, fmt.Errorf("sign attestation: %w", err)
	}
	body, err := json.Marshal(st)
	if err != nil {
		return Envelope{}, fmt.Errorf("sign attestation: %w", err)
	}
	sig := ed25519.Sign(k.Private, PAE(PayloadType, body))
	return Envelope{PayloadType: PayloadType, Payload: b64.EncodeToString(body),
		Signatures: []Signature{{KeyID: k.ID, Sig: b64.EncodeToString(sig)}}}, nil
}

// Verify checks the envelope's one signature with pub (any key id) and
// returns the statement it signs. Errors are *FieldError naming the field.
func Verify(env Envelope, pub ed25519.PublicKey) (Statement, error) {
	return VerifyKeyID(env, pub, "")
}

// VerifyKeyID is Verify that also requires the signature's key id to be
// keyID (evlog.KeyID of the public key), unless keyID is empty.
func VerifyKeyID(env Envelope, pub ed25519.PublicKey, keyID string) (Statement, error) {
	if len(pub) != ed25519.PublicKeySize {
		return Statement{}, errors.New("verify attestation: no public key")
	}
	if env.PayloadType != PayloadType {
		return Statement{}, &FieldError{Field: "payloadType", Problem: fmt.Sprintf("%q, want %q", env.PayloadType, PayloadType), Err: ErrMalformed}
	}
	body, err := b64.DecodeString(env.Payload)
	if err != nil {
		return Statement{}, malformed("payload", "not standard base64: %v", err)
	}
	if len(env.Signatures) != 1 {
		return Statement{}, malformed("signatures", "%d signatures, want exactly 1", len(env.Signatures))
	}
	s := env.Signatures[0]
	if keyID != "" && s.KeyID != keyID {
		return Statement{}, &FieldError{Field: "signatures[0].keyid", Problem: fmt.Sprintf("%q, but the key given is %q", s.KeyID, keyID), Err: ErrSignature}
	}
	sig, err := b64.DecodeString(s.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Statement{}, malformed("signatures[0].sig", "not a base64 ed25519 signature")
	}
	if !ed25519.Verify(pub, PAE(env.PayloadType, body), sig) {
		return Statement{}, &FieldError{Field: "signatures[0].sig", Problem: "does not verify over payloadType and payload with the key given (the payload or the signature changed, or another key signed)", Err: ErrSignature}
	}
	st, err := ParseStatement(body)
	if err != nil {
		return Statement{}, err
	}
	return st, nil
}

// ParseStatement decodes a statement strictly: exact field names, no
// unknown fields, one JSON value, and the shape checkStatement wants.
func ParseStatement(body []byte) (Statement, error) {
	if err := exactKeys(body, "statement", "_type", "subject", "predicateType", "predicate"); err != nil {
		return Statement{}, err
	}
	var st Statement
	if err := strictUnmarshal(body, &st); err != nil {
		return Statement{}, malformed("statement", "%v", err)
	}
	if err := checkStatement(st); err != nil {
		return Statement{}, err
	}
	return st, nil
}

func checkStatement(st Statement) error {
	if st.Type != StatementType {
		return malformed("statement._type", "%q, want %q", st.Type, StatementType)
	}
	if len(st.Subject) == 0 {
		return malformed("statement.subject", "no subject")
	}
	for i, s := range st.Subject {
		if s.Name == "" {
			return malformed(fmt.Sprintf("statement.subject[%d].name", i), "empty")
		}
		d, ok := s.Digest["sha256"]
		if !ok || len(s.Digest) != 1 {
			return malformed(fmt.Sprintf("statement.subject[%d].digest", i), "want exactly a sha256 digest")
		}
		if b, err := hex.DecodeString(d); err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != d {
			return malformed(fmt.Sprintf("statement.subject[%d].digest.sha256", i), "%q is not 64 lowercase hex digits", d)
		}
	}
	if st.PredicateType == "" {
		return malformed("statement.predicateType", "empty")
	}
	if len(st.Predicate) == 0 || st.Predicate[0] != '{' {
		return malformed("statement.predicate", "not a JSON object")
	}
	return nil
}

// ParseEnvelope decodes an envelope strictly (exact field names, no
// unknown or duplicate fields, bounded size) without verifying it.
func ParseEnvelope(b []byte) (Envelope, error) {
	if len(b) > MaxEnvelope {
		return Envelope{}, malformed("envelope", "%d bytes, over the bound of %d", len(b), MaxEnvelope)
	}
	if err := exactKeys(b, "envelope", "payloadType", "payload", "signatures"); err != nil {
		return Envelope{}, err
	}
	var raw struct {
		Signatures []json.RawMessage `json:"signatures"`
	}
	if json.Unmarshal(b, &raw) == nil { // a type error is named below
		for i, s := range raw.Signatures {
			if err := exactKeys(s, fmt.Sprintf("signatures[%d]", i), "keyid", "sig"); err != nil {
				return Envelope{}, err
			}
		}
	}
	var env Envelope
	if err := strictUnmarshal(b, &env); err != nil {
		where := "envelope"
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		var td *trailingData
		switch {
		case errors.As(err, &se):
			where = fmt.Sprintf("envelope @byte %d", se.Offset)
		case errors.As(err, &td):
			where = fmt.Sprintf("envelope @byte %d", td.Offset)
		case errors.As(err, &te):
			where = "envelope." + te.Field
		}
		return Envelope{}, malformed(where, "%v", err)
	}
	return env, nil
}

// Payload returns the envelope's payload bytes (strict base64), unverified.
func Payload(env Envelope) ([]byte, error) {
	b, err := b64.DecodeString(env.Payload)
	if err != nil {
		return nil, malformed("payload", "not standard base64: %v", err)
	}
	return b, nil
}

// Marshal encodes an envelope as cordon writes it: compact JSON and one
// newline.
func Marshal(env Envelope) ([]byte, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Digest is "sha256:<hex>" of b.
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}
