package resolver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/paging"
	"github.com/agentledger/reconciler/resolver"
)

const (
	tenant    = "acme"
	searchLag = 5 * time.Minute
	interval  = 30 * time.Second
)

var policy = ledger.Policy{PendingTTL: 15 * time.Minute, Grace: time.Minute}

// env is one resolver wired to fakes and a real store, on an injected clock.
type env struct {
	t      *testing.T
	clock  *testkit.Clock // the resolver's, the ledger calls' and the fakes'
	store  ledger.Store
	stripe *fakestripe.Stripe
	paypal *fakePayPal
	pd     *fakePD
	reg    *prometheus.Registry
	res    *resolver.Resolver
	pager  *paging.PagerDuty
	n      atomic.Int64
}

type envOpt func(*resolver.Options, *env)

func newEnv(t *testing.T, useBolt bool, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, clock: testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), reg: prometheus.NewRegistry()}
	if useBolt {
		st, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{Policy: policy})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		e.store = st
	} else {
		e.store = memstore.New(policy)
	}
	e.stripe = fakestripe.New(t, fakestripe.Options{APIKey: "sk_test_fake", Now: e.clock.Now, SearchLag: time.Minute})
	e.paypal = newFakePayPal(t)
	e.pd = newFakePD(t)
	sl, err := resolver.NewStripe(resolver.StripeOptions{
		// No test makes the resolver's Stripe calls hang: a roomy timeout
		// keeps a loaded machine from failing a lookup meant to succeed.
		APIBase: e.stripe.URL(), APIKey: "sk_test_fake", CallTimeout: 3 * time.Second,
		SearchRate: 1000, APIRate: 1000, Now: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := resolver.NewPayPal(resolver.PayPalOptions{
		APIBase: e.paypal.srv.URL, ClientID: "client", ClientSecret: "secret",
		CallTimeout: 300 * time.Millisecond, Rate: 1000, Now: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.pager, err = paging.NewPagerDuty(paging.PagerDutyOptions{
		URL: e.pd.srv.URL, RoutingKey: "rk_test",
		Retry: paging.Retry{Base: time.Millisecond, Max: 2 * time.Millisecond, AttemptTimeout: time.Second, MaxElapsed: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := resolver.Options{
		Lookups:  map[string]resolver.Lookup{"stripe": sl, "paypal": pl},
		Pager:    e.pager,
		Interval: interval, SearchLag: searchLag, VendorTimeout: 5 * time.Second, PageTimeout: 300 * time.Millisecond,
		Now: e.clock.Now, Registerer: e.reg,
	}
	for _, fn := range opts {
		fn(&o, e)
	}
	e.res = resolver.New(e.store, o)
	return e
}

// claim inserts a pending row the way the API would, with the request the
// runtime is about to send (body built around the row's local id).
func (e *env) claim(vendor, path string, window time.Duration, body func(localID string) string) ledger.Row {
	e.t.Helper()
	i := e.n.Add(1)
	tool := vendor + "." + strings.Trim(strings.ReplaceAll(path, "/", "."), ".")
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: "run1", Tool: tool, ToolCallID: fmt.Sprintf("call_%d", i), Vendor: vendor,
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
		ReplayWindow: window,
	}, policy, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		ct := "application/x-www-form-urlencoded"
		if vendor == "paypal" {
			ct = "application/json"
		}
		c.Row.Request = &ledger.Request{Method: "POST", Path: path, ContentType: ct, Body: body(c.Row.MetadataLocalID)}
	}
	res, err := e.store.Claim(context.Background(), c)
	if err != nil || res.Decision != ledger.DecisionProceed {
		e.t.Fatalf("claim: %v %v", res.Decision, err)
	}
	return res.Row
}

func piBody(localID string) string {
	return "amount=1000&currency=usd&confirm=true&metadata[metadata_local_id]=" + localID
}

// report records the runtime's outcome of its attempt.
func (e *env) report(row ledger.Row, o ledger.Outcome) ledger.Row {
	e.t.Helper()
	o.At = e.clock.Now()
	r, _, err := e.store.Report(context.Background(), row.Tenant, row.Key, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) get(row ledger.Row) ledger.Row {
	e.t.Helper()
	r, err := e.store.Get(context.Background(), row.Tenant, row.Key)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) pass() {
	e.t.Helper()
	within(e.t, 30*time.Second, func(ctx context.Context) {
		if err := e.res.Pass(ctx); err != nil {
			e.t.Fatal(err)
		}
	})
}

// runtimeCall is the agent runtime's own vendor call, cut short by its
// client timeout when the fake hangs.
func (e *env) runtimeCall(row ledger.Row) error {
	req, _ := http.NewRequest(row.Request.Method, e.stripe.URL()+row.Request.Path, strings.NewReader(row.Request.Body))
	req.Header.Set("Authorization", "Bearer sk_test_fake")
	req.Header.Set("Content-Type", row.Request.ContentType)
	req.Header.Set("Idempotency-Key", row.Key)
	resp, err := (&http.Client{Timeout: 200 * time.Millisecond}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func TestCommittedThenTimeoutIsFoundNotCreatedTwice(t *testing.T) {
	e := newEnv(t, false)
	e.stripe.Inject(fakestripe.FaultHang)
	e.stripe.SetSearchLag(3 * time.Minute)
	row := e.claim("stripe", "/v1/payment_intents", 24*time.Hour, piBody)
	if err := e.runtimeCall(row); err == nil {
		t.Fatal("the runtime's call should have timed out")
	}
	row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	if got := e.stripe.ObjectCount(); got != 1 {
		t.Fatalf("vendor objects = %d, want 1 (committed)", got)
	}

	// Two minutes on: the row is due (grace 1 min) but Search does not show
	// the object yet and search_lag has not passed: not absence, no replay.
	e.clock.Advance(2 * time.Minute)
	e.pass()
	if got := e.get(row); got.Status != ledger.StatusUnknown {
		t.Fatalf("status = %s, want unknown", got.Status)
	}
	if n := e.stripe.Count("POST"); n != 1 {
		t.Fatalf("POSTs = %d, want 1 (the runtime's only)", n)
	}
	if n := e.stripe.Count("GET /v1/payment_intents/search"); n != 1 {
		t.Fatalf("searches = %d, want 1", n)
	}

	// After search_lag the object is visible: found, succeeded, never created twice.
	for range 4 {
		e.clock.Advance(2 * time.Minute)
		e.pass()
	}
	got := e.get(row)
	if got.Status != ledger.StatusSucceeded || got.UpstreamReceiptID == "" || got.Resolution.Source != ledger.SourceResolver {
		t.Fatalf("row = %s receipt %q resolution %+v, want succeeded by the resolver", got.Status, got.UpstreamReceiptID, got.Resolution)
	}
	if n := e.stripe.ObjectCount(); n != 1 {
		t.Errorf("vendor objects = %d, want 1", n)
	}
	if n := e.stripe.Count("POST"); n != 1 {
		t.Errorf("POSTs = %d, want 1", n)
	}
	if v := counter(t, e.reg, "reconciler_resolver_actions_total", "stripe", "found"); v != 1 {
		t.Errorf("found actions = %v, want 1", v)
	}
}

func TestAbsentInsideWindowReplaysOnceWithSameKey(t *testing.T) {
	e := newEnv(t, false)
	row := e.claim("stripe", "/v1/payment_intents", 24*time.Hour, piBody)
	row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeNetworkError}) // never reached Stripe
	e.clock.Advance(searchLag + time.Minute)
	for range 5 {
		e.pass()
		e.clock.Advance(10 * time.Minute)
	}
	keys := e.stripe.Keys()
	if len(keys) != 1 || keys[0] != row.Key {
		t.Fatalf("POST idempotency keys = %q, want exactly [%s]", keys, row.Key)
	}
	if n := e.stripe.ObjectCount(); n != 1 {
		t.Errorf("vendor objects = %d, want 1", n)
	}
	got := e.get(row)
	if got.Status != ledger.StatusSucceeded || !strings.HasPrefix(got.UpstreamReceiptID, "pi_") {
		t.Errorf("row = %s %q, want succeeded with the replay's receipt", got.Status, got.UpstreamReceiptID)
	}
	for _, a := range []string{"absent", "replayed"} {
		if v := counter(t, e.reg, "reconciler_resolver_actions_total", "stripe", a); v != 1 {
			t.Errorf("%s actions = %v, want 1", a, v)
		}
	}
}

func TestNoReplayAfterStored5xx(t *testing.T) {
	e := newEnv(t, false)
	e.stripe.Inject(fakestripe.Fault500)
	row := e.claim("stripe", "/v1/payment_intents", time.Hour, piBody)
	if err := e.runtimeCall(row); err != nil {
		t.Fatal(err)
	}
	row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 500})
	e.clock.Advance(searchLag + time.Minute)
	e.pass()
	if n := e.stripe.Count("POST"); n != 1 {
		t.Fatalf("POSTs = %d, want 1: a stored 500 must not be replayed", n)
	}
	if got := e.get(row); got.Status != ledger.StatusUnknown || !got.PagedAt.IsZero() {
		t.Fatalf("row = %s paged %v, want unknown, not paged while the window is open", got.Status, got.PagedAt)
	}
	e.clock.Advance(time.Hour)
	e.pass()
	if n := len(e.pd.got("trigger")); n != 1 {
		t.Fatalf("triggers = %d, want 1 once the window closed", n)
	}
}

// A replay of the resolver's own answered with a 5xx is recorded on the row,
// so no later pass — in this process or another replica's — replays it.
func TestResolverReplay5xxIsRecordedOnTheRow(t *testing.T) {
	e := newEnv(t, false)
	row := e.claim("stripe", "/v1/payment_intents", 2*time.Hour, piBody)
	row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.stripe.Inject(fakestripe.Fault500)
	e.clock.Advance(searchLag + time.Minute)
	e.pass()
	if n := e.stripe.Count("POST"); n != 1 {
		t.Fatalf("POSTs = %d, want the one replay", n)
	}
	if got := e.get(row); got.LastHTTPStatus != 500 || got.Status != ledger.StatusUnknown {
		t.Fatalf("row after a replay answered 500: status %s last_http_status %d, want unknown and 500", got.Status, got.LastHTTPStatus)
	}
	for range 3 {
		e.clock.Advance(10 * time.Minute)
		e.pass()
	}
	if n := e.stripe.Count("POST"); n != 1 {
		t.Fatalf("POSTs = %d, want 1: a stored 500 must not be replayed again", n)
	}
}

func TestWindowClosedPagesOnceAndResolvesAfterLateSuccess(t *testing.T) {
	e := newEnv(t, true)
	row := e.claim("stripe", "/v1/payment_intents", 30*time.Minute, piBody)
	row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.clock.Advance(time.Hour)
	for range 6 {
		e.pass()
		e.clock.Advance(2 * time.Hour)
	}
	triggers := e.pd.got("trigger")
	if len(triggers) != 1 {
		t.Fatalf("triggers = %d, want exactly 1 over 6 passes", len(triggers))
	}
	if dk := triggers[0]["dedup_key"]; dk != "recon:"+row.Tenant+":"+row.Key {
		t.Errorf("dedup_key = %v, want recon:%s", dk, row.Key)
	}
	details := triggers[0]["payload"].(map[string]any)["custom_details"].(map[string]any)
	if details["tenant"] != tenant || details["key"] != row.Key || details["run_id"] != "run1" {
		t.Errorf("custom_details = %v", details)
	}
	if n := e.stripe.Count("POST"); n != 0 {
		t.Errorf("POSTs = %d, want 0: the window closed, nothing is replayed", n)
	}
	paged := e.get(row)
	if paged.PagedAt.IsZero() || paged.Status != ledger.StatusUnknown {
		t.Fatalf("row = %s paged_at %v", paged.Status, paged.PagedAt)
	}
	events := outbox(t, e.store)
	if n := countEvents(events, row.Key, ledger.EventEscalated); n != 1 {
		t.Fatalf("escalated outbox records = %d, want 1", n)
	}

	// A late webhook settles the row; its event carries PagedAt, and the
	// page resolver sends PagerDuty's resolve for the same dedup key.
	res, err := e.store.Ingest(context.Background(), ledger.Delivery{
		Tenant: tenant, Vendor: "stripe", EventID: "evt_late", LocalID: row.MetadataLocalID,
		Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_late", At: e.clock.Now()},
		At:       e.clock.Now(),
	})
	if err != nil || res.Outcome != ledger.IngestAccepted {
		t.Fatalf("ingest: %v %v", res.Outcome, err)
	}
	pr := resolver.NewPageResolver(e.pager, nil)
	var settled []ledger.Event
	for _, rec := range outbox(t, e.store) {
		if rec.Key == row.Key {
			settled = append(settled, rec)
		}
	}
	for range 2 { // a redelivered message is resolved again, harmlessly
		for _, ev := range settled {
			if err := pr.HandleEvent(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	resolves := e.pd.got("resolve")
	if len(resolves) != 2 {
		t.Fatalf("resolves = %d, want 2 (one per delivery of the succeeded event)", len(resolves))
	}
	for _, r := range resolves {
		if r["dedup_key"] != "recon:"+row.Tenant+":"+row.Key || r["routing_key"] != "rk_test" {
			t.Errorf("resolve = %v", r)
		}
	}
}

func TestPageResolverIgnoresUnpagedAndReportsFailure(t *testing.T) {
	e := newEnv(t, false)
	pr := resolver.NewPageResolver(e.pager, nil)
	at := e.clock.Now()
	for _, tc := range []struct {
		name    string
		ev      ledger.Event
		fail    int
		wantErr bool
		want    int
	}{
		{"not paged", ledger.Event{Key: "k1", Status: "succeeded"}, 0, false, 0},
		{"escalated itself", ledger.Event{Key: "k2", Status: ledger.EventEscalated, PagedAt: at}, 0, false, 0},
		{"paged and failed", ledger.Event{Key: "k3", Status: "failed_poison", PagedAt: at}, 0, false, 1},
		{"pagerduty down: error for redelivery", ledger.Event{Key: "k4", Status: "succeeded", PagedAt: at}, 503, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.pd.mu.Lock()
			e.pd.events, e.pd.fail = nil, tc.fail
			e.pd.mu.Unlock()
			err := pr.HandleEvent(context.Background(), tc.ev)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got := e.pd.got("resolve"); len(got) < tc.want || (tc.want == 0 && len(got) != 0) {
				t.Fatalf("resolves = %d, want %d", len(got), tc.want)
			}
		})
	}
}

func Test429StormBacksOff(t *testing.T) {
	e := newEnv(t, false)
	e.stripe.FailAll(429)
	const rows, passes = 40, 10
	for range rows {
		r := e.claim("stripe", "/v1/payment_intents", 24*time.Hour, piBody)
		e.report(r, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	}
	e.clock.Advance(searchLag + time.Minute)
	for range passes {
		e.pass()
		e.clock.Advance(interval)
	}
	got := len(e.stripe.Requests())
	// Without backoff every pass would send one search per row: 400. The
	// vendor pause stops a pass after the workers' first answers, and rows
	// are pushed past the pause.
	if limit := passes * resolver.DefaultWorkers; got > limit {
		t.Errorf("requests in a 429 storm = %d, want at most %d (of %d without backoff)", got, limit, rows*passes)
	}
	if got == 0 {
		t.Error("no requests at all")
	}
	if v := counter(t, e.reg, "reconciler_resolver_actions_total", "stripe", "error"); v == 0 {
		t.Error("no error actions counted")
	}
	// The storm ends: every row resolves (replayed, nothing was there).
	e.stripe.FailAll(0)
	for range 20 {
		e.clock.Advance(10 * time.Minute)
		e.pass()
	}
	due, err := e.store.Due(context.Background(), e.clock.Now().Add(100*time.Hour), 1000)
	if err != nil || len(due) != 0 {
		t.Fatalf("open rows after the storm = %d (%v), want 0", len(due), err)
	}
	if n := e.stripe.ObjectCount(); n != rows {
		t.Errorf("vendor objects = %d, want %d (one per row)", n, rows)
	}
}

// A row awaiting approval holds its request, but no call was granted: the
// ledger refuses a runtime's report on it (a call it was told not to
// make), and no resolver pass replays it — that is the call a human has to
// allow. (ledger's TestRetryAllowed covers a row stored unknown at attempt
// 0 by an older version.)
func TestUngrantedRowIsNeverReplayed(t *testing.T) {
	e := newEnv(t, false)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: "run1", Tool: "stripe.v1.payment_intents", ToolCallID: "call_gated", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(`{"n":1}`), ReplayWindow: 24 * time.Hour,
		Gate: ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "policy: false", ApprovalTTL: 24 * time.Hour, RequestedBy: "tok_fp"},
	}, policy, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	c.Row.Request = &ledger.Request{Method: "POST", Path: "/v1/payment_intents", ContentType: "application/x-www-form-urlencoded", Body: piBody(c.Row.MetadataLocalID)}
	res, err := e.store.Claim(context.Background(), c)
	if err != nil || res.Decision != ledger.DecisionAwaitApproval {
		t.Fatalf("claim: %v %v", res.Decision, err)
	}
	row := res.Row
	if _, _, err := e.store.Report(context.Background(), row.Tenant, row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: e.clock.Now()}); !errors.Is(err, ledger.ErrInvalidTransition) {
		t.Fatalf("report on an awaiting row: %v, want ErrInvalidTransition", err)
	}
	for range 6 {
		e.clock.Advance(searchLag + time.Hour)
		e.pass()
	}
	if n := e.stripe.Count("POST"); n != 0 {
		t.Fatalf("vendor POSTs = %d, want 0: the resolver replayed a call nobody granted", n)
	}
	if got := e.get(row); got.Status != ledger.StatusPending || got.Attempt != 0 {
		t.Fatalf("row = %s attempt %d, want pending at attempt 0 (awaiting its approval)", got.Status, got.Attempt)
	}
}

func TestOneVendorDownDoesNotStopTheOthers(t *testing.T) {
	e := newEnv(t, false)
	e.paypal.mu.Lock()
	e.paypal.hang = true
	e.paypal.mu.Unlock()
	var pp []ledger.Row
	for range 20 {
		r := e.claim("paypal", "/v2/checkout/orders", 6*time.Hour, func(id string) string {
			return `{"intent":"CAPTURE","purchase_units":[{"custom_id":"` + id + `","amount":{"currency_code":"USD","value":"10.00"}}]}`
		})
		pp = append(pp, e.report(r, ledger.Outcome{Kind: ledger.OutcomeTimeout}))
	}
	s := e.claim("stripe", "/v1/payment_intents", 24*time.Hour, piBody)
	s = e.report(s, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.clock.Advance(searchLag + time.Minute)
	e.pass()
	if got := e.get(s); got.Status != ledger.StatusSucceeded {
		t.Fatalf("stripe row = %s, want succeeded in the same pass as the PayPal outage", got.Status)
	}
	for _, r := range pp {
		got := e.get(r)
		if got.Status != ledger.StatusUnknown || !got.NextCheckAt.After(e.clock.Now()) {
			t.Fatalf("paypal row = %s next %v, want unknown and rescheduled", got.Status, got.NextCheckAt)
		}
	}
}

func TestPayPalReplayWithSameRequestID(t *testing.T) {
	e := newEnv(t, false)
	var rows []ledger.Row
	for range 3 {
		r := e.claim("paypal", "/v2/checkout/orders", 6*time.Hour, func(id string) string {
			return `{"intent":"CAPTURE","purchase_units":[{"custom_id":"` + id + `"}]}`
		})
		rows = append(rows, e.report(r, ledger.Outcome{Kind: ledger.OutcomeTimeout}))
	}
	// PayPal has no search: no lag to wait, only the attempt's lease.
	e.clock.Advance(2 * time.Minute)
	for range 3 {
		e.pass()
		e.clock.Advance(time.Hour)
	}
	for _, r := range rows {
		got := e.get(r)
		if got.Status != ledger.StatusSucceeded || !strings.HasPrefix(got.UpstreamReceiptID, "ORDER") {
			t.Errorf("row = %s %q, want succeeded with an order id", got.Status, got.UpstreamReceiptID)
		}
	}
	if n := e.paypal.orderCount(); n != 3 {
		t.Errorf("orders = %d, want 3", n)
	}
	e.paypal.mu.Lock()
	tokens := e.paypal.tokens
	e.paypal.mu.Unlock()
	if tokens != 1 {
		t.Errorf("oauth tokens fetched = %d, want 1 (cached)", tokens)
	}
}

func TestPayPalWindowClosedPages(t *testing.T) {
	e := newEnv(t, false)
	r := e.claim("paypal", "/v2/checkout/orders", 6*time.Hour, func(id string) string { return `{}` })
	e.report(r, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.clock.Advance(7 * time.Hour)
	e.pass()
	e.clock.Advance(2 * time.Hour)
	e.pass()
	if n := len(e.pd.got("trigger")); n != 1 {
		t.Fatalf("triggers = %d, want 1", n)
	}
	if n := e.paypal.orderCount(); n != 0 {
		t.Errorf("orders = %d, want 0: no replay outside the window", n)
	}
}

func TestReceiptKnownRetrievesUntilSettled(t *testing.T) {
	e := newEnv(t, false)
	e.stripe.Put(map[string]any{"id": "pi_known", "object": "payment_intent", "status": "processing", "amount": 1000, "currency": "usd"}, e.clock.Now())
	row := e.claim("stripe", "/v1/payment_intents", 24*time.Hour, piBody)
	row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout, ReceiptID: "pi_known"})
	e.clock.Advance(2 * time.Minute)
	e.pass()
	if got := e.get(row); got.Status != ledger.StatusUnknown {
		t.Fatalf("status = %s, want unknown while processing", got.Status)
	}
	e.stripe.SetStatus("pi_known", "succeeded")
	for range 3 {
		e.clock.Advance(time.Hour)
		e.pass()
	}
	if got := e.get(row); got.Status != ledger.StatusSucceeded {
		t.Fatalf("status = %s, want succeeded", got.Status)
	}
	if n := e.stripe.Count("GET /v1/payment_intents/search"); n != 0 {
		t.Errorf("searches = %d, want 0 when the receipt is known", n)
	}
	if n := e.stripe.Count("GET /v1/payment_intents/pi_known"); n < 2 {
		t.Errorf("retrieves = %d, want >= 2", n)
	}
}

func TestFindDecides(t *testing.T) {
	for _, tc := range []struct {
		name  string
		path  string
		body  func(id string) string
		setup func(e *env, localID string)
		want  ledger.Status
		gets  string
	}{
		{
			name: "refund by listing the parent",
			path: "/v1/refunds",
			body: func(id string) string { return "payment_intent=pi_parent&metadata[metadata_local_id]=" + id },
			setup: func(e *env, id string) {
				e.stripe.Put(map[string]any{"id": "re_other", "object": "refund", "status": "succeeded", "payment_intent": "pi_parent", "metadata": map[string]any{}}, e.clock.Now())
				e.stripe.Put(map[string]any{"id": "re_1", "object": "refund", "status": "succeeded", "payment_intent": "pi_parent", "metadata": map[string]any{"metadata_local_id": id}}, e.clock.Now())
			},
			want: ledger.StatusSucceeded, gets: "GET /v1/refunds",
		},
		{
			name: "events when search is unavailable",
			path: "/v1/payment_intents",
			body: piBody,
			setup: func(e *env, id string) {
				e.stripe.SetSearchUnavailable(true)
				obj := map[string]any{"id": "pi_ev", "object": "payment_intent", "status": "requires_payment_method",
					"last_payment_error": map[string]any{"code": "card_declined"}, "metadata": map[string]any{"metadata_local_id": id}}
				e.stripe.Put(obj, e.clock.Now())
				e.stripe.AddEvent(map[string]any{"id": "evt_1", "type": "payment_intent.payment_failed", "data": map[string]any{"object": obj}})
			},
			want: ledger.StatusFailedPoison, gets: "GET /v1/events",
		},
		{
			name: "customer search",
			path: "/v1/customers",
			body: func(id string) string { return "email=a@example.com&metadata[metadata_local_id]=" + id },
			setup: func(e *env, id string) {
				e.stripe.Put(map[string]any{"id": "cus_1", "object": "customer", "metadata": map[string]any{"metadata_local_id": id}}, e.clock.Now().Add(-time.Hour))
			},
			want: ledger.StatusSucceeded, gets: "GET /v1/customers/search",
		},
		{
			name: "canceled payment intent",
			path: "/v1/payment_intents",
			body: piBody,
			setup: func(e *env, id string) {
				e.stripe.Put(map[string]any{"id": "pi_c", "object": "payment_intent", "status": "canceled", "metadata": map[string]any{"metadata_local_id": id}}, e.clock.Now().Add(-time.Hour))
			},
			want: ledger.StatusFailedPoison, gets: "GET /v1/payment_intents/search",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, false)
			row := e.claim("stripe", tc.path, 24*time.Hour, tc.body)
			row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
			tc.setup(e, row.MetadataLocalID)
			e.clock.Advance(2 * time.Minute)
			e.pass()
			if got := e.get(row); got.Status != tc.want {
				t.Fatalf("status = %s, want %s", got.Status, tc.want)
			}
			if n := e.stripe.Count(tc.gets); n == 0 {
				t.Errorf("no %s request", tc.gets)
			}
			if n := e.stripe.Count("POST"); n != 0 {
				t.Errorf("POSTs = %d, want 0", n)
			}
		})
	}
}

func TestAmountMismatchPages(t *testing.T) {
	e := newEnv(t, false)
	i := e.n.Add(1)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: "run1", Tool: "stripe.pi", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), ReplayWindow: 24 * time.Hour,
		Expect:  &ledger.Expect{Amount: 1000, Currency: "usd"},
		Request: &ledger.Request{Method: "POST", Path: "/v1/payment_intents", ContentType: "application/x-www-form-urlencoded", Body: "amount=1000"},
	}, policy, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.store.Claim(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	row := e.report(res.Row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.stripe.Put(map[string]any{"id": "pi_m", "object": "payment_intent", "status": "succeeded", "amount": 9999, "currency": "usd",
		"metadata": map[string]any{"metadata_local_id": row.MetadataLocalID}}, e.clock.Now().Add(-time.Hour))
	e.clock.Advance(2 * time.Minute)
	e.pass()
	got := e.get(row)
	if got.Status != ledger.StatusUnknown || got.PagedAt.IsZero() {
		t.Fatalf("row = %s paged %v, want unknown and paged on a mismatch", got.Status, got.PagedAt)
	}
	if n := len(e.pd.got("trigger")); n != 1 {
		t.Errorf("triggers = %d, want 1", n)
	}
}

func TestPagerDownLeavesRowUnpaged(t *testing.T) {
	e := newEnv(t, false)
	e.pd.mu.Lock()
	e.pd.fail = 500
	e.pd.mu.Unlock()
	row := e.claim("stripe", "/v1/payment_intents", 10*time.Minute, piBody)
	e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.clock.Advance(time.Hour)
	e.pass()
	if got := e.get(row); !got.PagedAt.IsZero() {
		t.Fatal("row marked paged although the page was not delivered")
	}
	e.pd.mu.Lock()
	e.pd.fail = 0
	e.pd.mu.Unlock()
	e.clock.Advance(time.Hour)
	e.pass()
	e.clock.Advance(3 * time.Hour)
	e.pass()
	if got := e.get(row); got.PagedAt.IsZero() {
		t.Fatal("row not paged after the pager came back")
	}
	if n := countEvents(outbox(t, e.store), row.Key, ledger.EventEscalated); n != 1 {
		t.Errorf("escalated records = %d, want 1", n)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	e := newEnv(t, false, func(o *resolver.Options, _ *env) { o.Interval = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.res.Run(ctx) }()
	testkit.Eventually(t, "two resolver cycles", func() bool { return histCount(t, e.reg, "reconciler_resolver_cycle_seconds") >= 2 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// outbox returns the pending outbox events.
func outbox(t *testing.T, st ledger.Store) []ledger.Event {
	t.Helper()
	recs, err := st.PendingEvents(context.Background(), 10000)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]ledger.Event, len(recs))
	for i, r := range recs {
		evs[i] = r.Event
	}
	return evs
}

func countEvents(evs []ledger.Event, key, status string) int {
	n := 0
	for _, e := range evs {
		if e.Key == key && e.Status == status {
			n++
		}
	}
	return n
}

// counter reads reconciler_resolver_actions_total{vendor, action} (or
// another counter with those two labels) from the registry.
func counter(t *testing.T, reg *prometheus.Registry, name, vendor, action string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if got["vendor"] == vendor && got["action"] == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func histCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// settlingStore settles the row by a webhook just before Escalate: the
// race where a row settles between the due snapshot and the page.
type settlingStore struct {
	ledger.Store
	clock *testkit.Clock
}

func (s settlingStore) Escalate(ctx context.Context, tenant, key string, at time.Time) (ledger.Row, bool, error) {
	row, err := s.Get(ctx, tenant, key)
	if err != nil {
		return ledger.Row{}, false, err
	}
	if _, err := s.Ingest(ctx, ledger.Delivery{
		Tenant: tenant, Vendor: "stripe", EventID: "evt_race", LocalID: row.MetadataLocalID,
		Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_race", At: s.clock.Now()},
		At:       s.clock.Now(),
	}); err != nil {
		return ledger.Row{}, false, err
	}
	return s.Store.Escalate(ctx, tenant, key, at)
}

func TestPageForRowSettledMeanwhileIsResolved(t *testing.T) {
	e := newEnv(t, false)
	e.res = resolver.New(settlingStore{Store: e.store, clock: e.clock}, resolver.Options{
		Lookups: map[string]resolver.Lookup{}, Pager: e.pager, Now: e.clock.Now, SearchLag: searchLag,
	})
	row := e.claim("resend", "/emails", 0, nil)
	e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.clock.Advance(time.Hour)
	e.pass()
	if got := e.get(row); got.Status != ledger.StatusSucceeded || !got.PagedAt.IsZero() {
		t.Fatalf("row = %s paged %v", got.Status, got.PagedAt)
	}
	trig, res := e.pd.got("trigger"), e.pd.got("resolve")
	if len(trig) != 1 || len(res) != 1 || res[0]["dedup_key"] != trig[0]["dedup_key"] {
		t.Fatalf("triggers %v, resolves %v: want the stray page resolved", trig, res)
	}
}

func TestNoLookupPagesAfterLeaseAndWindow(t *testing.T) {
	e := newEnv(t, false)
	row := e.claim("resend", "/emails", 0, nil) // no lookup for resend; never reported
	e.clock.Advance(5 * time.Minute)            // due (grace 1 min) but the lease (15 min) holds
	e.pass()
	if n := len(e.pd.got("trigger")); n != 0 {
		t.Fatalf("paged under the attempt's lease")
	}
	e.clock.Advance(time.Hour)
	e.pass()
	if got := e.get(row); got.PagedAt.IsZero() || len(e.pd.got("trigger")) != 1 {
		t.Fatalf("row not paged once after the lease: %v, triggers %d", got.PagedAt, len(e.pd.got("trigger")))
	}
}

// TestFrozenRowIsNotReplayed: the kill switch stops the resolver's replays
// (a replay is a write), effective at once; a thaw lets the next pass
// replay; and a row frozen until its window closes is paged, not replayed.
func TestFrozenRowIsNotReplayed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		thaw      bool
		wantPOSTs int
		wantPages int
	}{
		{name: "frozen through the window: paged, never replayed", wantPOSTs: 0, wantPages: 1},
		{name: "thawed inside the window: replayed once", thaw: true, wantPOSTs: 1, wantPages: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var frozen atomic.Bool
			frozen.Store(true)
			e := newEnv(t, false, func(o *resolver.Options, _ *env) {
				o.Frozen = func(tenant, tool string, class ledger.ToolClass) bool {
					return frozen.Load() && class == ledger.ClassWriteIdempotent
				}
			})
			row := e.claim("stripe", "/v1/payment_intents", 2*time.Hour, piBody)
			e.report(row, ledger.Outcome{Kind: ledger.OutcomeNetworkError})
			e.clock.Advance(searchLag + time.Minute)
			for range 3 {
				e.pass()
				e.clock.Advance(10 * time.Minute)
			}
			if n := len(e.stripe.Keys()); n != 0 {
				t.Fatalf("%d replays while frozen", n)
			}
			if tc.thaw {
				frozen.Store(false)
			}
			for range 20 {
				e.pass()
				e.clock.Advance(10 * time.Minute)
			}
			if n := len(e.stripe.Keys()); n != tc.wantPOSTs {
				t.Fatalf("replays: %d, want %d", n, tc.wantPOSTs)
			}
			if n := len(e.pd.got("trigger")); n != tc.wantPages {
				t.Fatalf("pages: %d, want %d", n, tc.wantPages)
			}
		})
	}
}

// TestStuckRowIsPagedOnce: a row the lookup can never decide — Stripe
// refuses every call (a restricted key), or the object stays in
// requires_action — is paged once its replay window has been closed for
// MaxBackoff (1 h by default), and only once; before that it is not.
func TestStuckRowIsPagedOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(e *env) ledger.Row
	}{
		{"every call refused", func(e *env) ledger.Row {
			row := e.claim("stripe", "/v1/payment_intents", 2*time.Hour, piBody)
			row = e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
			e.stripe.FailAll(http.StatusForbidden)
			return row
		}},
		{"object never settles", func(e *env) ledger.Row {
			e.stripe.Put(map[string]any{"id": "pi_stuck", "object": "payment_intent", "status": "requires_action", "amount": 1000, "currency": "usd"}, e.clock.Now())
			row := e.claim("stripe", "/v1/payment_intents", 2*time.Hour, piBody)
			return e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout, ReceiptID: "pi_stuck"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, false)
			row := tc.setup(e)
			// Inside the window and the hour after it: no page.
			for range 17 {
				e.clock.Advance(10 * time.Minute)
				e.pass()
			}
			if n := len(e.pd.got("trigger")); n != 0 {
				t.Fatalf("%d pages before the window had been closed an hour", n)
			}
			for range 30 {
				e.clock.Advance(20 * time.Minute)
				e.pass()
			}
			if n := len(e.pd.got("trigger")); n != 1 {
				t.Fatalf("pages: %d, want 1", n)
			}
			if got := e.get(row); got.PagedAt.IsZero() || !got.Status.Open() {
				t.Fatalf("row %s paged_at %v, want open and paged", got.Status, got.PagedAt)
			}
		})
	}
}

