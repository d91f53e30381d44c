package testkit

import (
	"bytes"
	"sync"
)

// SyncBuffer is an io.Writer that goroutines (request handlers, a program's
// loggers) and the test may share: every Write and String holds its lock.
// The zero SyncBuffer is empty and ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
