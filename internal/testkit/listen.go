package testkit

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// CountingListener is a host listener that accepts, counts and closes
// every connection: an escape test's witness of what reached the host
// (its count, read from outside the sandbox or the broker under test).
type CountingListener struct {
	Ln       net.Listener
	accepted atomic.Int64
}

// NewCountingListener listens on network/addr ("tcp", "127.0.0.1:0";
// "unix", a path) until the test ends.
func NewCountingListener(t testing.TB, network, addr string) *CountingListener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &CountingListener{Ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.accepted.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

// Port is the listener's TCP port, as text.
func (c *CountingListener) Port() string {
	_, p, _ := net.SplitHostPort(c.Ln.Addr().String())
	return p
}

// Settle waits until n connections were accepted (or 2 s), then a little
// longer for any straggler, and returns how many were.
func (c *CountingListener) Settle(n int64) int64 {
	for deadline := time.Now().Add(2 * time.Second); c.accepted.Load() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	return c.accepted.Load()
}
