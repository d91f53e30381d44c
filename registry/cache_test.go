package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/registry"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func entry(tenant, name string) ledger.Tool {
	return ledger.Tool{
		Tenant: tenant, Name: name, Vendor: "stripe", Class: ledger.ClassWriteIdempotent, SideEffect: "charge",
		KeyPlacement: ledger.KeyPlacement{Header: "Idempotency-Key"}, UpdatedAt: t0,
	}
}

func newStore(t *testing.T) *memstore.Store {
	t.Helper()
	s := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// flakyStore fails ListTools on demand.
type flakyStore struct {
	*memstore.Store
	fail atomic.Bool
}

var errDown = errors.New("store down")

func (s *flakyStore) ListTools(ctx context.Context, tenant string) ([]ledger.Tool, error) {
	if s.fail.Load() {
		return nil, errDown
	}
	return s.Store.ListTools(ctx, tenant)
}

func TestPutDeleteLookup(t *testing.T) {
	c := registry.New(newStore(t), registry.Options{})
	if _, ok := c.Lookup("acme", "email.send"); ok {
		t.Fatal("a new cache knows a tool")
	}
	stored, changed, err := c.Put(t.Context(), entry("acme", "email.send"))
	if err != nil || !changed || stored.Version != 1 {
		t.Fatalf("Put: %+v changed=%v err=%v", stored, changed, err)
	}
	got, ok := c.Lookup("acme", "email.send")
	if !ok || got.Version != 1 {
		t.Fatalf("Lookup after Put: %+v %v", got, ok)
	}
	if _, ok := c.Lookup("globex", "email.send"); ok {
		t.Fatal("another tenant sees acme's tool")
	}
	if _, _, err := c.Put(t.Context(), ledger.Tool{Tenant: "acme", Name: "x", UpdatedAt: t0}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("Put of an invalid entry: %v", err)
	}
	if err := c.Delete(t.Context(), "acme", "email.send"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, ok := c.Lookup("acme", "email.send"); ok {
		t.Fatal("Lookup after Delete found the tool")
	}
	if err := c.Delete(t.Context(), "acme", "email.send"); !errors.Is(err, ledger.ErrToolNotFound) {
		t.Fatalf("second Delete: %v, want ErrToolNotFound", err)
	}
}

func TestLoadSeesOtherReplicasAndKeepsTheLastOnFailure(t *testing.T) {
	st := &flakyStore{Store: newStore(t)}
	a, b := registry.New(st, registry.Options{}), registry.New(st, registry.Options{})
	if _, _, err := a.Put(t.Context(), entry("acme", "email.send")); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup("acme", "email.send"); ok {
		t.Fatal("b knows the tool before loading")
	}
	if err := b.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup("acme", "email.send"); !ok {
		t.Fatal("b does not know the tool after loading")
	}
	st.fail.Store(true)
	if err := b.Load(t.Context()); !errors.Is(err, errDown) {
		t.Fatalf("Load of a failing store: %v", err)
	}
	if _, ok := b.Lookup("acme", "email.send"); !ok {
		t.Fatal("a failed reload forgot the registry")
	}
	// A delete through a that b did not see: b's own delete of it forgets it.
	st.fail.Store(false)
	if err := a.Delete(t.Context(), "acme", "email.send"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(t.Context(), "acme", "email.send"); !errors.Is(err, ledger.ErrToolNotFound) {
		t.Fatalf("b's Delete: %v", err)
	}
	if _, ok := b.Lookup("acme", "email.send"); ok {
		t.Fatal("b still knows a tool the store no longer holds")
	}
}

func TestRunReloads(t *testing.T) {
	st := newStore(t)
	a := registry.New(st, registry.Options{})
	b := registry.New(st, registry.Options{Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	if _, _, err := a.Put(t.Context(), entry("acme", "email.send")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := b.Lookup("acme", "email.send"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run never loaded the tool")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestBusyLockIsUnavailable(t *testing.T) {
	c := registry.New(newStore(t), registry.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := c.Put(ctx, entry("acme", "email.send")); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Put with a done context: %v, want ErrUnavailable", err)
	}
}
