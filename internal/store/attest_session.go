package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cordon-project/cordon/internal/crossing"
)

// SessionAttestation returns the newest stored attestation of kind
// logged for sandboxID (the receipt's sandbox_id), ErrNotFound if none:
// a daemon sandbox's signed containment receipt, for its status.
func (s *Store) SessionAttestation(ctx context.Context, kind, sandboxID string) (Attestation, error) {
	a := Attestation{Kind: kind}
	err := s.db.QueryRowContext(ctx, `SELECT a.receipt_id, a.digest, a.envelope FROM attestations a
		JOIN receipts r ON r.id = a.receipt_id WHERE a.kind = ? AND r.sandbox_id = ? ORDER BY a.receipt_id DESC LIMIT 1`, kind, sandboxID).
		Scan(&a.ReceiptID, &a.Digest, &a.Envelope)
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("%w: %s attestation of sandbox %s", ErrNotFound, kind, sandboxID)
	}
	if err != nil {
		return a, fmt.Errorf("%w: attestation: %v", crossing.ErrUnavailable, err)
	}
	return a, nil
}
