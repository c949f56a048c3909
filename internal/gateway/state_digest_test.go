package gateway

import (
	"context"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/store"
)

// Every receipt records the configuration's digest so that policy
// explain --receipt can say the configuration changed since; the state
// broker's trusted half wrote its receipts (allowed and denied) without
// it, so a replayed state denial never said so. Observed in the store:
// both carry the sandbox's digest. Control: the operations happened (a
// receipt each).
func TestStateReceiptsRecordTheConfigDigest(t *testing.T) {
	st := testStore(t)
	srv, c := stateClient(t, st, idA, testState)
	srv.ConfigDigest = "sha256:cfg"
	ctx := context.Background()
	if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: "notes/a", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: "../escape", Value: []byte("x")}); err == nil {
		t.Fatal("a put outside the scope's key syntax: allowed")
	}
	rcs, err := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name})
	if err != nil || len(rcs) != 2 {
		t.Fatalf("state receipts = %+v, %v; want an allow and a deny", rcs, err)
	}
	for _, rc := range rcs {
		if rc.ConfigDigest != "sha256:cfg" {
			t.Errorf("%s receipt %d config digest %q, want the sandbox's", rc.Decision, rc.ID, rc.ConfigDigest)
		}
	}
}
