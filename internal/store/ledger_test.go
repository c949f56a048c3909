package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

var ledgerID = crossing.Identity{Workload: "demo", Tenant: "acme", Purpose: "coding", SandboxID: "s1"}

// Concurrent reservations from two handles on one store never overspend.
func TestReserveNeverOverspends(t *testing.T) {
	dir := t.TempDir()
	a, b := openTest(t, dir, testPool), openTest(t, dir, testPool)
	bud := Budget{Limits: crossing.Amount{Requests: 10}}
	var ok, denied atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			_, _, err := s.Reserve(context.Background(), ledgerID, "model", crossing.Amount{Requests: 1}, 0, bud)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, crossing.ErrBudgetExceeded):
				denied.Add(1)
			default:
				t.Errorf("Reserve = %v", err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 10 || denied.Load() != 54 {
		t.Fatalf("reservations allowed %d denied %d, want 10 and 54", ok.Load(), denied.Load())
	}
}

func TestSettleCountsRealUsage(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	bud := Budget{Limits: crossing.Amount{OutputTokens: 100}, Streams: 1}
	r, st, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{Requests: 1, OutputTokens: 80}, 1, bud)
	if err != nil || st.Used.OutputTokens != 80 || st.Streams != 1 {
		t.Fatalf("Reserve = %+v, %v", st, err)
	}
	// A second stream is refused while the first is held.
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{Requests: 1, OutputTokens: 1}, 1, bud); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("second stream = %v, want ErrBudgetExceeded", err)
	}
	st, err = s.Settle(ctx, r, crossing.Amount{Requests: 1, OutputTokens: 30}, bud)
	if err != nil || st.Used.OutputTokens != 30 || st.Streams != 0 {
		t.Fatalf("Settle = %+v, %v, want 30 used, 0 streams", st, err)
	}
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{OutputTokens: 71}, 0, bud); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("Reserve over = %v, want ErrBudgetExceeded", err)
	}
	if _, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{OutputTokens: 70}, 0, bud); err != nil {
		t.Fatalf("Reserve up to the limit = %v", err)
	}
	// Another workload's budget is separate.
	other := ledgerID
	other.Workload = "other"
	if _, _, err := s.Reserve(ctx, other, "model", crossing.Amount{OutputTokens: 100}, 0, bud); err != nil {
		t.Fatalf("other workload = %v", err)
	}
	if err := s.DropReservations(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
}

func TestBudgetWindow(t *testing.T) {
	b := Budget{Window: time.Hour}
	t0 := time.Unix(7200+10, 0)
	if b.windowStart(t0) != 7200 || b.windowStart(t0.Add(time.Hour)) != 10800 || (Budget{}).windowStart(t0) != 0 {
		t.Fatalf("windowStart = %d, %d", b.windowStart(t0), b.windowStart(t0.Add(time.Hour)))
	}
}

func TestReceiptsRoundTrip(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	for i, d := range []string{crossing.Allow, crossing.Deny, crossing.Allow} {
		rc := crossing.Receipt{Time: time.Unix(int64(i), 0), Identity: ledgerID, Broker: "egress", Action: "connect", Target: "api.github.com:443", Decision: d, Reason: "r"}
		if _, err := s.RecordReceipt(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Receipts(ctx, ReceiptFilter{Workload: "demo", Limit: 2})
	if err != nil || len(got) != 2 || got[0].Decision != crossing.Deny || got[1].ID <= got[0].ID || got[1].Target != "api.github.com:443" {
		t.Fatalf("Receipts = %+v, %v", got, err)
	}
}
