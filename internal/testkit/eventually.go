package testkit

import (
	"testing"
	"time"
)

// DefaultTimeout bounds Eventually: a guard that keeps a broken component
// from hanging the test, not a timing assertion.
const DefaultTimeout = 10 * time.Second

// pollInterval is how often cond is asked again: short against the
// timeouts, long enough to leave the CPU to what is being waited for.
const pollInterval = 2 * time.Millisecond

// Eventually polls cond until it holds, and fails tb (Fatal) naming what
// when DefaultTimeout passes first.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, DefaultTimeout, what, cond)
}

// EventuallyWithin is Eventually with its own timeout.
func EventuallyWithin(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}
