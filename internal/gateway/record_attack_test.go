package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// An allowed receipt that no settled crossing stands for (only a
// compromised gateway sends one) took a slot of the receipt bound but no
// token of the crossing rate: the gateway could write the whole bound
// (100000 receipts and evidence-log leaves) as fast as the store commits.
// It now counts against the crossing rate like the crossing it claims.
// Observed in the store: the record of a connection that settled is
// written (positive control: it takes no token, its crossing took one),
// the forged ones within the burst too, and past it nothing.
func TestForgedAllowedRecordsAreRated(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-rec"}
	srv := &Authority{Store: st, ID: id, Crossings: CrossingLimits{Rate: 0.001, Burst: 3}}
	if err := srv.initReceipts(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := connect(t, srv)
	ctx := context.Background()
	ask := crossing.WithAsk(ctx, crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "example.test", Port: 443})
	conn, _, err := c.Reserve(ask, id, "egress", crossing.Amount{Connections: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Settle(ctx, conn, crossing.Amount{Connections: 1}); err != nil {
		t.Fatal(err)
	}
	genuine := crossing.Receipt{Broker: "egress", Action: "connect", Target: "example.test:443", Decision: crossing.Allow, Reason: "genuine"}
	if err := c.Record(ctx, genuine); err != nil {
		t.Fatalf("record of the settled connection: %v", err)
	}
	forged := crossing.Receipt{Broker: "egress", Action: "connect", Target: "x:443", Decision: crossing.Allow, Reason: "forged"}
	for i := 0; i < 2; i++ {
		if err := c.Record(ctx, forged); err != nil {
			t.Fatalf("forged record %d within the burst: %v", i, err)
		}
	}
	if err := c.Record(ctx, forged); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("forged record past the burst = %v, want ErrBudgetExceeded", err)
	}
	rcs, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rcs) != 3 || rcs[0].Reason != "genuine" {
		t.Fatalf("receipts %+v, want the genuine one and two forged", rcs)
	}
}
