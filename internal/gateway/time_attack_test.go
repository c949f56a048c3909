package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// A receipt's time was the broker's: the store indexes it and receipts
// --since (and logs, traces, anything that asks "what happened in the
// last hour") selects on it. A compromised broker process recorded its
// crossings — denials, and allowed connections — as made in 2001 (or
// in 2100), and cordon receipts --since 1h never listed them. Observed
// in the store: every receipt this side writes for a broker has a time
// between the Authority starting to serve and now, and --since finds
// it. Control: an honest time is kept as sent.
func TestReceiptTimeIsBoundedByThePrivilegedSide(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-time"}
	srv := &Authority{Store: st, ID: id}
	start := time.Now()
	c := connect(t, srv)
	ctx := context.Background()
	past, future := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), time.Now().Add(100*365*24*time.Hour)
	honest := time.Now().UTC()
	for _, when := range []time.Time{past, future, {}} {
		if err := c.Record(ctx, crossing.Receipt{Time: when, Broker: "egress", Action: "connect", Target: "x.example:443", Decision: crossing.Deny, Reason: "host-not-allowed"}); err != nil {
			t.Fatal(err)
		}
	}
	model := modelAsk(ctx)
	for _, when := range []time.Time{past, honest} {
		r, _, err := c.Reserve(model, id, "model", crossing.Amount{Requests: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, crossing.Receipt{Time: when, Broker: "model", Action: "model.invoke", Target: "m", Decision: crossing.Allow, Reason: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now()
	all, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
	if err != nil || len(all) != 5 {
		t.Fatalf("receipts = %d, %v; want 5", len(all), err)
	}
	recent, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID, Since: start.Add(-time.Minute)})
	if err != nil || len(recent) != 5 {
		t.Errorf("receipts --since the test began = %d, %v; want all 5", len(recent), err)
	}
	for _, rc := range all {
		if rc.Time.Before(start.Add(-time.Minute)) || rc.Time.After(end) {
			t.Errorf("receipt %d (%s) time %v, want between %v and %v", rc.ID, rc.Broker, rc.Time, start, end)
		}
	}
	if last := all[len(all)-1]; !last.Time.Equal(honest) {
		t.Errorf("control: an honest time %v was recorded as %v", honest, last.Time)
	}
}
