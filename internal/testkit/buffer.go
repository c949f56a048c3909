package testkit

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that concurrent writers may share (a
// logger written by a broker's goroutines while the test reads it).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
