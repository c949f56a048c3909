package testkit

import (
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/fixture"
)

// The fake upstreams live in package fixture (the conformance suite runs
// them outside tests); these are the tests' names for them, closed when
// the test ends.
type (
	ModelUpstream = fixture.ModelUpstream
	SeenRequest   = fixture.SeenRequest
	Target        = fixture.Target
)

// NewModelUpstream starts a fixture.ModelUpstream that accepts key and
// answers answer; it is closed when t ends.
func NewModelUpstream(t testing.TB, key, answer string) *ModelUpstream {
	f := fixture.NewModelUpstream(key, answer)
	t.Cleanup(f.Close)
	return f
}

// NewTarget starts a fixture.Target answering body; it is closed when t
// ends.
func NewTarget(t testing.TB, body string) *Target {
	g := fixture.NewTarget(body)
	t.Cleanup(g.Close)
	return g
}

// The upstreams' answer writers, for tests' own handlers.
var (
	WriteJSON           = fixture.WriteJSON
	SSE                 = fixture.SSE
	AnthropicStream     = fixture.AnthropicStream
	ResponsesTextStream = fixture.ResponsesTextStream
	ResponsesCallStream = fixture.ResponsesCallStream
)
