package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// Open returns a fresh, empty store opened with ledger.DefaultPolicy(). It
// is called once per subtest and should register the store's Close with
// t.Cleanup.
type Open func(t *testing.T) ledger.Store

// Run runs the whole suite against the stores that open returns.
func Run(t *testing.T, open func(t *testing.T) ledger.Store) {
	groups := []struct {
		name string
		run  func(*testing.T, Open)
	}{
		{"ClaimDecisions", testClaimDecisions},
		{"Compensation", testCompensation},
		{"SharedBusinessKey", testSharedBusinessKey},
		{"ClaimContention", testClaimContention},
		{"Transitions", testTransitions},
		{"Results", testResults},
		{"Ingest", testIngest},
		{"IngestHints", testIngestHints},
		{"OrphanClaims", testOrphanClaims},
		{"Redrive", testRedrive},
		{"PruneInbox", testPruneInbox},
		{"Escalate", testEscalate},
		{"Reschedule", testReschedule},
		{"Due", testDue},
		{"List", testList},
		{"Outbox", testOutbox},
		{"Freezes", testFreezes},
		{"Tools", testTools},
		{"Approvals", testApprovals},
		{"OutboxAutonomy", testOutboxAutonomy},
		{"CountRows", testCountRows},
		{"Retention", testRetention},
		{"Traceparent", testTraceparent},
		{"Idempotency", testIdempotency},
		{"Journal", testJournal},
		{"FindRows", testFindRows},
		{"Revocations", testRevocations},
		{"Close", testClose},
		{"RandomConsistency", testRandomConsistency},
		{"Linearizable", testLinearizable},
		{"LinearizableApprovals", testLinearizableApprovals},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) { g.run(t, open) })
	}
}

// consistencyChecker is what a store offers when it can audit its own
// indexes (memstore, bolt).
type consistencyChecker interface {
	CheckConsistency(ctx context.Context) error
}

// t0 is the suite's epoch. Every time is t0 plus whole seconds or
// milliseconds, so stores with microsecond timestamps round-trip them.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// Tenants and vendors of the suite.
const (
	tenantA = "acme"
	tenantB = "globex"
	vendor  = "stripe"
)

// env is one store under test.
type env struct {
	t   *testing.T
	s   ledger.Store
	ctx context.Context
}

func newEnv(t *testing.T, open Open) *env {
	t.Helper()
	return &env{t: t, s: open(t), ctx: t.Context()}
}

// consistent fails the test when the store can audit itself and finds a
// broken index.
func (e *env) consistent() {
	e.t.Helper()
	if c, ok := e.s.(consistencyChecker); ok {
		if err := c.CheckConsistency(e.ctx); err != nil {
			e.t.Fatalf("CheckConsistency: %v", err)
		}
	}
}

// reqMod changes a claim request from the suite's default.
type reqMod func(*ledger.ClaimRequest)

// baseRequest is a Stripe PaymentIntent for 10.50 USD, retried with the same
// key inside a 24 h window.
func baseRequest(mods ...reqMod) ledger.ClaimRequest {
	r := ledger.ClaimRequest{
		Tenant: tenantA, RunID: "run-1", Tool: "stripe.payment_intents.create", ToolCallID: "call_1",
		Vendor: vendor, ToolClass: ledger.ClassWriteIdempotent,
		Intent:       json.RawMessage(`{"amount":1050,"currency":"usd","customer":"cus_1"}`),
		ReplayWindow: 24 * time.Hour,
		Request:      &ledger.Request{Method: "POST", Path: "/v1/payment_intents", ContentType: "application/x-www-form-urlencoded", Body: "amount=1050&currency=usd"},
	}
	for _, m := range mods {
		m(&r)
	}
	return r
}

func withKey(k string) reqMod             { return func(r *ledger.ClaimRequest) { r.Key = k } }
func withTenant(tn string) reqMod         { return func(r *ledger.ClaimRequest) { r.Tenant = tn } }
func withRunID(id string) reqMod          { return func(r *ledger.ClaimRequest) { r.RunID = id } }
func withClass(c ledger.ToolClass) reqMod { return func(r *ledger.ClaimRequest) { r.ToolClass = c } }
func withWindow(d time.Duration) reqMod   { return func(r *ledger.ClaimRequest) { r.ReplayWindow = d } }
func withIntent(s string) reqMod {
	return func(r *ledger.ClaimRequest) { r.Intent = json.RawMessage(s) }
}
func frozen() reqMod { return func(r *ledger.ClaimRequest) { r.Frozen = true } }
func withExpect(amount int64, cur string) reqMod {
	return func(r *ledger.ClaimRequest) { r.Expect = &ledger.Expect{Amount: amount, Currency: cur} }
}

