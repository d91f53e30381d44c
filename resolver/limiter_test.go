package resolver

import (
	"context"
	"testing"
	"time"
)

// TestLimiterHoldsTheRateInTheFirstSecond: a fresh limiter of 20/s lets at
// most 21 calls through in its first second (a burst of one), not 40.
func TestLimiterHoldsTheRateInTheFirstSecond(t *testing.T) {
	lim := newLimiter(20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n := 0
	for lim.Wait(ctx) == nil {
		n++
	}
	if n > 21 {
		t.Fatalf("%d calls in the first second at 20/s", n)
	}
	if n == 0 {
		t.Fatal("no call in the first second")
	}
}
