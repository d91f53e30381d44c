package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

func TestClaimDecisions(t *testing.T) {
	ledgerClaim := newClaim("run_1").with("vendor", "resend", "tool", "resend.send_email", "tool_class", "write_ledger")
	tests := []struct {
		name   string
		body   claimReq
		setup  func(f *fixture, key string) // key: of the first claim of body
		status int
		want   ledger.Decision
		code   string
		check  func(t *testing.T, got claimResp)
	}{
		{
			name: "new key proceeds", body: newClaim("run_1"), status: http.StatusCreated, want: ledger.DecisionProceed,
			check: func(t *testing.T, got claimResp) {
				if got.Row.Status != ledger.StatusPending || got.Row.Attempt != 1 || got.Row.Tenant != "acme" {
					t.Errorf("row: got %s attempt %d tenant %s, want pending attempt 1 tenant acme", got.Row.Status, got.Row.Attempt, got.Row.Tenant)
				}
				if want := t0.Add(24 * time.Hour); got.ReplayWindowUntil == nil || !got.ReplayWindowUntil.Equal(want) {
					t.Errorf("replay_window_until: got %v, want %v", got.ReplayWindowUntil, want)
				}
				if !strings.HasPrefix(got.Row.MetadataLocalID, "rl_") || !ledger.IsMintedKey(got.Row.Key) {
					t.Errorf("key %q / local id %q: want a minted key and rl_ local id", got.Row.Key, got.Row.MetadataLocalID)
				}
			},
		},
		{
			name: "in flight waits", body: newClaim("run_1"),
			setup:  func(f *fixture, key string) {},
			status: http.StatusConflict, want: ledger.DecisionWait,
		},
		{
			name: "succeeded replays the receipt", body: newClaim("run_1"),
			setup:  func(f *fixture, key string) { f.report(tokenAcme, key, okOutcome) },
			status: http.StatusOK, want: ledger.DecisionReplay,
			check: func(t *testing.T, got claimResp) {
				if got.Row.UpstreamReceiptID != "pi_123" || got.Row.Status != ledger.StatusSucceeded {
					t.Errorf("row: got %s receipt %q, want succeeded pi_123", got.Row.Status, got.Row.UpstreamReceiptID)
				}
			},
		},
		{
			name: "unknown idempotent retries with the same key", body: newClaim("run_1"),
			setup:  func(f *fixture, key string) { f.report(tokenAcme, key, timeoutOutcome) },
			status: http.StatusOK, want: ledger.DecisionRetrySameKey,
			check: func(t *testing.T, got claimResp) {
				if got.Row.Attempt != 2 {
					t.Errorf("attempt: got %d, want 2", got.Row.Attempt)
				}
			},
		},
		{
			name: "unknown after a 5xx waits (the vendor replays stored 5xx)", body: newClaim("run_1"),
			setup:  func(f *fixture, key string) { f.report(tokenAcme, key, serverError) },
			status: http.StatusConflict, want: ledger.DecisionWait,
		},
		{
			name: "pending past its lease retries", body: newClaim("run_1"),
			setup:  func(f *fixture, key string) { f.clock.Advance(16 * time.Minute) },
			status: http.StatusOK, want: ledger.DecisionRetrySameKey,
		},
		{
			name: "unknown write_ledger waits for the resolver", body: ledgerClaim,
			setup:  func(f *fixture, key string) { f.report(tokenAcme, key, timeoutOutcome) },
			status: http.StatusConflict, want: ledger.DecisionWait,
		},
		{
			name: "failed_poison stops", body: newClaim("run_1"),
			setup:  func(f *fixture, key string) { f.report(tokenAcme, key, declined) },
			status: http.StatusOK, want: ledger.DecisionStop, code: ledger.CodeFailedPoison,
		},
		{
			name: "frozen tool with no row stops with 423", body: newClaim("run_1"),
			status: http.StatusLocked, want: ledger.DecisionStop, code: ledger.CodeToolFrozen,
			check: func(t *testing.T, got claimResp) {
				if got.Row != nil || got.ReplayWindowUntil != nil {
					t.Errorf("frozen claim: got row %v, want null and no replay window", got.Row)
				}
			},
		},
		{
			name: "frozen class with an unknown row waits instead of retrying", body: newClaim("run_1"),
			setup: func(f *fixture, key string) {
				f.report(tokenAcme, key, timeoutOutcome)
				f.freeze("acme", "write_idempotent")
			},
			status: http.StatusConflict, want: ledger.DecisionWait,
		},
		{
			name: "frozen tool with a succeeded row still replays", body: newClaim("run_1"),
			setup: func(f *fixture, key string) {
				f.report(tokenAcme, key, okOutcome)
				f.freeze("acme", "stripe.create_payment_intent")
			},
			status: http.StatusOK, want: ledger.DecisionReplay,
		},
		{
			name: "a business key held by another intent is 422", body: newClaim("run_1").with("key", "cart-42"),
			setup:  func(f *fixture, key string) {},
			status: http.StatusUnprocessableEntity,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			body := tc.body
			if tc.setup != nil {
				first := f.mustClaim(tokenAcme, tc.body, http.StatusCreated)
				tc.setup(f, first.Row.Key)
				if tc.status == http.StatusUnprocessableEntity {
					body = tc.body.with("intent", map[string]any{"amount": 999, "currency": "usd"})
				}
			} else if tc.code == ledger.CodeToolFrozen {
				f.freeze("acme", "stripe.create_payment_intent")
			}
			rec := f.do(http.MethodPost, "/v1/claims", tokenAcme, body)
			if tc.status == http.StatusUnprocessableEntity {
				wantError(t, rec, tc.status, "fingerprint_mismatch")
				return
			}
			wantStatus(t, rec, tc.status)
			got := decode[claimResp](t, rec)
			if got.Decision != tc.want || got.Code != tc.code {
				t.Fatalf("decision: got %s/%q, want %s/%q", got.Decision, got.Code, tc.want, tc.code)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			if got := f.metricValue("reconciler_claims_total", map[string]string{"tenant": "acme", "decision": string(tc.want)}); got < 1 {
				t.Errorf("reconciler_claims_total{acme,%s}: got %v, want >= 1", tc.want, got)
			}
		})
	}
}

