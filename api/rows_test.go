package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

func TestOutcome(t *testing.T) {
	tests := []struct {
		name    string
		outcome any
		status  int
		code    string // error code, when status is not 200
		want    ledger.Status
		check   func(t *testing.T, row ledger.Row)
	}{
		{name: "2xx with receipt succeeds", outcome: okOutcome, status: 200, want: ledger.StatusSucceeded,
			check: func(t *testing.T, row ledger.Row) {
				if row.UpstreamReceiptID != "pi_123" || row.LastHTTPStatus != 200 || !row.SucceededAt.Equal(t0) {
					t.Errorf("row: receipt %q status %d succeeded_at %v", row.UpstreamReceiptID, row.LastHTTPStatus, row.SucceededAt)
				}
				if row.Resolution == nil || row.Resolution.Source != ledger.SourceRuntime {
					t.Errorf("resolution: got %+v, want source runtime", row.Resolution)
				}
			}},
		{name: "replayed 2xx succeeds", outcome: map[string]any{"kind": "response", "http_status": 200, "headers": map[string]string{"idempotent-replayed": "true"}},
			status: 200, want: ledger.StatusSucceeded,
			check: func(t *testing.T, row ledger.Row) {
				if !row.IdempotentReplayed {
					t.Error("idempotent_replayed: got false, want true")
				}
			}},
		{name: "timeout is unknown", outcome: timeoutOutcome, status: 200, want: ledger.StatusUnknown},
		{name: "network error is unknown", outcome: map[string]any{"kind": "network_error"}, status: 200, want: ledger.StatusUnknown},
		{name: "429 stays pending and may retry", outcome: map[string]any{"kind": "response", "http_status": 429}, status: 200, want: ledger.StatusPending,
			check: func(t *testing.T, row ledger.Row) {
				if row.VendorShouldRetry == nil || !*row.VendorShouldRetry {
					t.Errorf("vendor_should_retry: got %v, want true", row.VendorShouldRetry)
				}
			}},
		{name: "402 is failed_poison", outcome: declined, status: 200, want: ledger.StatusFailedPoison},
		{name: "unknown kind", outcome: map[string]any{"kind": "lost"}, status: 400, code: "invalid_input"},
		{name: "response without http_status", outcome: map[string]any{"kind": "response"}, status: 400, code: "invalid_input"},
		{name: "timeout with http_status", outcome: map[string]any{"kind": "timeout", "http_status": 504}, status: 400, code: "invalid_input"},
		{name: "unknown field", outcome: map[string]any{"kind": "timeout", "status": "succeeded"}, status: 400, code: "bad_json"},
		{name: "headers of the wrong type", outcome: `{"kind":"timeout","headers":{"a":1}}`, status: 400, code: "bad_json"},
		{name: "a result is kept verbatim", outcome: map[string]any{"kind": "response", "http_status": 200, "result": `{"content": [ ]}`},
			status: 200, want: ledger.StatusSucceeded,
			check: func(t *testing.T, row ledger.Row) {
				if row.Result != `{"content": [ ]}` {
					t.Errorf("result: got %q", row.Result)
				}
			}},
		{name: "a result that is not JSON", outcome: map[string]any{"kind": "response", "http_status": 200, "result": "sent"},
			status: 400, code: "invalid_input"},
		{name: "a result larger than 64 KiB", outcome: map[string]any{"kind": "response", "http_status": 200,
			"result": `"` + strings.Repeat("r", ledger.MaxResultLen) + `"`}, status: 400, code: "invalid_input"},
		{name: "a result with a timeout", outcome: map[string]any{"kind": "timeout", "result": `{}`}, status: 400, code: "invalid_input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
			rec := f.do(http.MethodPost, "/v1/claims/"+key+"/outcome", tokenAcme, tc.outcome)
			if tc.status != http.StatusOK {
				wantError(t, rec, tc.status, tc.code)
				row := decode[rowResp](t, f.do(http.MethodGet, "/v1/claims/"+key, tokenAcme, nil)).Row
				if row.Status != ledger.StatusPending || row.LastHTTPStatus != 0 {
					t.Errorf("a refused outcome changed the row: %s %d", row.Status, row.LastHTTPStatus)
				}
				return
			}
			wantStatus(t, rec, http.StatusOK)
			row := decode[rowResp](t, rec).Row
			if row.Status != tc.want {
				t.Fatalf("status: got %s, want %s", row.Status, tc.want)
			}
			if tc.check != nil {
				tc.check(t, row)
			}
		})
	}
}

