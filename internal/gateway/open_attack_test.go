package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// An egress byte chunk takes no policy question and no token of the
// crossing rate: it is only ever reserved inside an open connection (the
// egress broker's meter holds one chunk at a time). A compromised gateway
// reserving chunks with no connection open, and never settling them, made
// every later reservation of the workload sum all of them in the store's
// write transaction: 20000 took 100 s of the store's write lock (shared
// by every sandbox of a daemon), 100000 (the receipt bound) far longer.
// Observed in the store: with no connection open a chunk holds nothing;
// with one open, one chunk is held and a second refused until the first
// settles (positive control).
func TestByteChunksNeedAnOpenConnection(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-chunks"}
	srv := &Authority{Store: st, ID: id}
	c := connect(t, srv)
	ctx := context.Background()
	egressAsk := crossing.WithAsk(ctx, crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "example.test", Port: 443})
	held := func() crossing.Amount {
		t.Helper()
		b, err := st.BudgetState(ctx, id.Workload, store.Budget{})
		if err != nil {
			t.Fatal(err)
		}
		return b.Used
	}
	chunk := crossing.Amount{EgressBytes: 1 << 20}

	for i := 0; i < 3; i++ {
		if _, _, err := c.Reserve(ctx, id, "egress", chunk, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
			t.Fatalf("chunk %d without a connection = %v, want ErrPolicyDenied", i, err)
		}
	}
	if u := held(); u.EgressBytes != 0 {
		t.Fatalf("after chunks without a connection the store holds %+v, want nothing", u)
	}

	// Control: inside an open connection a chunk is held.
	conn, _, err := c.Reserve(egressAsk, id, "egress", crossing.Amount{Connections: 1}, 0)
	if err != nil {
		t.Fatalf("connection: %v", err)
	}
	first, _, err := c.Reserve(ctx, id, "egress", chunk, 0)
	if err != nil {
		t.Fatalf("chunk inside a connection: %v", err)
	}
	if _, _, err := c.Reserve(ctx, id, "egress", chunk, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("second chunk held by one connection = %v, want ErrPolicyDenied", err)
	}
	if u := held(); u.EgressBytes != chunk.EgressBytes || u.Connections != 1 {
		t.Fatalf("the store holds %+v, want one connection and one chunk", u)
	}
	// The meter settles a used-up chunk, then reserves the next.
	if _, err := c.Settle(ctx, first, chunk); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Reserve(ctx, id, "egress", chunk, 0); err != nil {
		t.Fatalf("next chunk after the first settled: %v", err)
	}
	// A chunk cannot ride on a model call's reservation.
	if _, err := c.Settle(ctx, conn, crossing.Amount{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Reserve(modelAsk(ctx), id, "model", crossing.Amount{Requests: 1}, 0); err != nil {
		t.Fatalf("model call: %v", err)
	}
	if _, _, err := c.Reserve(ctx, id, "egress", chunk, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("chunk with only a model call open = %v, want ErrPolicyDenied", err)
	}
}

// Every open reservation costs every later one of the workload a row to
// sum: a sandbox holds at most maxOpen at once. Observed in the store:
// past the bound a reservation holds nothing; once one settles, the next
// is held again (positive control).
func TestOpenReservationsAreBounded(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-open"}
	const bound = 8
	srv := &Authority{Store: st, ID: id, maxOpen: bound}
	c := connect(t, srv)
	ctx := modelAsk(context.Background())
	requests := func() int64 {
		t.Helper()
		b, err := st.BudgetState(ctx, id.Workload, store.Budget{})
		if err != nil {
			t.Fatal(err)
		}
		return b.Used.Requests
	}
	var open []crossing.Reservation
	for i := 0; i < bound; i++ {
		r, _, err := c.Reserve(ctx, id, "model", crossing.Amount{Requests: 1}, 0)
		if err != nil {
			t.Fatalf("reservation %d under the bound: %v", i, err)
		}
		open = append(open, r)
	}
	if _, _, err := c.Reserve(ctx, id, "model", crossing.Amount{Requests: 1}, 0); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("reservation past the bound = %v, want ErrBudgetExceeded", err)
	}
	if n := requests(); n != bound {
		t.Fatalf("the store holds %d requests, want the bound %d", n, bound)
	}
	if _, err := c.Settle(ctx, open[0], crossing.Amount{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Reserve(ctx, id, "model", crossing.Amount{Requests: 1}, 0); err != nil {
		t.Fatalf("reservation after one settled: %v", err)
	}
}
