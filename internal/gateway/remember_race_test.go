package gateway

import (
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// An egress tunnel's byte chunks are reserved with no decision
// (remember(id, nil)) in the batch goroutine while an approved crossing is
// remembered in its own goroutine (reserveApproved) and chargeLost reads
// the map: every access to decided must hold s.mu, or the Go runtime ends
// the trusted-side process with "concurrent map writes". (A merge of two
// branches once left the nil case deleting without the lock.)
func TestRememberConcurrentWithoutDecision(t *testing.T) {
	s := &Authority{}
	d := &crossing.PolicyDecision{}
	var wg sync.WaitGroup
	stop := time.Now().Add(300 * time.Millisecond)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); time.Now().Before(stop); i++ {
				id := int64(g)<<32 | i&0xffff
				if g%2 == 0 {
					s.remember(id, nil, crossing.BudgetState{}) // a byte chunk
				} else {
					s.remember(id, d, crossing.BudgetState{}) // an approved crossing
					s.forget(id)
				}
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	n := len(s.decided)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d decisions left after every reservation was forgotten", n)
	}
}
