package store

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

// A reservation left by a gateway that died is charged in full, with a
// gateway_lost receipt, and the budget then refuses what it would have
// refused had the crossing settled at its reservation.
func TestChargeReservationsChargesInFull(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	bud := Budget{Limits: crossing.Amount{OutputTokens: 100}, Streams: 4}
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{Requests: 1, OutputTokens: 60}, 1, bud); err != nil {
		t.Fatal(err)
	}
	other := ledgerID
	other.SandboxID = "s2"
	if _, _, err := s.Reserve(ctx, other, "model", crossing.Amount{Requests: 1, OutputTokens: 10}, 1, bud); err != nil {
		t.Fatal(err)
	}
	lost, err := s.ChargeReservations(ctx, "s1", bud, func(rc *crossing.Receipt, r crossing.Reservation) {
		rc.Target = "claude-test"
		rc.Identity.Tenant = ledgerID.Tenant
		rc.Usage = crossing.Amount{} // an annotation cannot lower the charge
	})
	if err != nil || len(lost) != 1 || lost[0].Reservation.Held.OutputTokens != 60 {
		t.Fatalf("ChargeReservations = %+v, %v, want one reservation of 60 output tokens", lost, err)
	}
	rcs, err := s.Receipts(ctx, ReceiptFilter{SandboxID: "s1"})
	if err != nil || len(rcs) != 1 {
		t.Fatalf("receipts = %+v, %v, want one", rcs, err)
	}
	rc := rcs[0]
	if rc.Reason != ReasonGatewayLost || rc.Decision != crossing.Allow || rc.Usage.OutputTokens != 60 || rc.Target != "claude-test" ||
		rc.Identity.Tenant != "acme" || rc.Budget.Used.OutputTokens != 70 || rc.Budget.Streams != 1 {
		t.Fatalf("receipt = %+v, want gateway_lost, 60 tokens charged, 70 used (s2 still holds 10), one stream", rc)
	}
	// 60 charged + 10 held by s2: 31 more is over the limit, 30 fits.
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{OutputTokens: 31}, 0, bud); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("Reserve over the charged budget = %v, want ErrBudgetExceeded", err)
	}
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{OutputTokens: 30}, 0, bud); err != nil {
		t.Fatalf("Reserve up to the limit = %v", err)
	}
	// Nothing left to charge for s1 but the reservation just made; the
	// other sandbox's reservation was not touched.
	if lost, err := s.ChargeReservations(ctx, "s2", bud, nil); err != nil || len(lost) != 1 {
		t.Fatalf("charge s2 = %+v, %v", lost, err)
	}
}

// ReleaseCrossings (reclaim after a crash of cordon) charges, never drops.
func TestReleaseCrossingsCharges(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	bud := Budget{Limits: crossing.Amount{Requests: 2}}
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{Requests: 1}, 0, bud); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseCrossings(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{Requests: 2}, 0, bud); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("Reserve = %v, want ErrBudgetExceeded: the lost crossing counts", err)
	}
	rcs, _ := s.Receipts(ctx, ReceiptFilter{SandboxID: "s1"})
	if len(rcs) != 1 || rcs[0].Reason != ReasonGatewayLost || rcs[0].Usage.Requests != 1 {
		t.Fatalf("receipts = %+v, want one gateway_lost receipt", rcs)
	}
}
