package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
)

const idemValue = "3f0c1a9e-7b2d-4c5e-9a81-0d6e2f4b8c17"

// withKey sends one request with an Idempotency-Key header.
func (f *fixture) withKey(method, target, token, value string, body any) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.send(method, target, token, body, api.IdempotencyKeyHeader, value)
}

func TestIdempotencyKeyClaimResend(t *testing.T) {
	f := newFixture(t)
	first := f.withKey(http.MethodPost, "/v1/claims", tokenAcme, idemValue, newClaim("run_1"))
	wantStatus(t, first, http.StatusCreated)
	a := decode[claimResp](t, first)
	f.clock.Advance(time.Minute)
	// The answer was lost: the resend gets it again, same attempt, same lease.
	again := f.withKey(http.MethodPost, "/v1/claims", tokenAcme, idemValue, newClaim("run_1"))
	wantStatus(t, again, http.StatusCreated)
	b := decode[claimResp](t, again)
	if b.Decision != ledger.DecisionProceed || b.Row.Attempt != a.Row.Attempt || !b.Row.PendingUntil.Equal(a.Row.PendingUntil) {
		t.Fatalf("resend: %s attempt %d until %s; want proceed attempt %d until %s", b.Decision, b.Row.Attempt, b.Row.PendingUntil, a.Row.Attempt, a.Row.PendingUntil)
	}
	// No header: exactly the claim table (the row's lease is someone's).
	if r := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusConflict); r.Decision != ledger.DecisionWait {
		t.Fatalf("claim without the header: %s", r.Decision)
	}
	// Another tenant's same value is its own key.
	g := f.withKey(http.MethodPost, "/v1/claims", tokenGlobex, idemValue, newClaim("run_1"))
	wantStatus(t, g, http.StatusCreated)
	if r := decode[claimResp](t, g); r.Row.Tenant != "globex" {
		t.Fatalf("globex's claim: %+v", r.Row)
	}
	// After the outcome, a resend never proceeds again.
	f.report(tokenAcme, a.Row.Key, map[string]any{"kind": "response", "http_status": 200, "receipt_id": "pi_1"})
	late := f.withKey(http.MethodPost, "/v1/claims", tokenAcme, idemValue, newClaim("run_1"))
	wantStatus(t, late, http.StatusOK)
	if r := decode[claimResp](t, late); r.Decision != ledger.DecisionReplay {
		t.Fatalf("resend after the outcome: %s, want replay", r.Decision)
	}
	// Neither the value nor its hash is in a read, or in a log line.
	get := f.do(http.MethodGet, "/v1/claims/"+escape(a.Row.Key), tokenAcme, nil)
	for _, secret := range []string{idemValue, ledger.IdempotencyKeyHash(idemValue)} {
		if strings.Contains(get.Body.String(), secret) || strings.Contains(f.logs.String(), secret) {
			t.Fatalf("the Idempotency-Key (or its hash) leaked into a GET or a log line")
		}
	}
}

func TestIdempotencyKeyEdgeCases(t *testing.T) {
	cases := []struct {
		name   string
		value  []string // header values (two: sent twice)
		status int
		code   string
	}{
		{"16 characters", []string{strings.Repeat("a", 16)}, http.StatusCreated, ""},
		{"255 characters", []string{strings.Repeat("b", 255)}, http.StatusCreated, ""},
		{"a structured-field string", []string{`"` + idemValue + `"`}, http.StatusCreated, ""},
		{"too short", []string{strings.Repeat("a", 15)}, http.StatusBadRequest, "invalid_input"},
		{"too long", []string{strings.Repeat("a", 256)}, http.StatusBadRequest, "invalid_input"},
		{"empty", []string{""}, http.StatusBadRequest, "invalid_input"},
		{"non-ASCII", []string{"schlüssel-0123456789abcdef"}, http.StatusBadRequest, "invalid_input"},
		{"a space", []string{"0123456789 abcdef"}, http.StatusBadRequest, "invalid_input"},
		{"a control character", []string{"0123456789\x01abcdef"}, http.StatusBadRequest, "invalid_input"},
		{"sent twice", []string{idemValue, idemValue}, http.StatusBadRequest, "invalid_input"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			req := httptest.NewRequest(http.MethodPost, "/v1/claims", bodyReader(t, newClaim("run_1")))
			req.Header.Set("Authorization", "Bearer "+tokenAcme)
			for _, v := range tc.value {
				req.Header.Add(api.IdempotencyKeyHeader, v)
			}
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			if tc.code == "" {
				wantStatus(t, rec, tc.status)
				return
			}
			e := wantError(t, rec, tc.status, tc.code)
			if !strings.Contains(e.Error.Message, "Idempotency-Key") {
				t.Fatalf("message %q does not name the header", e.Error.Message)
			}
			if r := f.rowsOf(tokenAcme); len(r) != 0 {
				t.Fatalf("a refused header stored %d rows", len(r))
			}
		})
	}
}

