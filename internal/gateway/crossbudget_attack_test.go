package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

func sandboxReceipts(t *testing.T, st *store.Store, id crossing.Identity) []crossing.Receipt {
	t.Helper()
	rcs, err := st.Receipts(context.Background(), store.ReceiptFilter{SandboxID: id.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	return rcs
}

// A crossing that needs an approval is served apart from the batch
// (reserveApproved): it must count against the crossing rate and the
// receipt bound like any other. Attack: one operator approval of a
// sandbox-scoped egress host, then connections as fast as the agent can.
// Observed in the store: the sandbox's receipts stay within the bound
// (plus its marker) and the connections past it are refused. Control:
// the same approved connection goes through before the bound.
func TestReceiptBudgetBoundsApprovedCrossings(t *testing.T) {
	st := testStore(t)
	ctx := context.Background()
	srv, c := approvalServer(t, st, approvalPolicy, time.Minute)
	const bound = 20
	srv.Crossings = CrossingLimits{MaxReceipts: bound}
	if err := srv.initReceipts(ctx); err != nil {
		t.Fatal(err)
	}
	cross := egressCrossing("pkg.example.com")
	ref, _, err := cross(t, c, st, 0)
	if !errors.Is(err, crossing.ErrApprovalPending) {
		t.Fatalf("first connection: %v", err)
	}
	decide(t, st, ref.ID, true)
	allowed, refused := 0, 0
	for i := 0; i < 3*bound; i++ {
		_, _, err := cross(t, c, st, 0)
		switch {
		case err == nil:
			allowed++
		case errors.Is(err, crossing.ErrBudgetExceeded):
			refused++
		default:
			t.Fatalf("connection %d = %v", i, err)
		}
	}
	if allowed == 0 {
		t.Fatal("no approved connection went through: the control failed")
	}
	rcs := sandboxReceipts(t, st, apprID)
	if len(rcs) > bound+1 || refused == 0 {
		t.Fatalf("sandbox has %d receipts (allowed %d, refused %d), want at most the bound %d and its marker", len(rcs), allowed, refused, bound)
	}
	if last := rcs[len(rcs)-1]; !strings.HasPrefix(last.Reason, ReasonReceiptBudgetExhausted) {
		t.Fatalf("last receipt %q, want the marker", last.Reason)
	}
}

// The same crossings count against the crossing rate.
func TestCrossingRateBoundsApprovedCrossings(t *testing.T) {
	st := testStore(t)
	ctx := context.Background()
	srv, c := approvalServer(t, st, approvalPolicy, time.Minute)
	srv.Crossings = CrossingLimits{Rate: 0.001, Burst: 5}
	if err := srv.initReceipts(ctx); err != nil {
		t.Fatal(err)
	}
	cross := egressCrossing("pkg.example.com")
	ref, _, err := cross(t, c, st, 0)
	if !errors.Is(err, crossing.ErrApprovalPending) {
		t.Fatalf("first connection: %v", err)
	}
	decide(t, st, ref.ID, true)
	allowed := 0
	for i := 0; i < 20; i++ {
		if _, _, err := cross(t, c, st, 0); err == nil {
			allowed++
		} else if !errors.Is(err, crossing.ErrBudgetExceeded) || !strings.Contains(err.Error(), "crossing rate") {
			t.Fatalf("connection %d = %v", i, err)
		}
	}
	// The burst of 5 was partly spent by the first (pending) attempt.
	if allowed == 0 || allowed > 5 {
		t.Fatalf("allowed %d approved connections, want 1 to the burst of 5", allowed)
	}
}

// A compromised gateway speaks the authority protocol itself. The receipt
// bound holds against it too: it cannot grow the sandbox's receipts past
// the bound by (a) recording allowed receipts no crossing settled, (b)
// settling an egress byte-chunk reservation (which takes no policy
// question) with a receipt, or (c) leaving many chunk reservations open
// and dying, each then charged with a gateway_lost receipt. Observed in
// the store: at most the bound plus the marker and the lost receipts of
// what the bound let it hold. Control: the first of each goes through.
func TestReceiptBudgetHoldsAgainstTheGateway(t *testing.T) {
	const bound = 20
	attacks := []struct {
		name string
		one  func(c *testClient, i int) error
	}{
		{"allowed record without a crossing", func(c *testClient, i int) error {
			return c.Record(context.Background(), crossing.Receipt{Broker: "egress", Action: "connect", Target: "x:443", Decision: crossing.Allow})
		}},
		{"settle_record of a byte chunk", func(c *testClient, i int) error {
			ctx := context.Background()
			r, err := chunkInConnection(c)
			if err != nil {
				return err
			}
			_, err = c.SettleRecord(ctx, r, crossing.Amount{EgressBytes: 1}, crossing.Receipt{Broker: "egress", Action: "connect", Decision: crossing.Allow})
			return err
		}},
		{"byte chunks left open", func(c *testClient, i int) error {
			_, err := chunkInConnection(c)
			return err
		}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			st := testStore(t)
			ctx := context.Background()
			srv, c := approvalServer(t, st, controlPolicy, time.Minute)
			srv.Crossings = CrossingLimits{MaxReceipts: bound}
			if err := srv.initReceipts(ctx); err != nil {
				t.Fatal(err)
			}
			ok := 0
			for i := 0; i < 3*bound; i++ {
				err := a.one(c, i)
				if err == nil {
					ok++
				} else if !errors.Is(err, crossing.ErrBudgetExceeded) {
					t.Fatalf("attempt %d = %v", i, err)
				}
			}
			if ok == 0 {
				t.Fatal("nothing went through: the control failed")
			}
			// The gateway dies: what it holds is charged and receipted.
			if _, err := srv.chargeLost(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(sandboxReceipts(t, st, apprID)); n > bound+1 {
				t.Fatalf("sandbox has %d receipts after %d accepted requests, want at most the bound %d and its marker", n, ok, bound)
			}
		})
	}
}

// chunkInConnection opens an egress connection (left open) and reserves
// a byte chunk inside it: a chunk is held only inside an open connection
// (TestByteChunksNeedAnOpenConnection).
func chunkInConnection(c *testClient) (crossing.Reservation, error) {
	ctx := context.Background()
	ask := crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "api.example.com", Port: 443}
	if _, _, err := c.Reserve(crossing.WithAsk(ctx, ask), crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0); err != nil {
		return crossing.Reservation{}, err
	}
	r, _, err := c.Reserve(ctx, crossing.Identity{}, "egress", crossing.Amount{EgressBytes: 1}, 0)
	return r, err
}

// The privileged side keeps a policy decision per open reservation for
// its receipt. An egress connection is settled and then recorded (not
// settled with its receipt), and its decision stayed behind; the store
// reuses a settled reservation's id, so a later reservation with that id
// — here a byte chunk the gateway left open when it died — was receipted
// as gateway_lost with the connection's policy decision, which never
// decided it. Observed in the store: the lost chunk's receipt carries no
// decision. Control: the connection's own decision was kept while open.
func TestSettledEgressLeavesNoDecision(t *testing.T) {
	st := testStore(t)
	srv, c := approvalServer(t, st, controlPolicy, time.Minute)
	ctx := context.Background()
	ask := crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "api.example.com", Port: 443}
	// A connection left open holds the chunk below (a chunk is held only
	// inside an open connection); it is reserved first, so the store
	// reuses the id of the one settled next.
	if _, _, err := c.Reserve(crossing.WithAsk(ctx, ask), crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0); err != nil {
		t.Fatal(err)
	}
	conn, _, err := c.Reserve(crossing.WithAsk(ctx, ask), crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	kept := srv.decided[conn.ID]
	srv.mu.Unlock()
	if kept == nil {
		t.Fatal("no decision kept for the open connection: the control failed")
	}
	if _, err := c.Settle(ctx, conn, crossing.Amount{Connections: 1}); err != nil {
		t.Fatal(err)
	}
	chunk, _, err := c.Reserve(ctx, crossing.Identity{}, "egress", crossing.Amount{EgressBytes: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if chunk.ID != conn.ID {
		t.Skipf("the store did not reuse reservation id %d (got %d)", conn.ID, chunk.ID)
	}
	if _, err := srv.chargeLost(ctx); err != nil {
		t.Fatal(err)
	}
	var last *crossing.Receipt
	for _, rc := range sandboxReceipts(t, st, apprID) {
		if rc.Reason == store.ReasonGatewayLost && rc.Usage.EgressBytes > 0 {
			last = &rc
		}
	}
	if last == nil {
		t.Fatal("no gateway_lost receipt of the chunk")
	}
	if last.Policy != nil {
		t.Fatalf("the lost byte chunk is receipted with policy decision %+v, which decided the connection settled before it", *last.Policy)
	}
}
