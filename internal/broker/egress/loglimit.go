package egress

import (
	"sync"
	"time"
)

// The broker's WARN and ERROR lines of crossings (every denial) go to
// the gateway's stderr: the run's log, or the daemon's (journald). A
// token bucket bounds them so an agent repeating a denied connection
// cannot flood the host's log; what it leaves out is counted in the next
// line. Receipts are not affected (the privileged side bounds those).
const (
	warnLogBurst     = 20
	warnLogPerSecond = 5
)

// logLimit is the token bucket of the broker's crossing warnings.
type logLimit struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int64
}

// admit takes a token: ok false when the line is to be left out, else
// the number of lines left out since the last one logged.
func (l *logLimit) admit(now time.Time) (dropped int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = warnLogBurst
	} else {
		l.tokens = min(warnLogBurst, l.tokens+now.Sub(l.last).Seconds()*warnLogPerSecond)
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
