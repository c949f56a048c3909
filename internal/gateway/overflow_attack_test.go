package gateway

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// Budgets are sums of int64 in the store. A compromised gateway that
// reserved, or settled, an amount near math.MaxInt64 made the sums wrap:
// the check used+want > limit overflowed negative and let every later
// crossing of the workload through (its other sandboxes' too), or SQLite
// refused the sum and every crossing of the workload failed. Observed in
// the store: the huge reservation and settlement are refused, and the
// workload's limit still holds for another sandbox (positive control:
// it reserves up to the limit and no further).
func TestHugeAmountsCannotWrapTheBudget(t *testing.T) {
	st := testStore(t)
	bud := store.Budget{Limits: crossing.Amount{OutputTokens: 100}}
	mine := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-huge"}
	srv := &Authority{Store: st, ID: mine, Budget: bud}
	c := connect(t, srv)
	ctx := modelAsk(context.Background())
	huge := crossing.Amount{Requests: math.MaxInt64 - 1, OutputTokens: math.MaxInt64 - 1}
	if _, _, err := c.Reserve(ctx, mine, "model", huge, 0); err == nil {
		t.Fatal("a reservation of math.MaxInt64-1 succeeded")
	}
	r, _, err := c.Reserve(ctx, mine, "model", crossing.Amount{OutputTokens: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Settle(ctx, r, huge); err == nil {
		t.Fatal("a settlement of math.MaxInt64-1 succeeded")
	}
	if _, err := c.Settle(ctx, r, crossing.Amount{OutputTokens: 1}); err != nil {
		t.Fatalf("the honest settlement after the refused one: %v", err)
	}
	other := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-other"}
	if _, _, err := st.Reserve(ctx, other, "model", crossing.Amount{OutputTokens: 99}, 0, bud); err != nil {
		t.Fatalf("another sandbox of the workload, within the limit: %v", err)
	}
	if _, _, err := st.Reserve(ctx, other, "model", crossing.Amount{OutputTokens: 1}, 0, bud); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("another sandbox past the limit = %v, want ErrBudgetExceeded", err)
	}
}
