package resolver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/resolver"
	"github.com/agentledger/reconciler/vendors"
)

// TestProfiledVendorDownDoesNotStallOthers: one profiled vendor hangs on
// every call, another answers. In one pass the answering vendor's row
// settles while the hung vendor's first call is cut by the profile's
// timeout and pauses it: its other row is not called at all.
func TestProfiledVendorDownDoesNotStallOthers(t *testing.T) {
	release := make(chan struct{})
	var hungCalls atomic.Int32
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hungCalls.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) })
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"items": []any{map[string]any{"id": "obj_1"}}})
	}))
	t.Cleanup(ok.Close)

	profile := func(name, base string) vendors.Profile {
		return vendors.Profile{Name: name, APIBase: base, Timeout: 300 * time.Millisecond, RateLimit: vendors.Rate{N: 100, Per: time.Second},
			Idempotency: vendors.Idempotency{None: true}, MaxKeyLen: 255,
			Lookup: &vendors.Lookup{Method: "GET", URL: "/items?ref={local_id}", ResultsPath: "items", FoundIDPath: "id"}}
	}
	clock := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(ledger.DefaultPolicy())
	lookups := map[string]resolver.Lookup{}
	for name, base := range map[string]string{"down": hung.URL, "up": ok.URL} {
		lk, err := resolver.NewProfiled(profile(name, base), nil)
		if err != nil {
			t.Fatal(err)
		}
		lookups[name] = lk
	}
	keys := map[string]string{}
	for i, vendor := range []string{"down", "up", "down", "up"} {
		c, err := ledger.NewClaim(ledger.ClaimRequest{Tenant: "acme", RunID: "run", Tool: vendor + ".create", Vendor: vendor,
			ToolClass: ledger.ClassWriteLedger, Intent: json.RawMessage(`{"n":` + string(rune('0'+i)) + `}`)}, ledger.DefaultPolicy(), clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Claim(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		keys[res.Row.Key] = vendor
		if _, _, err := store.Report(context.Background(), "acme", res.Row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, Attempt: 1, At: clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	res := resolver.New(store, resolver.Options{Lookups: lookups, Now: clock.Now, Interval: time.Minute, VendorTimeout: 5 * time.Second, Workers: 1})
	clock.Advance(2 * time.Minute)
	start := time.Now()
	if err := res.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the pass took %v: the hung vendor stalled it", d)
	}
	for key, vendor := range keys {
		row, _ := store.Get(context.Background(), "acme", key)
		if want := map[string]ledger.Status{"up": ledger.StatusSucceeded, "down": ledger.StatusUnknown}[vendor]; row.Status != want {
			t.Errorf("%s row: %s, want %s", vendor, row.Status, want)
		}
	}
	// The first timeout paused the vendor: its second row was not called.
	if got := hungCalls.Load(); got != 1 {
		t.Errorf("the hung vendor got %d calls in the pass, want 1 (then paused)", got)
	}
}
