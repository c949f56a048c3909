package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// tool_end's receipt is the broker's, with the fields only this side may
// set replaced — but its rule, configuration digest and time were kept.
// A compromised tool broker process recorded its tool calls dated 2001
// (receipts --since 1h never lists them), with a configuration digest of
// its choosing (explain --receipt then reports a change that never
// happened, or hides one) and rule text of its choosing in
// receipts --json. Observed in the store: the receipt has this side's
// digest, no rule, and a time between the call's start and now. Control:
// the call's receipt is written (and its policy is this side's).
func TestToolEndReceiptFieldsAreThisSides(t *testing.T) {
	srv, c, st := policyServer(t)
	srv.ConfigDigest = "sha256:cfg"
	ctx := context.Background()
	start := time.Now()
	began, err := c.Begin(ctx, tool.Begin{Key: "k-forge", Server: "fs", Tool: "read", Arguments: json.RawMessage(`{}`)})
	if err != nil || began.Status != tool.StatusGo {
		t.Fatalf("begin: %+v %v", began, err)
	}
	forged := crossing.Receipt{Time: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), Rule: "config: forged rule", ConfigDigest: "sha256:forged"}
	if _, err := c.End(ctx, tool.End{Call: began.Call, Outcome: tool.OutcomeOK, Result: json.RawMessage(`{"content":[]}`), Receipt: forged}); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	rcs, err := st.Receipts(ctx, store.ReceiptFilter{Broker: "tool"})
	if err != nil || len(rcs) != 1 {
		t.Fatalf("tool receipts = %+v, %v; want 1 (control)", rcs, err)
	}
	rc := rcs[0]
	if rc.Policy == nil {
		t.Errorf("control: the receipt has no policy decision")
	}
	if rc.Rule != "" || rc.ConfigDigest != "sha256:cfg" {
		t.Errorf("receipt rule %q, config digest %q; want none and this side's", rc.Rule, rc.ConfigDigest)
	}
	if rc.Time.Before(start.Add(-time.Minute)) || rc.Time.After(end) {
		t.Errorf("receipt time %v, want between %v and %v", rc.Time, start, end)
	}
}
