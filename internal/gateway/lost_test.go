package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// A gateway that dies with a stream open leaves a reservation this side
// charges in full: the receipt carries what this side knew (identity,
// target, policy decision), the reason gateway_lost, and the whole
// reservation as usage; the budget then refuses what no longer fits. A
// crossing that settled is not charged again.
func TestChargeLostCrossings(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-lost"}
	srv := &Authority{Store: st, ID: id, Budget: store.Budget{Limits: crossing.Amount{OutputTokens: 1000}}}
	c := connect(t, srv)
	ctx := modelAsk(context.Background())
	done, _, err := c.Reserve(ctx, id, "model", crossing.Amount{Requests: 1, OutputTokens: 300}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SettleRecord(ctx, done, crossing.Amount{Requests: 1, OutputTokens: 5}, crossing.Receipt{Broker: "model", Decision: crossing.Allow}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Reserve(ctx, id, "model", crossing.Amount{Requests: 1, OutputTokens: 600}, 1); err != nil {
		t.Fatal(err)
	}
	// The gateway dies: its end of the authority closes.
	c.Close()
	<-c.served
	lost, err := srv.chargeLost(context.Background())
	if err != nil || len(lost) != 1 {
		t.Fatalf("chargeLost = %+v, %v, want the one open reservation", lost, err)
	}
	rcs, _ := st.Receipts(context.Background(), store.ReceiptFilter{SandboxID: id.SandboxID})
	if len(rcs) != 2 {
		t.Fatalf("receipts = %+v, want the settled one and the lost one", rcs)
	}
	rc := rcs[1]
	if rc.Reason != store.ReasonGatewayLost || rc.Identity != id || rc.Usage.OutputTokens != 600 || rc.Policy == nil ||
		rc.Target == "" || rc.Budget.Used.OutputTokens != 605 || rc.Budget.Limits.OutputTokens != 1000 {
		t.Fatalf("lost receipt = %+v, want gateway_lost charging 600 (605 used of 1000), with the sandbox's identity, target and policy", rc)
	}
	// 605 used: 400 more is over the budget.
	if _, _, err := st.Reserve(context.Background(), id, "model", crossing.Amount{OutputTokens: 400}, 0, srv.Budget); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("reserve after the loss = %v, want ErrBudgetExceeded", err)
	}
	if lost, err := srv.chargeLost(context.Background()); err != nil || len(lost) != 0 {
		t.Fatalf("second chargeLost = %+v, %v, want nothing left", lost, err)
	}
}
