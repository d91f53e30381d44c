package pollcache_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/pollcache"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

func TestAcquireGivesUpAsUnavailable(t *testing.T) {
	c := pollcache.New(new(int), pollcache.Options{What: "test cache"})
	unlock, err := c.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Acquire(ctx); !errors.Is(err, ledger.ErrUnavailable) || !errors.Is(err, context.Canceled) ||
		!strings.Contains(err.Error(), "test cache busy") {
		t.Fatalf("second Acquire: %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	unlock()
	unlock2, err := c.Acquire(t.Context())
	if err != nil {
		t.Fatalf("Acquire after unlock: %v", err)
	}
	unlock2()
}

func TestLoadStore(t *testing.T) {
	first, second := 1, 2
	c := pollcache.New(&first, pollcache.Options{})
	if got := c.Load(); got != &first {
		t.Fatalf("Load = %v, want the initial snapshot", *got)
	}
	c.Store(&second)
	if got := c.Load(); got != &second {
		t.Fatalf("Load = %v, want the stored snapshot", *got)
	}
}

// TestRunReloadsAndLogsFailures: Run reloads on every tick, each reload
// under a deadline; a failed one is logged and the next still runs; Run
// returns nil when its context ends.
func TestRunReloadsAndLogsFailures(t *testing.T) {
	var logs testkit.SyncBuffer
	c := pollcache.New(new(int), pollcache.Options{
		What: "test cache", Kept: "things", Interval: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a reload without a deadline")
			}
			if calls.Add(1) == 1 {
				return errors.New("store down")
			}
			return nil
		})
	}()
	testkit.Eventually(t, "a reload after the failed one", func() bool { return calls.Load() >= 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(logs.String(), "test cache: reload failed; keeping the last loaded things") {
		t.Fatalf("log %q has no line for the failed reload", logs.String())
	}
}