// flakyEscalate fails the first n Escalate calls, as a store that is
// briefly unavailable does.
type flakyEscalate struct {
	ledger.Store
	fail atomic.Int32
}

func (s *flakyEscalate) Escalate(ctx context.Context, tenant, key string, at time.Time) (ledger.Row, bool, error) {
	if s.fail.Add(-1) >= 0 {
		return ledger.Row{}, false, fmt.Errorf("escalate: %w", ledger.ErrUnavailable)
	}
	return s.Store.Escalate(ctx, tenant, key, at)
}

// TestEscalateRetriedAfterADeliveredPage: when recording a delivered page
// fails for a moment, the pass tries again, so the row says paged (and a
// later settlement resolves the alert) without waiting for the next pass.
func TestEscalateRetriedAfterADeliveredPage(t *testing.T) {
	fl := &flakyEscalate{}
	e := newEnv(t, false)
	fl.Store = e.store
	fl.fail.Store(2)
	e.res = resolver.New(fl, resolver.Options{
		Lookups: map[string]resolver.Lookup{}, Pager: e.pager, Interval: interval, PageTimeout: 300 * time.Millisecond,
		Now: e.clock.Now,
	})
	row := e.claim("acme-vendor", "/v1/x", 30*time.Minute, nil)
	e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.clock.Advance(time.Hour)
	e.pass()
	if got := e.get(row); got.PagedAt.IsZero() {
		t.Fatal("one pass with two failed Escalate calls left the row unpaged")
	}
	if n := len(e.pd.got("trigger")); n != 1 {
		t.Fatalf("triggers: %d, want 1", n)
	}
}

