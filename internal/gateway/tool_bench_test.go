package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
)

// BenchmarkToolAuthority is the privileged side of one tool call, over the
// real socket protocol and store: Begin (replay check, policy, write-ahead
// record) and End (receipt, stored result) — two round trips, two commits.
func BenchmarkToolAuthority(b *testing.B) {
	t := &testing.T{}
	_, c, _ := policyServer(t)
	ctx := context.Background()
	args := json.RawMessage(`{"text":"hi"}`)
	result := json.RawMessage(`{"content":[{"type":"text","text":"hi"}]}`)
	b.ResetTimer()
	for i := range b.N {
		began, err := c.Begin(ctx, tool.Begin{Key: "k" + strconv.Itoa(i), Server: "fs", Tool: "read", Arguments: args})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.End(ctx, tool.End{Call: began.Call, Outcome: tool.OutcomeOK, Result: result, Receipt: crossing.Receipt{Action: "tools/call"}}); err != nil {
			b.Fatal(err)
		}
	}
}