func TestClaimFrozenInsertsNothing(t *testing.T) {
	f := newFixture(t)
	f.freeze("acme", "stripe.create_payment_intent")
	f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusLocked)
	page := decode[listResp](t, f.do(http.MethodGet, "/v1/claims", tokenAcme, nil))
	if len(page.Rows) != 0 {
		t.Fatalf("rows after a frozen claim: got %d, want 0", len(page.Rows))
	}
}

func TestClaimBadInput(t *testing.T) {
	valid := `{"run_id":"run_1","tool":"t","vendor":"stripe","tool_class":"write_idempotent","intent":{"a":1}}`
	tests := []struct {
		name   string
		query  string
		body   string
		status int
		code   string
		msg    string // a substring of the message
	}{
		{name: "not JSON", body: `{"run_id":`, status: 400, code: "bad_json"},
		{name: "empty body", body: ``, status: 400, code: "bad_json"},
		{name: "array", body: `[1,2]`, status: 400, code: "bad_json", msg: "object"},
		{name: "null", body: `null`, status: 400, code: "bad_json"},
		{name: "unknown field", body: strings.Replace(valid, `"run_id"`, `"tenant":"globex","run_id"`, 1), status: 400, code: "bad_json", msg: `unknown field "tenant"`},
		{name: "field in another case", body: strings.Replace(valid, `"run_id"`, `"RUN_ID"`, 1), status: 400, code: "bad_json", msg: "unknown field"},
		{name: "duplicate field", body: strings.Replace(valid, `"run_id":"run_1"`, `"run_id":"run_1","run_id":"run_2"`, 1), status: 400, code: "bad_json", msg: "duplicate"},
		{name: "trailing data", body: valid + ` {}`, status: 400, code: "bad_json", msg: "trailing"},
		{name: "trailing garbage", body: valid + `x`, status: 400, code: "bad_json"},
		{name: "unknown nested field", body: strings.Replace(valid, `"intent"`, `"expect":{"amount":1,"currency":"usd","fx":1},"intent"`, 1), status: 400, code: "bad_json", msg: "expect.fx"},
		{name: "wrong type", body: strings.Replace(valid, `"intent"`, `"expect":{"amount":"10","currency":"usd"},"intent"`, 1), status: 400, code: "bad_json", msg: "wrong type"},
		{name: "fractional amount", body: strings.Replace(valid, `"intent"`, `"expect":{"amount":10.5,"currency":"usd"},"intent"`, 1), status: 400, code: "bad_json"},
		{name: "invalid run_id", body: strings.Replace(valid, `run_1`, `run 1`, 1), status: 400, code: "invalid_input", msg: "run_id"},
		{name: "run_id with a subject dot", body: strings.Replace(valid, `run_1`, `run.1`, 1), status: 400, code: "invalid_input", msg: "run_id"},
		{name: "missing tool", body: strings.Replace(valid, `"tool":"t",`, ``, 1), status: 400, code: "invalid_input", msg: "missing tool"},
		{name: "several bad fields, all named", body: strings.Replace(strings.Replace(valid, `"tool":"t",`, ``, 1), `write_idempotent`, `write_maybe`, 1),
			status: 400, code: "invalid_input", msg: "missing tool; invalid tool_class: want write_idempotent, write_ledger or write_irreversible"},
		{name: "unknown tool_class", body: strings.Replace(valid, `write_idempotent`, `write_maybe`, 1), status: 400, code: "invalid_input", msg: "tool_class"},
		{name: "intent not an object", body: strings.Replace(valid, `{"a":1}`, `[1]`, 1), status: 400, code: "invalid_input", msg: "intent"},
		{name: "missing intent", body: strings.Replace(valid, `,"intent":{"a":1}`, ``, 1), status: 400, code: "invalid_input", msg: "missing intent"},
		{name: "bad currency", body: strings.Replace(valid, `"intent"`, `"expect":{"amount":1,"currency":"dollars"},"intent"`, 1), status: 400, code: "invalid_input", msg: "expect"},
		{name: "request envelope with GET", body: strings.Replace(valid, `"intent"`, `"request":{"method":"GET","path":"/v1/x"},"intent"`, 1), status: 400, code: "invalid_input", msg: "method"},
		{name: "key with a space", body: strings.Replace(valid, `"intent"`, `"key":"cart 1","intent"`, 1), status: 400, code: "invalid_input", msg: "key"},
		{name: "wait beyond 30s", query: "?wait=31s", body: valid, status: 400, code: "invalid_input", msg: "wait"},
		{name: "wait in seconds beyond 30", query: "?wait=30.5", body: valid, status: 400, code: "invalid_input", msg: "wait"},
		{name: "negative wait", query: "?wait=-1s", body: valid, status: 400, code: "invalid_input", msg: "wait"},
		{name: "wait not a duration", query: "?wait=soon", body: valid, status: 400, code: "invalid_input", msg: "wait"},
		{name: "wait in exponent form", query: "?wait=1e1", body: valid, status: 400, code: "invalid_input", msg: "wait"},
		{name: "wait with a bad escape", query: "?wait=2s%zz", body: valid, status: 400, code: "invalid_input", msg: "malformed query"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			rec := f.do(http.MethodPost, "/v1/claims"+tc.query, tokenAcme, tc.body)
			e := wantError(t, rec, tc.status, tc.code)
			if !strings.Contains(e.Error.Message, tc.msg) {
				t.Errorf("message: got %q, want it to contain %q", e.Error.Message, tc.msg)
			}
			page := decode[listResp](t, f.do(http.MethodGet, "/v1/claims", tokenAcme, nil))
			if len(page.Rows) != 0 {
				t.Errorf("a bad body stored %d rows, want 0", len(page.Rows))
			}
		})
	}
}

