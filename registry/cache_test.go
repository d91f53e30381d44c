package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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

func checked(t ledger.Tool) ledger.Tool {
	t.Checklist = ledger.Checklist{
		SideEffectDocumented: true, KeyBornInRuntime: true, LedgerOrUniqueField: true,
		TimeoutLeavesUnknown: true, ErrorClassesMapped: true, DuplicateDeliveryTest: true, CheckedBy: "alice",
	}
	return t
}

func TestDecide(t *testing.T) {
	c := registry.New(newStore(t), registry.Options{})
	put := func(tl ledger.Tool) ledger.Tool {
		t.Helper()
		stored, _, err := c.Put(t.Context(), tl)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		return stored
	}
	capped := checked(entry("acme", "stripe.charge"))
	capped.Policy = `intent.amount <= 50000 && intent.currency == "usd"`
	capped = put(capped)
	open := entry("acme", "email.send")
	open.Policy = `false`
	open = put(open)
	plain := put(checked(entry("acme", "stripe.refund")))

	tests := []struct {
		name       string
		tool       ledger.Tool
		intent     string
		want       ledger.Autonomy
		wantReason string
	}{
		{"the policy holds", capped, `{"amount": 1050, "currency": "usd"}`, ledger.AutonomyAutonomous, ""},
		{"the policy is false", capped, `{"amount": 90000, "currency": "usd"}`, ledger.AutonomyApproval, `policy: intent.amount <= 50000 && intent.currency == "usd"`},
		{"the policy cannot be evaluated", capped, `{"currency": "usd"}`, ledger.AutonomyApproval, "policy could not be evaluated (fail closed): evaluate policy: no such key: amount"},
		{"an open checklist wins before the policy runs", open, `{}`, ledger.AutonomyApproval, "checklist not complete: side_effect_documented, key_born_in_runtime, ledger_or_unique_field, timeout_leaves_unknown, error_classes_mapped, duplicate_delivery_test"},
		{"no policy", plain, `{"amount": 1}`, ledger.AutonomyAutonomous, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := c.Decide(t.Context(), tt.tool, "run_1", json.RawMessage(tt.intent))
			if got != tt.want || reason != tt.wantReason {
				t.Fatalf("Decide: got %s %q, want %s %q", got, reason, tt.want, tt.wantReason)
			}
		})
	}
	t.Run("an entry the cache has not loaded is compiled on the spot", func(t *testing.T) {
		other := capped
		other.Version, other.Policy = 99, `intent.amount < 10`
		if got, _ := c.Decide(t.Context(), other, "run_1", json.RawMessage(`{"amount": 50}`)); got != ledger.AutonomyApproval {
			t.Fatalf("Decide with another version's policy: %s, want approval", got)
		}
	})
	t.Run("a stored policy that does not compile fails closed", func(t *testing.T) {
		st := newStore(t)
		bad := checked(entry("acme", "stripe.charge"))
		bad.Policy = `intent.amount <`
		stored, _, err := st.PutTool(t.Context(), bad) // as another build might have
		if err != nil {
			t.Fatal(err)
		}
		c := registry.New(st, registry.Options{})
		if err := c.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		got, reason := c.Decide(t.Context(), stored, "run_1", json.RawMessage(`{"amount": 1}`))
		if got != ledger.AutonomyApproval || !strings.HasPrefix(reason, "policy does not compile (fail closed): invalid policy:") {
			t.Fatalf("Decide: %s %q", got, reason)
		}
	})
}

func TestPutRefusesAPolicyThatDoesNotCompile(t *testing.T) {
	st := newStore(t)
	c := registry.New(st, registry.Options{})
	bad := entry("acme", "stripe.charge")
	bad.Policy = "intent.amount <= 50000 &&\n  intent.curency == \"usd\" ||"
	_, _, err := c.Put(t.Context(), bad)
	if !errors.Is(err, ledger.ErrInvalidPolicy) || !strings.Contains(err.Error(), "line 2, column") {
		t.Fatalf("Put: %v, want ErrInvalidPolicy naming line 2", err)
	}
	if got, _ := st.ListTools(t.Context(), ""); len(got) != 0 {
		t.Fatalf("the store holds %d tools after a refused put", len(got))
	}
}
