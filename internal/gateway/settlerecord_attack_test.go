package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// record refuses a receipt of another broker on a channel, and writes
// tool and state receipts only from their own operations; settle_record
// wrote whatever broker its receipt named. A compromised gateway settled
// its own egress connection (or model call) with an allowed receipt of
// the tool or state broker — a tool call or a state write that never
// went through their trusted halves. Observed in the store: every
// receipt settle_record writes is its own channel's broker's, and the
// reservation stays open when refused. Control: the same settle_record
// with the channel's broker is written.
func TestSettleRecordWritesItsOwnBrokersReceipt(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-sr"}
	srv := &Authority{Store: st, ID: id}
	c := connect(t, srv)
	ctx := context.Background()
	model := modelAsk(ctx)
	for _, forged := range []string{"tool", "state", "egress", "gateway", ""} {
		r, _, err := c.Reserve(model, id, "model", crossing.Amount{Requests: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		rc := crossing.Receipt{Broker: forged, Action: "tools/call", Target: "fs/delete", Decision: crossing.Allow, Reason: "forged"}
		if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, rc); !errors.Is(err, crossing.ErrPolicyDenied) {
			t.Fatalf("settle_record of a %q receipt on the model channel = %v, want ErrPolicyDenied", forged, err)
		}
		if _, err := c.Settle(ctx, r, crossing.Amount{Requests: 1}); err != nil {
			t.Fatalf("the reservation was not left open by the refusal: %v", err)
		}
	}
	r, _, err := c.Reserve(model, id, "model", crossing.Amount{Requests: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, crossing.Receipt{Broker: "model", Action: "model.invoke", Decision: crossing.Allow, Reason: "control"}); err != nil {
		t.Fatalf("control: %v", err)
	}
	rcs, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rcs) != 1 || rcs[0].Broker != "model" || rcs[0].Reason != "control" {
		t.Fatalf("receipts %+v, want only the model's control", rcs)
	}
}

// A reservation this Authority did not open (an earlier gateway of the
// sandbox left it, and its charge has not run) could be settled on any
// broker's channel: the store matched the sandbox, not the broker.
// Observed in the store: on the egress channel the model reservation is
// refused and stays held; on the model channel it settles (control).
func TestEarlierReservationSettlesOnItsOwnBrokersChannel(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-early"}
	bud := store.Budget{}
	ctx := context.Background()
	early, _, err := st.Reserve(ctx, id, "model", crossing.Amount{Requests: 1}, 0, bud)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Authority{Store: st, ID: id}
	c := connect(t, srv)
	held := func() int64 {
		t.Helper()
		b, err := st.BudgetState(ctx, id.Workload, bud)
		if err != nil {
			t.Fatal(err)
		}
		return b.Used.Requests
	}
	if _, err := c.metered("egress").Settle(ctx, early, crossing.Amount{}); err == nil {
		t.Fatal("the model reservation was settled on the egress channel")
	}
	if n := held(); n != 1 {
		t.Fatalf("after the refused settle the store holds %d requests, want 1", n)
	}
	if _, err := c.metered("model").Settle(ctx, early, crossing.Amount{Requests: 1}); err != nil {
		t.Fatalf("settle on the model channel: %v", err)
	}
}