// TestPayPalOrdersRequest: which PayPal requests get Orders v2's 6 h
// PayPal-Request-Id window (config's paypal.orders_replay_window).
func TestPayPalOrdersRequest(t *testing.T) {
	for _, tc := range []struct {
		path string // "": no request stored
		want bool
	}{
		{"", true},
		{"/v2/checkout/orders", true},
		{"/v2/checkout/orders/5O190127TN364715T/capture", true},
		{"/v2/checkout/orders/5O190127TN364715T/authorize", true},
		{"/v2/payments/captures/2GG2/refund", false},
		{"/v2/payments/authorizations/0VF5/capture", false},
		{"/v1/unknown/thing", true}, // unknown: the shorter window
	} {
		var req *ledger.Request
		if tc.path != "" {
			req = &ledger.Request{Method: "POST", Path: tc.path}
		}
		if got := resolver.PayPalOrdersRequest(req); got != tc.want {
			t.Errorf("PayPalOrdersRequest(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestNeverCalledRowIsLeftAlone: a row inserted behind the approval gate
// (attempt 0: no call granted) is neither looked up, replayed nor paged,
// however long it waits, even with a replayable request stored; once the
// grant's claim starts an attempt, the row is the resolver's as any other.
func TestNeverCalledRowIsLeftAlone(t *testing.T) {
	e := newEnv(t, false)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: "run1", Tool: "stripe.v1.payment_intents", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(`{"n":1}`), ReplayWindow: 2 * time.Hour,
		Gate: ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "checklist not complete", ApprovalTTL: 30 * time.Minute},
	}, policy, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	c.Row.Request = &ledger.Request{Method: "POST", Path: "/v1/payment_intents", ContentType: "application/x-www-form-urlencoded", Body: piBody(c.Row.MetadataLocalID)}
	res, err := e.store.Claim(context.Background(), c)
	if err != nil || res.Decision != ledger.DecisionAwaitApproval {
		t.Fatalf("gated claim: %s %v", res.Decision, err)
	}
	row := res.Row
	for range 6 {
		e.clock.Advance(10 * time.Minute)
		e.pass()
	}
	if got := e.get(row); got.Status != ledger.StatusPending || got.Attempt != 0 || !got.PagedAt.IsZero() || !got.NextCheckAt.After(e.clock.Now()) {
		t.Fatalf("row after passes: %s attempt %d paged %v next %v", got.Status, got.Attempt, got.PagedAt, got.NextCheckAt)
	}
	if n := e.stripe.Count("POST"); n != 0 {
		t.Fatalf("%d vendor POSTs for a row never called", n)
	}
	if n := e.stripe.Count("GET"); n != 0 {
		t.Fatalf("%d vendor lookups for a row never called", n)
	}
	if n := len(e.pd.got("trigger")); n != 0 {
		t.Fatalf("%d pages for a row waiting for approval", n)
	}
}
