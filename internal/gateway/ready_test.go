package gateway

import (
	"testing"
	"time"
)

// The sandbox starts only once every broker process serves: Ready closes
// when each of ReadyWant channels has reported ready, not at the first,
// and a channel reporting twice counts once.
func TestReadyWaitsForEveryBroker(t *testing.T) {
	ready := make(chan struct{})
	srv := &Authority{Ready: ready, ReadyWant: len(Brokers)}
	c := connect(t, srv)
	closed := func() bool {
		select {
		case <-ready:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}
	for i, b := range Brokers {
		if err := c.ch[b].Ready(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// The same broker again: still one.
			if err := c.ch[b].Ready(); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := closed(), i == len(Brokers)-1; got != want {
			t.Errorf("after %d of %d brokers reported ready: Ready closed = %v, want %v", i+1, len(Brokers), got, want)
		}
	}
}
