package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// A sandbox hammering state reads reaches its receipt bound: the store
// then holds at most the bound plus the marker for it, further reads are
// refused with ErrBudgetExceeded, the refusals are recorded once at stop,
// and another sandbox on the same store is unaffected.
func TestReceiptBudgetBoundsStateReads(t *testing.T) {
	st := testStore(t)
	ctx := context.Background()
	const bound = 40
	srvA, a := stateClient(t, st, idA, testState)
	srvA.Crossings = CrossingLimits{MaxReceipts: bound}
	if err := srvA.initReceipts(ctx); err != nil {
		t.Fatal(err)
	}
	srvB, b := stateClient(t, st, idB, testState)
	srvB.Crossings = CrossingLimits{MaxReceipts: bound}
	if err := srvB.initReceipts(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.State(ctx, state.Request{Op: state.OpPut, Key: "notes/a", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	allowed, refused := 0, 0
	for i := 0; i < 200; i++ {
		_, err := a.State(ctx, state.Request{Op: state.OpGet, Key: "notes/a"})
		switch {
		case err == nil:
			allowed++
		case errors.Is(err, crossing.ErrBudgetExceeded):
			refused++
		default:
			t.Fatalf("get %d = %v", i, err)
		}
	}
	// The put and 39 reads filled the bound.
	if allowed != bound-1 || refused != 200-allowed {
		t.Fatalf("allowed %d refused %d, want %d and %d", allowed, refused, bound-1, 200-(bound-1))
	}
	count := func(id crossing.Identity) []crossing.Receipt {
		rcs, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
		if err != nil {
			t.Fatal(err)
		}
		return rcs
	}
	rcs := count(idA)
	if len(rcs) != bound+1 || !strings.HasPrefix(rcs[bound].Reason, ReasonReceiptBudgetExhausted) {
		t.Fatalf("sandbox A has %d receipts (last %+v), want the bound %d and the marker", len(rcs), rcs[len(rcs)-1], bound)
	}
	// Positive control: the other sandbox still reads, and its reads are
	// receipted.
	if _, err := b.State(ctx, state.Request{Op: state.OpList}); err != nil {
		t.Fatalf("sandbox B list = %v, want it allowed", err)
	}
	if n := len(count(idB)); n != 1 {
		t.Fatalf("sandbox B has %d receipts, want 1", n)
	}
	// At stop, one receipt records the refusals.
	srvA.finishReceipts(ctx)
	rcs = count(idA)
	if len(rcs) != bound+2 || !strings.Contains(rcs[bound+1].Reason, "161 crossings were refused") {
		t.Fatalf("after stop: %d receipts, last %q; want the refusal count (161)", len(rcs), rcs[len(rcs)-1].Reason)
	}
	// A restarted gateway of the same sandbox counts what it has.
	if err := srvA.initReceipts(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.State(ctx, state.Request{Op: state.OpGet, Key: "notes/a"}); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("get after restart = %v, want ErrBudgetExceeded", err)
	}
}

// The crossing rate refuses a burst past its bound before any store work.
func TestCrossingRate(t *testing.T) {
	st := testStore(t)
	ctx := context.Background()
	srv, c := stateClient(t, st, idA, testState)
	srv.Crossings = CrossingLimits{Rate: 0.001, Burst: 5}
	if err := srv.initReceipts(ctx); err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for i := 0; i < 20; i++ {
		if _, err := c.State(ctx, state.Request{Op: state.OpList}); err == nil {
			allowed++
		} else if !errors.Is(err, crossing.ErrBudgetExceeded) || !strings.Contains(err.Error(), "crossing rate") {
			t.Fatalf("list %d = %v", i, err)
		}
	}
	if allowed != 5 {
		t.Fatalf("allowed %d, want the burst of 5", allowed)
	}
	if rcs, _ := st.Receipts(ctx, store.ReceiptFilter{SandboxID: idA.SandboxID}); len(rcs) != 5 {
		t.Fatalf("%d receipts, want 5: a refusal by rate writes none here", len(rcs))
	}
}
