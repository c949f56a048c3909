package loglimit

import (
	"testing"
	"time"
)

// A burst is admitted, then nothing until tokens refill; the first line
// admitted after a gap counts the lines left out.
func TestBucket(t *testing.T) {
	var b Bucket
	now := time.Unix(1000, 0)
	admitted := 0
	for range 100 {
		if _, ok := b.Admit(now); ok {
			admitted++
		}
	}
	if admitted != Burst {
		t.Fatalf("admitted %d of 100 at once, want %d", admitted, Burst)
	}
	dropped, ok := b.Admit(now.Add(time.Second))
	if !ok || dropped != 100-Burst {
		t.Fatalf("after a second: admit = %d, %v; want %d, true", dropped, ok, 100-Burst)
	}
	if dropped, ok := b.Admit(now.Add(time.Second)); !ok || dropped != 0 {
		t.Fatalf("next: admit = %d, %v; want 0, true (the count is reported once)", dropped, ok)
	}
}
