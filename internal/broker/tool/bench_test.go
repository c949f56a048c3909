package tool

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP layers alone: the same upstream called directly (in memory)
// and through the broker (streamable HTTP front door, SDK server, schema
// check, canonical form, result guard) with an in-memory authority. The
// privileged side's cost is BenchmarkToolAuthority in internal/gateway.

func BenchmarkUpstreamDirect(b *testing.B) {
	t := &testing.T{}
	cs := upstream(t, &atomic.Int64{})
	p := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}
	b.ResetTimer()
	for range b.N {
		if _, err := cs.CallTool(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBrokerMCPLayers(b *testing.B) {
	t := &testing.T{}
	f := newFixture(t)
	p := &mcp.CallToolParams{Name: "up__echo", Arguments: map[string]any{"text": "hi"}}
	b.ResetTimer()
	for range b.N {
		res, err := f.cs.CallTool(context.Background(), p)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}
