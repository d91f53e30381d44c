package freeze_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/freeze"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const (
	tool  = "stripe.create_payment_intent"
	idem  = ledger.ClassWriteIdempotent
	irrev = ledger.ClassWriteIrreversible
)

func fz(tenant, target string) ledger.Freeze {
	return ledger.Freeze{Tenant: tenant, Target: target, Actor: "ops", Note: "vendor incident", At: t0}
}

func newStore(t *testing.T) *memstore.Store {
	t.Helper()
	s := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustPut(t *testing.T, c *freeze.Cache, f ledger.Freeze) {
	t.Helper()
	if err := c.Put(t.Context(), f); err != nil {
		t.Fatalf("Put(%s/%s): %v", f.Tenant, f.Target, err)
	}
}

func mustLoad(t *testing.T, c *freeze.Cache) []ledger.Freeze {
	t.Helper()
	fs, err := c.Load(t.Context())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return fs
}

func TestFrozen(t *testing.T) {
	type probe struct {
		tenant, tool string
		class        ledger.ToolClass
		want         bool
	}
	tests := []struct {
		name    string
		freezes []ledger.Freeze
		probes  []probe
	}{
		{name: "nothing frozen", probes: []probe{{"acme", tool, idem, false}}},
		{name: "a tool", freezes: []ledger.Freeze{fz("acme", tool)}, probes: []probe{
			{"acme", tool, idem, true},
			{"acme", tool, irrev, true},
			{"acme", "stripe.refunds.create", idem, false},
			{"globex", tool, idem, false},
		}},
		{name: "a class", freezes: []ledger.Freeze{fz("acme", string(irrev))}, probes: []probe{
			{"acme", "email.send", irrev, true},
			{"acme", tool, irrev, true},
			{"acme", tool, idem, false},
			{"globex", "email.send", irrev, false},
		}},
		{name: "a tool named like another tenant's", freezes: []ledger.Freeze{fz("acme-eu", tool)}, probes: []probe{
			{"acme", tool, idem, false},
			{"acme-eu", tool, idem, true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := freeze.New(newStore(t), freeze.Options{})
			for _, f := range tc.freezes {
				mustPut(t, c, f)
			}
			for _, p := range tc.probes {
				if got := c.Frozen(p.tenant, p.tool, p.class); got != p.want {
					t.Errorf("Frozen(%s, %s, %s): got %v, want %v", p.tenant, p.tool, p.class, got, p.want)
				}
			}
		})
	}
}

func TestPutAndDeleteTakeEffectAtOnce(t *testing.T) {
	c := freeze.New(newStore(t), freeze.Options{})
	mustPut(t, c, fz("acme", tool))
	if !c.Frozen("acme", tool, idem) {
		t.Fatal("not frozen right after Put")
	}
	again := fz("acme", tool)
	again.Note, again.Actor = "still broken", "bob"
	mustPut(t, c, again)
	if got := c.Snapshot(); len(got) != 1 || got[0].Actor != "bob" {
		t.Fatalf("Snapshot after a second Put: %+v, want one entry by bob", got)
	}
	if err := c.Delete(t.Context(), "acme", tool); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if c.Frozen("acme", tool, idem) || len(c.Snapshot()) != 0 {
		t.Fatal("still frozen right after Delete")
	}
	if err := c.Delete(t.Context(), "acme", tool); err != nil {
		t.Fatalf("Delete again: %v", err)
	}
}

// TestTwoCachesOneStore is two replicas sharing a store: a change through
// one is seen by the other after its refresh, not before.
func TestTwoCachesOneStore(t *testing.T) {
	st := newStore(t)
	a, b := freeze.New(st, freeze.Options{}), freeze.New(st, freeze.Options{})
	mustLoad(t, a)
	mustLoad(t, b)
	mustPut(t, a, fz("acme", string(irrev)))
	if b.Frozen("acme", "email.send", irrev) {
		t.Fatal("b sees a's freeze before refreshing: it is not reading memory")
	}
	if got := mustLoad(t, b); len(got) != 1 || got[0].Target != string(irrev) {
		t.Fatalf("b.Load: got %+v", got)
	}
	if !b.Frozen("acme", "email.send", irrev) {
		t.Fatal("b does not see a's freeze after refreshing")
	}
	if err := b.Delete(t.Context(), "acme", string(irrev)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if !a.Frozen("acme", "email.send", irrev) {
		t.Fatal("a thawed before refreshing")
	}
	mustLoad(t, a)
	if a.Frozen("acme", "email.send", irrev) {
		t.Fatal("a still frozen after b's delete and a refresh")
	}
}

func TestRunRefreshes(t *testing.T) {
	st := newStore(t)
	a := freeze.New(st, freeze.Options{})
	b := freeze.New(st, freeze.Options{Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	mustPut(t, a, fz("acme", tool))
	testkit.Eventually(t, "b sees the freeze", func() bool { return b.Frozen("acme", tool, idem) })
	if err := a.Delete(t.Context(), "acme", tool); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	testkit.Eventually(t, "b sees the unfreeze", func() bool { return !b.Frozen("acme", tool, idem) })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// flakyStore fails on demand and can hold ListFreezes after it has read.
type flakyStore struct {
	*memstore.Store
	fail atomic.Bool
	// hold, when set, is waited on by ListFreezes after reading; read is
	// closed once it has read.
	hold chan struct{}
	read chan struct{}
}

var errDown = errors.Join(ledger.ErrUnavailable, errors.New("connection refused"))

func (s *flakyStore) ListFreezes(ctx context.Context) ([]ledger.Freeze, error) {
	if s.fail.Load() {
		return nil, errDown
	}
	fs, err := s.Store.ListFreezes(ctx)
	if s.hold != nil {
		close(s.read)
		<-s.hold
	}
	return fs, err
}

func (s *flakyStore) PutFreeze(ctx context.Context, f ledger.Freeze) error {
	if s.fail.Load() {
		return errDown
	}
	return s.Store.PutFreeze(ctx, f)
}

func (s *flakyStore) DeleteFreeze(ctx context.Context, tenant, target string) error {
	if s.fail.Load() {
		return errDown
	}
	return s.Store.DeleteFreeze(ctx, tenant, target)
}

func TestStoreFailures(t *testing.T) {
	st := &flakyStore{Store: newStore(t)}
	c := freeze.New(st, freeze.Options{})
	mustPut(t, c, fz("acme", tool))
	st.fail.Store(true)
	if _, err := c.Load(t.Context()); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Load with the store down: got %v, want ErrUnavailable", err)
	}
	if !c.Frozen("acme", tool, idem) {
		t.Fatal("a failed reload thawed the kill switch")
	}
	if err := c.Put(t.Context(), fz("acme", "email.send")); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Put with the store down: got %v", err)
	}
	if c.Frozen("acme", "email.send", irrev) {
		t.Fatal("a Put the store refused froze the tool in memory")
	}
	if err := c.Delete(t.Context(), "acme", tool); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Delete with the store down: got %v", err)
	}
	if !c.Frozen("acme", tool, idem) {
		t.Fatal("a Delete the store refused thawed the tool in memory")
	}
	st.fail.Store(false)
	bad := fz("acme", "a/b")
	if err := c.Put(t.Context(), bad); !errors.Is(err, ledger.ErrInvalidFreeze) {
		t.Fatalf("Put of a bad target: got %v, want ErrInvalidFreeze", err)
	}
}

// TestReloadNeverUndoesALocalChange holds a reload after it read the store
// and freezes a tool meanwhile: the reload's older view must not replace
// the freeze once it finishes.
func TestReloadNeverUndoesALocalChange(t *testing.T) {
	st := &flakyStore{Store: newStore(t), hold: make(chan struct{}), read: make(chan struct{})}
	c := freeze.New(st, freeze.Options{})
	loaded := make(chan error, 1)
	go func() {
		_, err := c.Load(t.Context())
		loaded <- err
	}()
	<-st.read // the reload has read the store: no freeze yet
	put := make(chan error, 1)
	go func() { put <- c.Put(t.Context(), fz("acme", tool)) }()
	// A correct Put waits for the reload, so this wait always runs out; it
	// only gives a Put that does not wait the time to finish first, which
	// is the interleaving that would lose the freeze.
	var putErr error
	putDone := false
	select {
	case putErr = <-put:
		putDone = true
	case <-time.After(20 * time.Millisecond):
	}
	close(st.hold)
	if err := <-loaded; err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !putDone {
		putErr = <-put
	}
	if putErr != nil {
		t.Fatalf("Put: %v", putErr)
	}
	if !c.Frozen("acme", tool, idem) {
		t.Fatal("a reload that read before the Put undid it")
	}
}

// TestConcurrentUse runs readers against changes and reloads (for -race).
func TestConcurrentUse(t *testing.T) {
	c := freeze.New(newStore(t), freeze.Options{})
	ctx := t.Context()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					c.Frozen("acme", tool, idem)
					_ = c.Snapshot()
				}
			}
		})
	}
	for i := range 50 {
		if i%2 == 0 {
			mustPut(t, c, fz("acme", tool))
		} else if err := c.Delete(ctx, "acme", tool); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		mustLoad(t, c)
	}
	close(stop)
	wg.Wait()
	if c.Frozen("acme", tool, idem) {
		t.Fatal("frozen after an even number of changes ending in a delete")
	}
}

// TestHungReloadDoesNotHoldFreezes: while a reload is stuck in the store
// (a half-open connection), a freeze whose request deadline passes fails
// fast with ErrUnavailable (503) instead of hanging past its deadline; once
// the reload returns, freezes work again.
func TestHungReloadDoesNotHoldFreezes(t *testing.T) {
	st := &flakyStore{Store: newStore(t), hold: make(chan struct{}), read: make(chan struct{})}
	c := freeze.New(st, freeze.Options{})
	loaded := make(chan error, 1)
	go func() { _, err := c.Load(context.Background()); loaded <- err }()
	<-st.read // the reload holds the lock, stuck in the store
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Put(ctx, fz("acme", tool))
	if !errors.Is(err, ledger.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put during a hung reload: %v, want ErrUnavailable and the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Put waited %s past its 100 ms deadline", d)
	}
	close(st.hold)
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	st.hold = nil
	mustPut(t, c, fz("acme", tool))
	if !c.Frozen("acme", tool, idem) {
		t.Fatal("freeze after the reload returned: not frozen")
	}
}
