package testkit_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t.Run("stands until moved", func(t *testing.T) {
		c := testkit.NewClock(t0)
		if got := c.Now(); !got.Equal(t0) {
			t.Fatalf("Now = %v, want %v", got, t0)
		}
		if got, want := c.Advance(time.Minute), t0.Add(time.Minute); !got.Equal(want) || !c.Now().Equal(want) {
			t.Errorf("Advance = %v, Now = %v; want %v", got, c.Now(), want)
		}
		c.Set(t0)
		if got := c.Now(); !got.Equal(t0) {
			t.Errorf("after Set: %v, want %v", got, t0)
		}
	})
	t.Run("real time plus advances", func(t *testing.T) {
		c := testkit.NewRealClock()
		before := time.Now()
		c.Advance(time.Hour)
		got := c.Now()
		if got.Before(before.Add(time.Hour)) || got.After(time.Now().Add(time.Hour)) {
			t.Errorf("Now = %v, want about %v", got, before.Add(time.Hour))
		}
		c.Set(t0)
		if d := c.Now().Sub(t0); d < 0 || d > time.Minute {
			t.Errorf("after Set: %v from %v, want a moment after it", d, t0)
		}
	})
}

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventually(t *testing.T) {
	t.Run("returns once cond holds", func(t *testing.T) {
		n := 0
		testkit.Eventually(t, "three polls", func() bool { n++; return n == 3 })
		if n != 3 {
			t.Errorf("polled %d times, want 3", n)
		}
	})
	t.Run("fails naming what it waited for", func(t *testing.T) {
		tb := &fatalTB{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			testkit.EventuallyWithin(tb, 20*time.Millisecond, "the impossible", func() bool { return false })
		}()
		<-done
		if !strings.Contains(tb.msg, "the impossible") || !strings.Contains(tb.msg, "20ms") {
			t.Errorf("failure %q does not name what and the timeout", tb.msg)
		}
	})
}

func TestSyncBuffer(t *testing.T) {
	var b testkit.SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Errorf("len = %d, want 800", got)
	}
}
