package loglimit

import (
	"sync"
	"time"
)

// Burst lines are admitted at once, then PerSecond.
const (
	Burst     = 20
	PerSecond = 5
)

// Bucket is a token bucket of log lines; the zero value is full.
type Bucket struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int64
}

// Admit takes a token: ok false when the line is to be left out, else
// the number of lines left out since the last one admitted.
func (l *Bucket) Admit(now time.Time) (dropped int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = Burst
	} else {
		l.tokens = min(Burst, l.tokens+now.Sub(l.last).Seconds()*PerSecond)
	}
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return 0, false
	}
	l.tokens--
	dropped, l.dropped = l.dropped, 0
	return dropped, true
}