func TestClaimWaitAccepted(t *testing.T) {
	tests := []struct{ name, wait string }{
		{name: "duration", wait: "20ms"},
		{name: "seconds", wait: "0.02"},
		{name: "zero", wait: "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated)
			got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusConflict)
			rec := f.do(http.MethodPost, "/v1/claims?wait="+tc.wait, tokenAcme, newClaim("run_1"))
			wantStatus(t, rec, http.StatusConflict)
			if d := decode[claimResp](t, rec); d.Decision != ledger.DecisionWait || d.Row.Key != got.Row.Key {
				t.Errorf("after the wait: got %s on %s, want wait on %s", d.Decision, d.Row.Key, got.Row.Key)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	const limit = 512
	big := newClaim("run_1").with("intent", map[string]any{"note": strings.Repeat("x", limit)})
	tests := []struct {
		name    string
		method  string
		target  string
		token   string
		body    any
		chunked bool // no Content-Length: the limit is enforced while reading
	}{
		{name: "claim", method: http.MethodPost, target: "/v1/claims", token: tokenAcme, body: big},
		{name: "claim without content length", method: http.MethodPost, target: "/v1/claims", token: tokenAcme, body: big, chunked: true},
		{name: "outcome", method: http.MethodPost, target: "/v1/claims/k1/outcome", token: tokenAcme,
			body: map[string]any{"kind": "timeout", "headers": map[string]string{"X-Pad": strings.Repeat("y", limit)}}, chunked: true},
		{name: "resolve", method: http.MethodPost, target: "/v1/claims/k1/resolve", token: tokenAdmin,
			body: map[string]any{"tenant": "acme", "status": "succeeded", "note": strings.Repeat("z", limit)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *api.Options) { o.BodyLimit = limit })
			body := bodyReader(t, tc.body)
			if tc.chunked {
				// Hiding the reader's type keeps httptest from learning the
				// length, so the request goes without Content-Length.
				body = struct{ io.Reader }{body}
			}
			req := httptest.NewRequest(tc.method, tc.target, body)
			req.Header.Set("Authorization", "Bearer "+tc.token)
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			wantError(t, rec, http.StatusRequestEntityTooLarge, "body_too_large")
		})
	}
	t.Run("exactly the limit is read", func(t *testing.T) {
		f := newFixture(t, func(o *api.Options) { o.BodyLimit = limit })
		body := `{"run_id":"run_1","tool":"t","vendor":"stripe","tool_class":"write_idempotent","intent":{"a":1}}`
		body += strings.Repeat(" ", limit-len(body))
		f.mustClaim(tokenAcme, body, http.StatusCreated)
	})
}

