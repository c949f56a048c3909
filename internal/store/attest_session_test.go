package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// TestSessionAttestation: a sandbox's newest session receipt is found by
// its sandbox id (another sandbox's is not), and it does not count
// against the sandbox's receipt bound (CountReceipts counts crossings).
func TestSessionAttestation(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), testPool)
	id := crossing.Identity{Workload: "w", SandboxID: "sb1"}
	if _, err := s.RecordReceipt(ctx, crossing.Receipt{Time: time.Unix(1, 0), Identity: id, Broker: "model", Decision: crossing.Allow}); err != nil {
		t.Fatal(err)
	}
	var last int64
	for i, sb := range []string{"sb1", "sb2", "sb1"} {
		rc := crossing.Receipt{Time: time.Unix(int64(2+i), 0), Identity: crossing.Identity{Workload: "w", SandboxID: sb}, Broker: "evidence",
			Action: "session.receipt", Target: sb, RequestDigest: "sha256:" + string(rune('a'+i)), Decision: crossing.Allow}
		n, err := s.RecordAttestation(ctx, rc, "session.receipt", rc.RequestDigest, []byte(`{"n":`+string(rune('0'+i))+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if sb == "sb1" {
			last = n
		}
	}
	a, err := s.SessionAttestation(ctx, "session.receipt", "sb1")
	if err != nil || a.ReceiptID != last || string(a.Envelope) != `{"n":2}` {
		t.Fatalf("SessionAttestation(sb1) = %+v, %v; want receipt %d, the newest", a, err, last)
	}
	if _, err := s.SessionAttestation(ctx, "session.receipt", "sb3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SessionAttestation(sb3) = %v, want ErrNotFound", err)
	}
	if n, err := s.CountReceipts(ctx, "w", "sb1"); err != nil || n != 1 {
		t.Errorf("CountReceipts(sb1) = %d, %v; want 1 (the crossing, not the session receipts)", n, err)
	}
}
