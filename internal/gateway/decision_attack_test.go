package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// A receipt's decision was whatever the gateway sent: anything but
// "allow" was recorded as a denial with that text. A compromised broker
// process recorded denials whose decision was a terminal escape (shown
// raw by policy explain --receipt) or "Deny" (missed by receipts
// --decision deny, and a new label value in every decision-keyed view).
// Observed in the store: record and settle_record refuse a decision that
// is neither allow nor deny, write nothing, and leave the reservation
// open. Control: the same receipts with "deny" are written.
func TestForgedDecisionIsRefused(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-dec"}
	srv := &Authority{Store: st, ID: id}
	c := connect(t, srv)
	ctx := context.Background()
	forged := []string{"deny\x1b]0;owned\x07", "Deny", "denied", ""}
	for _, d := range forged {
		err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "x.example:443", Decision: d, Reason: "host-not-allowed"})
		if !errors.Is(err, crossing.ErrPolicyDenied) {
			t.Errorf("record with decision %q = %v, want ErrPolicyDenied", d, err)
		}
	}
	model := modelAsk(ctx)
	for _, d := range forged {
		r, _, err := c.Reserve(model, id, "model", crossing.Amount{Requests: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		rc := crossing.Receipt{Broker: "model", Action: "model.invoke", Target: "m", Decision: d, Reason: "forged"}
		if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, rc); !errors.Is(err, crossing.ErrPolicyDenied) {
			t.Errorf("settle_record with decision %q = %v, want ErrPolicyDenied", d, err)
		}
		if _, err := c.Settle(ctx, r, crossing.Amount{Requests: 1}); err != nil {
			t.Fatalf("the reservation was not left open by the refusal: %v", err)
		}
	}
	// Control: deny is written by both.
	if err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "x.example:443", Decision: crossing.Deny, Reason: "host-not-allowed"}); err != nil {
		t.Fatalf("control record: %v", err)
	}
	r, _, err := c.Reserve(model, id, "model", crossing.Amount{Requests: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, crossing.Receipt{Broker: "model", Action: "model.invoke", Target: "m", Decision: crossing.Deny, Reason: "control"}); err != nil {
		t.Fatalf("control settle_record: %v", err)
	}
	rcs, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rcs) != 2 {
		t.Fatalf("receipts %+v, want only the two controls", rcs)
	}
	for _, rc := range rcs {
		if rc.Decision != crossing.Deny {
			t.Errorf("receipt %d decision %q, want deny", rc.ID, rc.Decision)
		}
	}
}