func TestClaimLongPoll(t *testing.T) {
	ledgerClaim := newClaim("run_1").with("vendor", "resend", "tool", "resend.send_email", "tool_class", "write_ledger")
	tests := []struct {
		name string
		body claimReq
		poll time.Duration // re-read interval; an hour means only a signal can wake the waiter
		// prepare runs after the first claim; wake runs once the waiter waits.
		prepare func(f *fixture, key string)
		wake    func(f *fixture, key string)
		status  int
		want    ledger.Decision
	}{
		{
			name: "an outcome reported through the API wakes the waiter", body: newClaim("run_1"), poll: time.Hour,
			wake:   func(f *fixture, key string) { f.report(tokenAcme, key, okOutcome) },
			status: http.StatusOK, want: ledger.DecisionReplay,
		},
		{
			name: "a failure reported through the API stops the waiter", body: newClaim("run_1"), poll: time.Hour,
			wake:   func(f *fixture, key string) { f.report(tokenAcme, key, declined) },
			status: http.StatusOK, want: ledger.DecisionStop,
		},
		{
			name: "a timeout reported through the API lets the waiter retry", body: newClaim("run_1"), poll: time.Hour,
			wake:   func(f *fixture, key string) { f.report(tokenAcme, key, timeoutOutcome) },
			status: http.StatusOK, want: ledger.DecisionRetrySameKey,
		},
		{
			name: "a resolution by hand wakes the waiter", body: ledgerClaim, poll: time.Hour,
			prepare: func(f *fixture, key string) { f.report(tokenAcme, key, timeoutOutcome) },
			wake: func(f *fixture, key string) {
				rec := f.do(http.MethodPost, "/v1/claims/"+key+"/resolve", tokenAdmin,
					map[string]any{"tenant": "acme", "status": "succeeded", "note": "checked the provider dashboard"})
				wantStatus(f.t, rec, http.StatusOK)
			},
			status: http.StatusOK, want: ledger.DecisionReplay,
		},
		{
			name: "a webhook applied elsewhere is seen by polling", body: newClaim("run_1"), poll: 5 * time.Millisecond,
			wake: func(f *fixture, key string) {
				_, _, err := f.store.Apply(context.Background(), "acme", key, ledger.Evidence{
					Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_9", VendorEventID: "evt_1", At: f.clock.Now(),
				})
				if err != nil {
					f.t.Errorf("apply: %v", err)
				}
			},
			status: http.StatusOK, want: ledger.DecisionReplay,
		},
		{
			name: "a lease that runs out is seen by polling", body: newClaim("run_1"), poll: 5 * time.Millisecond,
			wake:   func(f *fixture, key string) { f.clock.Advance(16 * time.Minute) },
			status: http.StatusOK, want: ledger.DecisionRetrySameKey,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *api.Options) { o.PollInterval = tc.poll })
			first := f.mustClaim(tokenAcme, tc.body, http.StatusCreated)
			if tc.prepare != nil {
				tc.prepare(f, first.Row.Key)
			}
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() {
				req := httptest.NewRequest(http.MethodPost, "/v1/claims?wait=10s", bodyReader(t, tc.body))
				req.Header.Set("Authorization", "Bearer "+tokenAcme)
				rec := httptest.NewRecorder()
				f.h.ServeHTTP(rec, req)
				done <- rec
			}()
			testkit.Eventually(t, "the claim to long-poll", func() bool { return f.metricValue("reconciler_claim_waiters", nil) == 1 })
			tc.wake(f, first.Row.Key)
			rec := <-done
			wantStatus(t, rec, tc.status)
			got := decode[claimResp](t, rec)
			if got.Decision != tc.want || got.Row.Key != first.Row.Key {
				t.Fatalf("after waking: got %s on %s, want %s on %s", got.Decision, got.Row.Key, tc.want, first.Row.Key)
			}
			if n := f.metricValue("reconciler_claim_waiters", nil); n != 0 {
				t.Errorf("waiters after the answer: got %v, want 0", n)
			}
		})
	}
}

