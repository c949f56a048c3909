package sessionreceipt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/store"
)

// PredicateType is the in-toto predicate type of a session receipt; the
// predicate is the evidence record (schema cordon.evidence/v1).
const PredicateType = "https://cordon.dev/session-receipt/v1"

// Subject names.
const (
	SubjectBinary = "cordon"
	// SubjectConfig is the gateway configuration file's bytes;
	// SubjectNoConfig (the digest of no bytes) a session run without one.
	SubjectConfig   = "config"
	SubjectNoConfig = "config:none"
)

// Receipt is a signed, logged session receipt.
type Receipt struct {
	Envelope attest.Envelope
	// ReceiptID is the evidence-log receipt that logs the envelope
	// (evlog.Prove proves its inclusion once a checkpoint covers it).
	ReceiptID int64
	// Digest is "sha256:<hex>" of the envelope as attest.Marshal writes it.
	Digest string
}

// Statement is the in-toto statement of rec. binaryDigest is the running
// cordon binary's SHA-256 (hex, "sha256:" optional; "" for the record's
// own cordon_sha256), configDigest the configuration's, "" for a session
// without one.
func Statement(rec *evidence.Record, binaryDigest, configDigest string) (attest.Statement, error) {
	if rec == nil {
		return attest.Statement{}, errors.New("session receipt: no evidence record")
	}
	if binaryDigest == "" {
		binaryDigest = rec.CordonSHA256
	}
	bin, err := hexDigest(strings.TrimPrefix(binaryDigest, "sha256:"))
	if err == nil && rec.CordonSHA256 != "" && rec.CordonSHA256 != bin {
		err = fmt.Errorf("the record names binary %s", rec.CordonSHA256)
	}
	if err != nil {
		return attest.Statement{}, fmt.Errorf("session receipt: cordon binary digest: %w", err)
	}
	cfg := attest.Subject{Name: SubjectNoConfig, Digest: attest.SubjectDigest(sha256.Sum256(nil))}
	if configDigest != "" {
		d, err := hexDigest(strings.TrimPrefix(configDigest, "sha256:"))
		if err != nil {
			return attest.Statement{}, fmt.Errorf("session receipt: config digest: %w", err)
		}
		cfg = attest.Subject{Name: SubjectConfig, Digest: map[string]string{"sha256": d}}
	}
	pred, err := json.Marshal(rec)
	if err != nil {
		return attest.Statement{}, fmt.Errorf("session receipt: %w", err)
	}
	return attest.Statement{Type: attest.StatementType, PredicateType: PredicateType, Predicate: pred,
		Subject: []attest.Subject{{Name: SubjectBinary, Digest: map[string]string{"sha256": bin}}, cfg}}, nil
}

func hexDigest(h string) (string, error) {
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != h {
		return "", fmt.Errorf("%q is not a SHA-256 in lowercase hex", h)
	}
	return h, nil
}

// Sign signs rec with the evidence log's key of stateDir, appends the
// envelope to the log and signs a checkpoint that covers it. With no key yet it makes one first, exactly as the
// log itself does on first use (evlog.Open: refused when the log already
// holds checkpoints signed by a key that is gone).
func Sign(ctx context.Context, st *store.Store, stateDir string, rec *evidence.Record, binaryDigest, configDigest string) (Receipt, error) {
	stmt, err := Statement(rec, binaryDigest, configDigest)
	if err != nil {
		return Receipt{}, err
	}
	el, err := evlog.Open(st, stateDir)
	if err != nil {
		return Receipt{}, fmt.Errorf("session receipt: %w", err)
	}
	// The same check a gateway start makes: never extend (and sign a
	// checkpoint over) a log whose newest checkpoint no longer verifies.
	if err := el.CheckLatest(ctx); err != nil {
		return Receipt{}, fmt.Errorf("session receipt: the evidence log does not verify (run cordon evidence verify): %w", err)
	}
	k, err := attest.LoadKey(stateDir)
	if err != nil {
		return Receipt{}, fmt.Errorf("session receipt: %w", err)
	}
	env, err := attest.Sign(stmt, k)
	if err != nil {
		return Receipt{}, fmt.Errorf("session receipt: %w", err)
	}
	b, err := attest.Marshal(env)
	if err != nil {
		return Receipt{}, fmt.Errorf("session receipt: %w", err)
	}
	id, err := attest.Append(ctx, st, env, attest.KindSession, rec.SandboxID, rec.Workload)
	if err != nil {
		return Receipt{}, fmt.Errorf("session receipt: %w", err)
	}
	// A checkpoint covering the receipt now, so that its inclusion can
	// be proved at once (evlog.Prove), with or without a gateway's
	// checkpointer running.
	if _, err := el.Checkpoint(ctx); err != nil {
		return Receipt{}, fmt.Errorf("session receipt: checkpoint: %w", err)
	}
	return Receipt{Envelope: env, ReceiptID: id, Digest: attest.Digest(b)}, nil
}

// Verified is a receipt that verified: the statement and the record it
// signs.
type Verified struct {
	Statement attest.Statement
	Record    evidence.Record
	// Subjects maps each subject's name to its sha256 digest (hex).
	Subjects map[string]string
}

// Verify parses an envelope (untrusted input: bounded, strict), checks its
// signature with pub and that it is a session receipt: the predicate type,
// exactly the binary and one config subject, and a predicate that is an
// evidence record (cordon.evidence/v1) naming the same binary digest, if
// it names one (a provider may record none).
func Verify(b []byte, pub ed25519.PublicKey) (Verified, error) {
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		return Verified{}, err
	}
	st, err := attest.Verify(env, pub)
	if err != nil {
		return Verified{}, err
	}
	if st.PredicateType != PredicateType {
		return Verified{}, fmt.Errorf("%w: predicateType %q, want %q", attest.ErrMalformed, st.PredicateType, PredicateType)
	}
	v := Verified{Statement: st, Subjects: map[string]string{}}
	for _, s := range st.Subject {
		if _, dup := v.Subjects[s.Name]; dup {
			return Verified{}, fmt.Errorf("%w: subject %q twice", attest.ErrMalformed, s.Name)
		}
		v.Subjects[s.Name] = s.Digest["sha256"]
	}
	_, cfg := v.Subjects[SubjectConfig]
	_, none := v.Subjects[SubjectNoConfig]
	if len(st.Subject) != 2 || v.Subjects[SubjectBinary] == "" || cfg == none {
		return Verified{}, fmt.Errorf("%w: subjects %v, want %s and one of %s, %s", attest.ErrMalformed, v.Subjects, SubjectBinary, SubjectConfig, SubjectNoConfig)
	}
	dec := json.NewDecoder(bytes.NewReader(st.Predicate))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v.Record); err != nil {
		return Verified{}, fmt.Errorf("%w: predicate: %v", attest.ErrMalformed, err)
	}
	if v.Record.Schema != evidence.Schema || (v.Record.CordonSHA256 != "" && v.Record.CordonSHA256 != v.Subjects[SubjectBinary]) {
		return Verified{}, fmt.Errorf("%w: predicate is a %q record for binary %q, want %q for the subject's %q", attest.ErrMalformed,
			v.Record.Schema, v.Record.CordonSHA256, evidence.Schema, v.Subjects[SubjectBinary])
	}
	return v, nil
}
