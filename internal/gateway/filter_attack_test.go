package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
)

// A tools/list filter asks policy once per tool. A legitimate gateway
// sends it once, with at most tool.DefaultMaxTools tools per configured
// server; a compromised one sent ~8000 per message (72 ms of the root
// side's CPU each) for one token of the crossing rate. Now a filter
// longer than the configured servers can offer is refused, and a filter
// costs one token per tool.DefaultMaxTools tools. Observed on the root
// side: the oversized filter is refused; the burst of 4 tokens serves
// two filters of two full servers and refuses the third (positive
// control: each of the first two is answered in full).
func TestToolFilterIsBounded(t *testing.T) {
	srv, c, _ := policyServer(t) // two servers: fs and other
	srv.Crossings = CrossingLimits{Rate: 0.001, Burst: 4}
	if err := srv.initReceipts(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	refs := func(n int) []tool.Ref {
		out := make([]tool.Ref, n)
		for i := range out {
			out[i] = tool.Ref{Server: "fs", Tool: "read"}
		}
		return out
	}
	bound := 2 * tool.DefaultMaxTools
	if _, err := c.Filter(ctx, refs(bound+1)); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("filter of %d tools = %v, want ErrPolicyDenied", bound+1, err)
	}
	for i := 0; i < 2; i++ {
		ok, err := c.Filter(ctx, refs(bound))
		if err != nil || len(ok) != bound || !ok[0] {
			t.Fatalf("filter %d of %d tools = %d answers, %v", i, bound, len(ok), err)
		}
	}
	if _, err := c.Filter(ctx, refs(bound)); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("third filter past the burst = %v, want ErrBudgetExceeded", err)
	}
}
