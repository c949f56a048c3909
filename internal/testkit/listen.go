package testkit

import (
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/fixture"
)

// CountingListener is a host listener that accepts, counts and closes
// every connection: an escape test's witness of what reached the host
// (its count, read from outside the sandbox or the broker under test).
type CountingListener = fixture.Counter

// NewCountingListener listens on network/addr ("tcp", "127.0.0.1:0";
// "unix", a path) until the test ends.
func NewCountingListener(t testing.TB, network, addr string) *CountingListener {
	t.Helper()
	c, err := fixture.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