func TestForeignTenantIsNotFound(t *testing.T) {
	f := newFixture(t)
	key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
	tests := []struct {
		name, method, target string
		body                 any
	}{
		{name: "get", method: http.MethodGet, target: "/v1/claims/" + key},
		{name: "outcome", method: http.MethodPost, target: "/v1/claims/" + key + "/outcome", body: okOutcome},
		{name: "compensation", method: http.MethodPost, target: "/v1/claims/" + key + "/compensations", body: map[string]any{"action": "refund"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, f.do(tc.method, tc.target, tokenGlobex, tc.body), http.StatusNotFound, "not_found")
		})
	}
	t.Run("list", func(t *testing.T) {
		page := decode[listResp](t, f.do(http.MethodGet, "/v1/claims", tokenGlobex, nil))
		if len(page.Rows) != 0 {
			t.Fatalf("globex lists %d of acme's rows", len(page.Rows))
		}
	})
	t.Run("the row is untouched", func(t *testing.T) {
		row := decode[rowResp](t, f.do(http.MethodGet, "/v1/claims/"+key, tokenAcme, nil)).Row
		if row.Status != ledger.StatusPending {
			t.Fatalf("status: got %s, want pending", row.Status)
		}
	})
}

func TestGet(t *testing.T) {
	f := newFixture(t)
	minted := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
	const business = "cart/42?x=%#1"
	f.mustClaim(tokenAcme, newClaim("run_2").with("key", business), http.StatusCreated)
	tests := []struct {
		name, target, token string
		status              int
		code                string
		key                 string
	}{
		{name: "minted key", target: "/v1/claims/" + minted, token: tokenAcme, status: 200, key: minted},
		{name: "escaped business key", target: "/v1/claims/" + escape(business), token: tokenAcme, status: 200, key: business},
		{name: "tenant naming itself", target: "/v1/claims/" + minted + "?tenant=acme", token: tokenAcme, status: 200, key: minted},
		{name: "tenant naming another tenant", target: "/v1/claims/" + minted + "?tenant=globex", token: tokenAcme, status: 403, code: "forbidden"},
		{name: "admin naming the tenant", target: "/v1/claims/" + minted + "?tenant=acme", token: tokenAdmin, status: 200, key: minted},
		{name: "admin naming no tenant", target: "/v1/claims/" + minted, token: tokenAdmin, status: 400, code: "invalid_input"},
		{name: "admin naming the wrong tenant", target: "/v1/claims/" + minted + "?tenant=globex", token: tokenAdmin, status: 404, code: "not_found"},
		{name: "unknown key", target: "/v1/claims/nope", token: tokenAcme, status: 404, code: "not_found"},
		{name: "key too long", target: "/v1/claims/" + strings.Repeat("k", 256), token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "key with a space", target: "/v1/claims/a%20b", token: tokenAcme, status: 400, code: "invalid_input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(http.MethodGet, tc.target, tc.token, nil)
			if tc.status != http.StatusOK {
				wantError(t, rec, tc.status, tc.code)
				return
			}
			wantStatus(t, rec, http.StatusOK)
			if got := decode[rowResp](t, rec).Row; got.Key != tc.key || got.Tenant != "acme" {
				t.Fatalf("row: got %s/%s, want acme/%s", got.Tenant, got.Key, tc.key)
			}
		})
	}
}

