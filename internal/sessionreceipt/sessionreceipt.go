package sessionreceipt

import (
	"context"
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

// Statement is the in-toto statement of rec. configDigest is the
// configuration's "sha256:<hex>" digest, "" for a session without one.
func Statement(rec *evidence.Record, configDigest string) (attest.Statement, error) {
	if rec == nil {
		return attest.Statement{}, errors.New("session receipt: no evidence record")
	}
	bin, err := hexDigest(rec.CordonSHA256)
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
func Sign(ctx context.Context, st *store.Store, stateDir string, rec *evidence.Record, configDigest string) (Receipt, error) {
	stmt, err := Statement(rec, configDigest)
	if err != nil {
		return Receipt{}, err
	}
	el, err := evlog.Open(st, stateDir)
	if err != nil {
		return Receipt{}, fmt.Errorf("session receipt: %w", err)
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
