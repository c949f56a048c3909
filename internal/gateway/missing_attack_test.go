package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// An allowed crossing that settles with a plain settle owes its receipt
// in a record (egress settles, then records). A compromised gateway that
// never sent it left an allowed crossing without any receipt. When the
// gateway stops, the root side now writes one receipt per broker with
// the number of crossings whose receipt never came. Observed in the
// store: a model call settled without its record is counted in a model
// receipt_missing receipt; an egress connection settled and recorded
// (positive control) is not.
func TestSettledCrossingWithoutItsRecordIsReceipted(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-missing"}
	srv := &Authority{Store: st, ID: id}
	c := connect(t, srv)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		r, _, err := c.Reserve(modelAsk(ctx), id, "model", crossing.Amount{Requests: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Settle(ctx, r, crossing.Amount{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	ask := crossing.WithAsk(ctx, crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "example.test", Port: 443})
	conn, _, err := c.Reserve(ask, id, "egress", crossing.Amount{Connections: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Settle(ctx, conn, crossing.Amount{Connections: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "example.test:443", Decision: crossing.Allow, Reason: "connected"}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	<-c.served
	srv.finishReceipts(ctx)
	rcs, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	var missing []crossing.Receipt
	for _, rc := range rcs {
		if strings.HasPrefix(rc.Reason, ReasonReceiptMissing) {
			missing = append(missing, rc)
		}
	}
	if len(missing) != 1 || missing[0].Broker != "model" || !strings.Contains(missing[0].Reason, ": 2 ") {
		t.Fatalf("receipt_missing receipts %+v, want one of the model broker counting 2", missing)
	}
}