func TestList(t *testing.T) {
	f := newFixture(t)
	// Five rows, a second apart: run_a has three, run_b two; the newest of
	// run_a succeeds.
	var keys []string // oldest first
	for i, run := range []string{"run_a", "run_b", "run_a", "run_b", "run_a"} {
		body := newClaim(run).with("intent", map[string]any{"n": i})
		keys = append(keys, f.mustClaim(tokenAcme, body, http.StatusCreated).Row.Key)
		f.clock.Advance(time.Second)
	}
	f.report(tokenAcme, keys[4], okOutcome)
	f.mustClaim(tokenGlobex, newClaim("run_a"), http.StatusCreated)

	newestFirst := func(idx ...int) []string {
		out := make([]string, len(idx))
		for i, j := range idx {
			out[i] = keys[j]
		}
		return out
	}
	tests := []struct {
		name  string
		query url.Values
		token string
		want  []string
	}{
		{name: "everything", query: url.Values{}, token: tokenAcme, want: newestFirst(4, 3, 2, 1, 0)},
		{name: "pages of two", query: url.Values{"limit": {"2"}}, token: tokenAcme, want: newestFirst(4, 3, 2, 1, 0)},
		{name: "by status", query: url.Values{"status": {"succeeded"}}, token: tokenAcme, want: newestFirst(4)},
		{name: "pending only", query: url.Values{"status": {"pending"}, "limit": {"1"}}, token: tokenAcme, want: newestFirst(3, 2, 1, 0)},
		{name: "by run", query: url.Values{"run_id": {"run_b"}}, token: tokenAcme, want: newestFirst(3, 1)},
		{name: "by run and status", query: url.Values{"run_id": {"run_a"}, "status": {"pending"}, "limit": {"1"}}, token: tokenAcme, want: newestFirst(2, 0)},
		{name: "admin reads a tenant", query: url.Values{"tenant": {"acme"}, "limit": {"3"}}, token: tokenAdmin, want: newestFirst(4, 3, 2, 1, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			q := tc.query
			limit := 0
			if l := q.Get("limit"); l != "" {
				limit = int(l[0] - '0')
			}
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatal("more than 10 pages")
				}
				rec := f.do(http.MethodGet, "/v1/claims?"+q.Encode(), tc.token, nil)
				wantStatus(t, rec, http.StatusOK)
				page := decode[listResp](t, rec)
				if limit > 0 && len(page.Rows) > limit {
					t.Fatalf("page of %d rows, limit %d", len(page.Rows), limit)
				}
				for _, r := range page.Rows {
					got = append(got, r.Key)
				}
				if page.NextCursor == "" {
					break
				}
				q.Set("cursor", page.NextCursor)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("keys:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestListBadQuery(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, query, token string
		status             int
		code               string
	}{
		{name: "limit zero", query: "limit=0", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "limit too large", query: "limit=501", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "limit not a number", query: "limit=ten", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "unknown status", query: "status=done", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "bad run_id", query: "run_id=a.b", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "bad cursor", query: "cursor=%21%21", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "unknown parameter", query: "stauts=pending", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "repeated parameter", query: "status=pending&status=unknown", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "tenant token naming another tenant", query: "tenant=globex", token: tokenAcme, status: 403, code: "forbidden"},
		{name: "admin without a tenant", query: "", token: tokenAdmin, status: 400, code: "invalid_input"},
		{name: "admin with a bad tenant", query: "tenant=a.b", token: tokenAdmin, status: 400, code: "invalid_input"},
		// Pairs the standard parser drops silently would otherwise list
		// every row.
		{name: "semicolon after a filter", query: "status=failed_poison;", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "bare percent", query: "run_id=run_1%", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "bad escape", query: "run_id=run_1%zz", token: tokenAcme, status: 400, code: "invalid_input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, f.do(http.MethodGet, "/v1/claims?"+tc.query, tc.token, nil), tc.status, tc.code)
		})
	}
}

// TestStaleOutcomeKeepsTheRetrysLease: attempt 1 times out, a retry takes
// the key (attempt 2), then a duplicate of attempt 1's report arrives. With
// its attempt number it leaves attempt 2's lease alone, so the next claim
// waits; without one it ends the lease as before.
func TestStaleOutcomeKeepsTheRetrysLease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stale   map[string]any
		status  int
		attempt int // of the row after the next claim
	}{
		{"with attempt 1", map[string]any{"kind": "timeout", "attempt": 1}, http.StatusConflict, 2},
		{"without an attempt", map[string]any{"kind": "timeout"}, http.StatusOK, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
			f.report(tokenAcme, key, map[string]any{"kind": "timeout", "attempt": 1})
			retry := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK)
			if retry.Decision != ledger.DecisionRetrySameKey || retry.Row.Attempt != 2 {
				t.Fatalf("retry: %s attempt %d", retry.Decision, retry.Row.Attempt)
			}
			f.report(tokenAcme, key, tc.stale)
			rec := f.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1"))
			wantStatus(t, rec, tc.status)
			if got := decode[claimResp](t, rec).Row.Attempt; got != tc.attempt {
				t.Fatalf("attempt after the next claim: %d, want %d", got, tc.attempt)
			}
		})
	}
	t.Run("a negative attempt is refused", func(t *testing.T) {
		f := newFixture(t)
		key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
		wantError(t, f.do(http.MethodPost, "/v1/claims/"+key+"/outcome", tokenAcme, map[string]any{"kind": "timeout", "attempt": -1}),
			http.StatusBadRequest, "invalid_input")
	})
}