func TestIdempotencyKeyReusedWithAnotherBody(t *testing.T) {
	f := newFixture(t)
	wantStatus(t, f.withKey(http.MethodPost, "/v1/claims", tokenAcme, idemValue, newClaim("run_1")), http.StatusCreated)
	other := newClaim("run_1").with("intent", map[string]any{"amount": 2000, "currency": "usd"})
	e := wantError(t, f.withKey(http.MethodPost, "/v1/claims", tokenAcme, idemValue, other), http.StatusUnprocessableEntity, "idempotency_key_reused")
	if !strings.Contains(e.Error.Message, "Idempotency-Key") {
		t.Fatalf("message %q does not name the header", e.Error.Message)
	}
	if rows := f.rowsOf(tokenAcme); len(rows) != 1 {
		t.Fatalf("%d rows, want the first claim's only", len(rows))
	}
	// The same value on another route is another request too.
	key := decode[claimResp](t, f.mustClaimRec(tokenAcme)).Row.Key
	wantError(t, f.withKey(http.MethodPost, "/v1/claims/"+escape(key)+"/outcome", tokenAcme, idemValue, map[string]any{"kind": "timeout"}),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
}

// mustClaimRec claims newClaim("run_1") without a header.
func (f *fixture) mustClaimRec(token string) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.do(http.MethodPost, "/v1/claims", token, newClaim("run_1"))
}

func TestIdempotencyKeyInFlight(t *testing.T) {
	f := newFixture(t)
	// Someone holds the lease, so the keyed claim long-polls: in flight.
	f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated)
	// The probe must reach the server after the long poll began: a probe
	// that wins the race is itself the first send of its value (answered
	// wait, and recorded). Then the round is tried again with a fresh
	// value and a longer head start.
	var (
		value  string
		done   chan *httptest.ResponseRecorder
		second *httptest.ResponseRecorder
	)
	for round := 1; round <= 20; round++ {
		value = fmt.Sprintf("%s-round-%02d", idemValue, round)
		done = make(chan *httptest.ResponseRecorder, 1)
		go func(v string, out chan<- *httptest.ResponseRecorder) {
			// Well past the probe (EndWaits below ends it).
			out <- f.withKey(http.MethodPost, "/v1/claims?wait=25s", tokenAcme, v, newClaim("run_1"))
		}(value, done)
		time.Sleep(time.Duration(round) * 20 * time.Millisecond)
		second = f.withKey(http.MethodPost, "/v1/claims", tokenAcme, value, newClaim("run_1"))
		if !strings.Contains(second.Body.String(), `"decision"`) {
			break // not a claim decision: the long poll was in flight
		}
	}
	wantError(t, second, http.StatusConflict, "idempotency_key_in_flight")
	other := newClaim("run_1").with("tool_call_id", "call_2")
	wantError(t, f.withKey(http.MethodPost, "/v1/claims", tokenAcme, value, other), http.StatusUnprocessableEntity, "idempotency_key_reused")
	f.srv.EndWaits()
	first := <-done
	wantStatus(t, first, http.StatusConflict)
	if r := decode[claimResp](t, first); r.Decision != ledger.DecisionWait {
		t.Fatalf("the long poll: %s", r.Decision)
	}
}

func TestIdempotencyKeyConcurrentResends(t *testing.T) {
	f := newFixture(t)
	const n = 16
	recs := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { recs[i] = f.withKey(http.MethodPost, "/v1/claims", tokenAcme, idemValue, newClaim("run_1")) })
	}
	wg.Wait()
	proceeds := 0
	for _, rec := range recs {
		switch rec.Code {
		case http.StatusCreated:
			if r := decode[claimResp](t, rec); r.Decision != ledger.DecisionProceed || r.Row.Attempt != 1 {
				t.Fatalf("a send: %s attempt %d", r.Decision, r.Row.Attempt)
			}
			proceeds++
		case http.StatusConflict:
			wantError(t, rec, http.StatusConflict, "idempotency_key_in_flight") // never a wait
		default:
			t.Fatalf("a send: %d %s", rec.Code, rec.Body.String())
		}
	}
	if proceeds == 0 {
		t.Fatal("no send proceeded")
	}
	if rows := f.rowsOf(tokenAcme); len(rows) != 1 || rows[0].Attempt != 1 {
		t.Fatalf("rows: %+v", rows)
	}
}

func TestIdempotencyKeyOutcomeAndApproval(t *testing.T) {
	f := newGateFixture(t, approvalTool())
	got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusAccepted)
	id := got.Row.Approval.ID
	for range 2 {
		rec := f.withKey(http.MethodPost, approvalPath(id, "approve"), tokenAcmeApprover, idemValue, approve)
		wantStatus(t, rec, http.StatusOK)
		if r := decode[approvalResp](t, rec); r.Approval.State != ledger.ApprovalGranted {
			t.Fatalf("grant: %s", r.Approval.State)
		}
	}
	// Without the header the resend is told it was decided.
	wantError(t, f.do(http.MethodPost, approvalPath(id, "approve"), tokenAcmeApprover, approve), http.StatusConflict, "approval_decided")

	p := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK)
	outcome := map[string]any{"kind": "timeout"}
	path := "/v1/claims/" + escape(p.Row.Key) + "/outcome"
	var rows []ledger.Row
	for range 2 {
		rec := f.withKey(http.MethodPost, path, tokenAcme, "outcome-"+idemValue, outcome)
		wantStatus(t, rec, http.StatusOK)
		rows = append(rows, decode[rowResp](t, rec).Row)
	}
	if rows[0].Status != ledger.StatusUnknown || rows[1].UpdatedAt != rows[0].UpdatedAt || rows[1].Status != rows[0].Status {
		t.Fatalf("outcome and its resend: %+v / %+v", rows[0], rows[1])
	}
	if v := f.metricValue("reconciler_transitions_total", map[string]string{"from": "pending", "to": "unknown"}); v != 1 {
		t.Fatalf("transitions pending→unknown: %v, want 1 (the resend applies nothing)", v)
	}
}
