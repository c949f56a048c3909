package attest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// Broker is the receipt broker of a logged attestation.
const Broker = "evidence"

// Receipt actions (kinds) of logged attestations.
const (
	KindConformance = "conformance.record"
	KindSession     = "session.receipt"
)

// Append logs env in the evidence log as a digest-only receipt (Broker
// "evidence", Action kind, Target the sandbox id or "host",
// RequestDigest the digest of the envelope as Marshal writes it,
// ResultDigest the digest of the statement it signs) and stores the
// envelope beside it, in one transaction. It returns the receipt id, which
// evlog.Prove turns into an inclusion proof once a checkpoint covers it.
// It does not verify env: callers append what they signed.
func Append(ctx context.Context, st *store.Store, env Envelope, kind, sandboxID, workload string) (receiptID int64, err error) {
	b, err := Marshal(env)
	if err != nil {
		return 0, fmt.Errorf("log attestation: %w", err)
	}
	body, err := Payload(env)
	if err != nil {
		return 0, fmt.Errorf("log attestation: %w", err)
	}
	target := sandboxID
	if target == "" {
		target = "host"
	}
	rc := crossing.Receipt{
		Time:          time.Now().UTC(),
		Identity:      crossing.Identity{Workload: workload, SandboxID: sandboxID},
		Broker:        Broker,
		Action:        kind,
		Target:        target,
		RequestDigest: Digest(b),
		Decision:      crossing.Allow,
		Reason:        "signed attestation logged",
		ResultDigest:  Digest(body),
		BytesIn:       int64(len(b)),
	}
	id, err := st.RecordAttestation(ctx, rc, kind, rc.RequestDigest, b)
	if err != nil {
		return 0, fmt.Errorf("log attestation: %w", err)
	}
	return id, nil
}

// SubjectDigest is a subject digest map for sha256 hex h.
func SubjectDigest(sum [sha256.Size]byte) map[string]string {
	return map[string]string{"sha256": hex.EncodeToString(sum[:])}
}