func TestClaimLongPollEndsWithTheClient(t *testing.T) {
	f := newFixture(t, func(o *api.Options) { o.PollInterval = time.Hour })
	f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/claims?wait=10s", bodyReader(t, newClaim("run_1")))
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		done <- rec
	}()
	testkit.Eventually(t, "the claim to long-poll", func() bool { return f.metricValue("reconciler_claim_waiters", nil) == 1 })
	cancel()
	rec := <-done
	if rec.Code != 499 {
		t.Fatalf("status after the client left: got %d, want 499", rec.Code)
	}
	if n := f.metricValue("reconciler_claim_waiters", nil); n != 0 {
		t.Errorf("waiters after the client left: got %v, want 0", n)
	}
}

func TestConcurrentClaimsProceedOnce(t *testing.T) {
	f := newFixture(t)
	const n = 16
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodPost, "/v1/claims", bodyReader(t, newClaim("run_1")))
			req.Header.Set("Authorization", "Bearer "+tokenAcme)
			codes <- serve(f, req).Code
		}()
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[http.StatusCreated] != 1 || got[http.StatusConflict] != n-1 {
		t.Fatalf("statuses: got %v, want one 201 and %d 409", got, n-1)
	}
}

// TestClaimCannotDodgeTheKillSwitch: a retry that names another tool class
// or tool than its row is refused (422), not answered from the row: the
// kill switch is asked about the claim's tool and class, so another name
// would get retry_same_key past a frozen class or tool.
func TestClaimCannotDodgeTheKillSwitch(t *testing.T) {
	tests := []struct {
		name   string
		body   claimReq
		freeze string
		retry  claimReq
	}{
		{name: "another tool class", body: newClaim("run_1"), freeze: "write_idempotent",
			retry: newClaim("run_1").with("tool_class", "write_ledger")},
		{name: "another tool for a business key", body: newClaim("run_1").with("key", "cart-42"), freeze: "stripe.create_payment_intent",
			retry: newClaim("run_1").with("key", "cart-42", "tool", "other.tool")},
		{name: "another vendor", body: newClaim("run_1"), freeze: "write_idempotent",
			retry: newClaim("run_1").with("vendor", "paypal")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			key := f.mustClaim(tokenAcme, tc.body, http.StatusCreated).Row.Key
			f.report(tokenAcme, key, timeoutOutcome)
			f.freeze("acme", tc.freeze)
			wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcme, tc.retry), http.StatusUnprocessableEntity, "fingerprint_mismatch")
			row := decode[rowResp](t, f.do(http.MethodGet, "/v1/claims/"+key, tokenAcme, nil)).Row
			if row.Attempt != 1 || row.Status != ledger.StatusUnknown {
				t.Fatalf("row after the refused retry: attempt %d status %s, want 1 unknown", row.Attempt, row.Status)
			}
			// The same retry under its own names waits, as the kill switch says.
			rec := f.do(http.MethodPost, "/v1/claims", tokenAcme, tc.body)
			wantStatus(t, rec, http.StatusConflict)
		})
	}
}
