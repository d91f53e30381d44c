package testkit

import (
	"sync"
	"time"
)

// Clock is an injected clock (its Now is what packages take as
// Now func() time.Time) that moves only when the test moves it, or, made by
// NewRealClock, the real time plus what the test added.
type Clock struct {
	mu sync.Mutex
	// real: now is an offset from time.Now, not an instant.
	real   bool
	now    time.Time
	offset time.Duration
}

// NewClock returns a clock that stands at start until Advance or Set.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// NewRealClock returns a clock that follows the real time, moved forward by
// every Advance: for code that also waits in real time (long polls, HTTP
// timeouts) while the test skips a lease.
func NewRealClock() *Clock { return &Clock{real: true} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real {
		return time.Now().Add(c.offset)
	}
	return c.now
}

// Advance moves the clock forward by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real {
		c.offset += d
		return time.Now().Add(c.offset)
	}
	c.now = c.now.Add(d)
	return c.now
}

// Set moves the clock to t (a real clock keeps running from there).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real {
		c.offset = time.Until(t)
		return
	}
	c.now = t
}
