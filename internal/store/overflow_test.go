package store

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

// A window's settled usage saturates at maxUsage: settlements of
// MaxAmount added to a usage near the cap leave it at the cap, never
// past int64 (where SQLite turns the sum into a REAL the budget can no
// longer read, failing every crossing of the workload). Observed in the
// store: the budget still reads, and the limit still refuses. Control:
// a settlement below the cap adds exactly.
func TestSettledUsageSaturates(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	id := crossing.Identity{Workload: "w", SandboxID: "sb"}
	bud := Budget{Limits: crossing.Amount{OutputTokens: 100}}
	settle := func(used crossing.Amount) {
		t.Helper()
		r, _, err := s.Reserve(ctx, id, "model", crossing.Amount{}, 0, bud)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(ctx, r, used, bud); err != nil {
			t.Fatal(err)
		}
	}
	settle(crossing.Amount{Bytes: 7})
	if _, err := s.db.ExecContext(ctx, `UPDATE budget_usage SET output_tokens = ?, bytes = bytes + ? WHERE workload = ?`, int64(maxUsage-1), int64(maxUsage-10), id.Workload); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		settle(crossing.Amount{OutputTokens: MaxAmount, Bytes: MaxAmount})
	}
	st, err := s.BudgetState(ctx, id.Workload, bud)
	if err != nil {
		t.Fatalf("the budget no longer reads: %v", err)
	}
	if st.Used.OutputTokens != maxUsage || st.Used.Bytes != maxUsage {
		t.Fatalf("used %+v, want both saturated at %d", st.Used, int64(maxUsage))
	}
	if _, _, err := s.Reserve(ctx, id, "model", crossing.Amount{OutputTokens: 1}, 0, bud); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("reserve past the limit = %v, want ErrBudgetExceeded", err)
	}
	if _, _, err := s.Reserve(ctx, id, "model", crossing.Amount{OutputTokens: MaxAmount + 1}, 0, bud); err == nil {
		t.Fatal("a reservation over MaxAmount succeeded")
	}
}
