package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cordon-project/cordon/internal/crossing"
)

// attestSchema (version 9) keeps each signed attestation (a DSSE envelope:
// a conformance record, a session's containment receipt) beside the
// digest-only receipt that puts it in the evidence log: the log proves the
// receipt, whose request_digest is the envelope's digest, and this copy
// lets `cordon conformance verify --log` say how a given record differs
// from the one logged.
const attestSchema = `
CREATE TABLE IF NOT EXISTS attestations (
	receipt_id INTEGER PRIMARY KEY REFERENCES receipts (id),
	kind       TEXT    NOT NULL,
	digest     TEXT    NOT NULL,  -- "sha256:<hex>" of envelope
	envelope   BLOB    NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS attestations_digest ON attestations (digest);
CREATE INDEX IF NOT EXISTS attestations_kind ON attestations (kind, receipt_id);
CREATE TRIGGER IF NOT EXISTS attestations_append_only_u BEFORE UPDATE ON attestations
	BEGIN SELECT RAISE(ABORT, 'attestations are append-only'); END;
CREATE TRIGGER IF NOT EXISTS attestations_append_only_d BEFORE DELETE ON attestations
	BEGIN SELECT RAISE(ABORT, 'attestations are append-only'); END;
`

// Attestation is one stored envelope and the receipt that logs it.
type Attestation struct {
	ReceiptID int64
	Kind      string
	Digest    string // "sha256:<hex>" of Envelope
	Envelope  []byte
}

// RecordAttestation records rc (a digest-only receipt whose RequestDigest
// is digest) with its evidence-log leaf and stores envelope beside it, in
// one transaction. It returns the receipt's id.
func (s *Store) RecordAttestation(ctx context.Context, rc crossing.Receipt, kind, digest string, envelope []byte) (id int64, err error) {
	if kind == "" || digest == "" || len(envelope) == 0 {
		return 0, errors.New("record attestation: kind, digest and envelope are required")
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		id, err = recordTx(ctx, tx, rc)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO attestations (receipt_id, kind, digest, envelope) VALUES (?,?,?,?)`,
			id, kind, digest, envelope); err != nil {
			return fmt.Errorf("%w: record attestation: %v", crossing.ErrUnavailable, err)
		}
		return nil
	})
	return id, err
}

// AttestationByDigest returns the stored attestation whose envelope has
// digest (ErrNotFound if none).
func (s *Store) AttestationByDigest(ctx context.Context, digest string) (Attestation, error) {
	a := Attestation{Digest: digest}
	err := s.db.QueryRowContext(ctx, `SELECT receipt_id, kind, envelope FROM attestations WHERE digest = ? ORDER BY receipt_id LIMIT 1`, digest).
		Scan(&a.ReceiptID, &a.Kind, &a.Envelope)
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("%w: attestation %s", ErrNotFound, digest)
	}
	if err != nil {
		return a, fmt.Errorf("%w: attestation: %v", crossing.ErrUnavailable, err)
	}
	return a, nil
}

// Attestations lists the stored attestations of kind ("" for every
// kind), newest first, at most limit.
func (s *Store) Attestations(ctx context.Context, kind string, limit int) ([]Attestation, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT receipt_id, kind, digest, envelope FROM attestations
		WHERE ? = '' OR kind = ? ORDER BY receipt_id DESC LIMIT ?`, kind, kind, limit)
	if err != nil {
		return nil, fmt.Errorf("%w: attestations: %v", crossing.ErrUnavailable, err)
	}
	defer rows.Close()
	var out []Attestation
	for rows.Next() {
		var a Attestation
		if err := rows.Scan(&a.ReceiptID, &a.Kind, &a.Digest, &a.Envelope); err != nil {
			return nil, fmt.Errorf("%w: attestations: %v", crossing.ErrUnavailable, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: attestations: %v", crossing.ErrUnavailable, err)
	}
	return out, nil
}
