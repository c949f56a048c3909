package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// TestAttestationWithItsReceipt: the envelope is stored with the receipt
// that logs it (a leaf of the evidence log), found by digest and listed
// by kind; a database of version 8 gains the table on open, its receipts
// kept.
func TestAttestationWithItsReceipt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, testPool)
	old, err := s.RecordReceipt(ctx, crossing.Receipt{Time: time.Unix(1, 0), Broker: "model", Decision: crossing.Allow})
	if err != nil {
		t.Fatal(err)
	}
	// Back to version 8: no attestations table.
	if _, err := s.db.ExecContext(ctx, "DROP TABLE attestations; PRAGMA user_version = 8"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, dir, testPool)

	rc := crossing.Receipt{Time: time.Unix(2, 0), Broker: "evidence", Action: "conformance.record", Target: "host",
		RequestDigest: "sha256:aa", Decision: crossing.Allow}
	id, err := s.RecordAttestation(ctx, rc, "conformance.record", "sha256:aa", []byte(`{"envelope":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if id <= old {
		t.Fatalf("receipt id %d after %d", id, old)
	}
	if _, err := s.LogIndex(ctx, id); err != nil {
		t.Fatalf("the attestation's receipt is not a leaf: %v", err)
	}
	a, err := s.AttestationByDigest(ctx, "sha256:aa")
	if err != nil || a.ReceiptID != id || string(a.Envelope) != `{"envelope":1}` || a.Kind != "conformance.record" {
		t.Fatalf("AttestationByDigest = %+v, %v", a, err)
	}
	if _, err := s.AttestationByDigest(ctx, "sha256:bb"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown digest: err = %v, want ErrNotFound", err)
	}
	for kind, n := range map[string]int{"": 1, "conformance.record": 1, "session.receipt": 0} {
		as, err := s.Attestations(ctx, kind, 10)
		if err != nil || len(as) != n {
			t.Errorf("Attestations(%q) = %d, %v; want %d", kind, len(as), err, n)
		}
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE attestations SET envelope = x'00'`); err == nil {
		t.Error("a stored attestation was changed: want append-only")
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM attestations`); err == nil {
		t.Error("a stored attestation was deleted: want append-only")
	}
	if _, err := s.RecordAttestation(ctx, rc, "", "sha256:aa", nil); err == nil {
		t.Error("an attestation without kind or envelope was stored")
	}
}