// newClaim validates a request at a time; a bad request is a suite bug.
func newClaim(t *testing.T, req ledger.ClaimRequest, now time.Time) ledger.Claim {
	t.Helper()
	c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), now)
	if err != nil {
		t.Fatalf("NewClaim: %v", err)
	}
	return c
}

// claim runs a claim that must not fail.
func (e *env) claim(req ledger.ClaimRequest, now time.Time) ledger.ClaimResult {
	e.t.Helper()
	res, err := e.s.Claim(e.ctx, newClaim(e.t, req, now))
	if err != nil {
		e.t.Fatalf("Claim: %v", err)
	}
	return res
}

// report records an outcome that must not fail.
func (e *env) report(tenant, key string, o ledger.Outcome) (ledger.Row, ledger.Change) {
	e.t.Helper()
	row, ch, err := e.s.Report(e.ctx, tenant, key, o)
	if err != nil {
		e.t.Fatalf("Report(%s): %v", o.Kind, err)
	}
	return row, ch
}

func (e *env) get(tenant, key string) ledger.Row {
	e.t.Helper()
	row, err := e.s.Get(e.ctx, tenant, key)
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	return row
}

func (e *env) mustNotExist(tenant, key string) {
	e.t.Helper()
	if _, err := e.s.Get(e.ctx, tenant, key); !errors.Is(err, ledger.ErrNotFound) {
		e.t.Fatalf("Get: got %v, want ErrNotFound", err)
	}
}

// pending returns every outbox record (the suite's stores hold few).
func (e *env) pending() []ledger.OutboxRecord {
	e.t.Helper()
	recs, err := e.s.PendingEvents(e.ctx, 100000)
	if err != nil {
		e.t.Fatalf("PendingEvents: %v", err)
	}
	return recs
}

// Outcomes a runtime reports.
func response(status int, receipt string, d time.Duration, headers ...string) ledger.Outcome {
	o := ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: status, ReceiptID: receipt, At: at(d)}
	for i := 0; i+1 < len(headers); i += 2 {
		if o.Headers == nil {
			o.Headers = map[string]string{}
		}
		o.Headers[headers[i]] = headers[i+1]
	}
	return o
}

func timeout(d time.Duration) ledger.Outcome {
	return ledger.Outcome{Kind: ledger.OutcomeTimeout, At: at(d)}
}

func networkError(d time.Duration) ledger.Outcome {
	return ledger.Outcome{Kind: ledger.OutcomeNetworkError, At: at(d)}
}

// webhook is vendor evidence from a signed event.
func webhook(status ledger.Status, receipt, eventID string, d time.Duration) ledger.Evidence {
	return ledger.Evidence{Source: ledger.SourceWebhook, Status: status, ReceiptID: receipt, VendorEventID: eventID, At: at(d)}
}

func human(status ledger.Status, d time.Duration) ledger.Evidence {
	return ledger.Evidence{Source: ledger.SourceHuman, Status: status, Actor: "ops@example.com", Note: "checked the vendor dashboard", At: at(d)}
}

func amount(v int64) *int64 { return &v }

// rowJSON is the row as the API shows it; comparing it compares every field
// (times by instant, in UTC).
func rowJSON(r ledger.Row) string {
	r = normalise(r)
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal row: %v", err))
	}
	return string(b)
}

// normalise puts every time in UTC, so a store that hands back local times
// of the same instant is not told apart.
func normalise(r ledger.Row) ledger.Row {
	r = r.Clone()
	for _, tp := range []*time.Time{&r.FirstSeenAt, &r.UpdatedAt, &r.SucceededAt, &r.PagedAt, &r.PendingUntil, &r.ReplayWindowUntil, &r.NextCheckAt} {
		*tp = tp.UTC()
	}
	if r.Resolution != nil {
		r.Resolution.At = r.Resolution.At.UTC()
	}
	if a := r.Approval; a != nil {
		a.RequestedAt, a.ExpiresAt, a.DecidedAt = a.RequestedAt.UTC(), a.ExpiresAt.UTC(), a.DecidedAt.UTC()
	}
	for i := range r.Alerts {
		r.Alerts[i].At = r.Alerts[i].At.UTC()
	}
	return r
}

func sameRow(t *testing.T, what string, got, want ledger.Row) {
	t.Helper()
	if g, w := rowJSON(got), rowJSON(want); g != w {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func alertKinds(r ledger.Row) []ledger.AlertKind {
	var ks []ledger.AlertKind
	for _, a := range r.Alerts {
		ks = append(ks, a.Kind)
	}
	return ks
}

// drain empties a Notify channel so the next signal is a fresh one.
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// waitNotify waits for a signal. The bound only keeps a broken store from
// hanging the suite; a correct one signals at or soon after the commit.
func waitNotify(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify: no signal after a commit that wrote outbox records")
	}
}
