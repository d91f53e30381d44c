package presets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/paging"
	"github.com/agentledger/reconciler/resolver"
	"github.com/agentledger/reconciler/vendors"
)

// The preset tests share this harness: the vendor's profile loaded from
// its preset (as an operator's entry would), the real resolver on an
// in-memory ledger with a clock the test moves, and a pager that counts.
// Each test's fake vendor serves the real paths, status codes, headers
// and body shapes, and reads the same clock for its index lag.

const apiKey = "test-api-key-0001"

// clock is the test's time; fakes and the resolver read it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type pager struct {
	mu    sync.Mutex
	pages []paging.Page
}

func (p *pager) Trigger(_ context.Context, pg paging.Page) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pages = append(p.pages, pg)
	return nil
}

func (p *pager) Resolve(context.Context, string) error { return nil }

func (p *pager) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pages)
}

func (p *pager) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pages) == 0 {
		return ""
	}
	return p.pages[len(p.pages)-1].Summary
}

type env struct {
	t       *testing.T
	clock   *clock
	store   *memstore.Store
	pager   *pager
	res     *resolver.Resolver
	profile vendors.Profile
}

// newEnv loads the preset as an entry `{name, preset, api_key, api_base}`
// plus extra (more keys of the entry, indented four spaces).
func newEnv(t *testing.T, c *clock, preset, apiBase, extra string) *env {
	t.Helper()
	doc := fmt.Sprintf("vendors:\n  - name: %s\n    preset: %s\n    api_key: %s\n    api_base: %s\n%s", preset, preset, apiKey, apiBase, extra)
	ps, err := vendors.Parse("test.yaml", []byte(doc), vendors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, clock: c, pager: &pager{}, profile: ps[0]}
	e.store = memstore.New(ledger.DefaultPolicy())
	lk, err := resolver.NewProfiled(e.profile, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.res = resolver.New(e.store, resolver.Options{
		Lookups: map[string]resolver.Lookup{preset: lk}, Pager: e.pager, Now: e.clock.Now,
		Interval: time.Minute, VendorTimeout: 10 * time.Second,
	})
	return e
}

// claim inserts a row for the vendor as the API would (the profile's
// window and vendor key), with req as its stored envelope.
func (e *env) claim(intent string, req *ledger.Request) ledger.Row {
	e.t.Helper()
	class := ledger.ClassWriteIdempotent
	if !e.profile.Idempotency.Places() {
		class = ledger.ClassWriteLedger
	}
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-1", Tool: e.profile.Name + ".create", Vendor: e.profile.Name, ToolClass: class,
		Intent: json.RawMessage(intent), Request: req, ReplayWindow: e.profile.EffectiveWindow(),
		VendorKey: e.profile.VendorKey,
	}, ledger.DefaultPolicy(), e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.store.Claim(context.Background(), c)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Row
}

// timedOut reports that the runtime's call got no answer: the row is
// unknown, its lease over.
func (e *env) timedOut(row ledger.Row) {
	e.t.Helper()
	if _, _, err := e.store.Report(context.Background(), row.Tenant, row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, Attempt: row.Attempt, At: e.clock.Now()}); err != nil {
		e.t.Fatal(err)
	}
}

// newClock starts at a fixed instant (tests never assert absolute times:
// only durations from it).
func newClock() *clock { return &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)} }

// pass runs one resolver pass after the clock moved by d.
func (e *env) pass(d time.Duration) {
	e.t.Helper()
	e.clock.advance(d)
	if err := e.res.Pass(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) row(key string) ledger.Row {
	e.t.Helper()
	r, err := e.store.Get(context.Background(), "acme", key)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// send is the runtime's own call: the row's vendor key placed by
// client.Transport where the profile says, as an agent runtime would.
func (e *env) send(row ledger.Row, base string, req *ledger.Request) (int, []byte) {
	e.t.Helper()
	tr := &client.Transport{}
	switch e.profile.Idempotency.Kind() {
	case vendors.PlaceHeader:
		tr.Header = e.profile.Idempotency.Header
	case vendors.PlaceBody, vendors.PlaceClientID:
		tr.BodyField = e.profile.Idempotency.Where()
	}
	ctx := client.WithCallKey(context.Background(), client.CallKey{Key: row.Key, LocalID: row.MetadataLocalID, VendorKey: row.VendorKey})
	hr, err := http.NewRequestWithContext(ctx, req.Method, strings.TrimRight(base, "/")+req.Path, strings.NewReader(req.Body))
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", req.ContentType)
	if name, value := e.profile.AuthHeader(); name != "" {
		hr.Header.Set(name, value)
	}
	resp, err := (&http.Client{Transport: tr}).Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func wantStatus(t *testing.T, row ledger.Row, want ledger.Status) {
	t.Helper()
	if row.Status != want {
		t.Fatalf("row status %s, want %s (receipt %q, paged %v)", row.Status, want, row.UpstreamReceiptID, !row.PagedAt.IsZero())
	}
}
