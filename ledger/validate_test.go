package ledger_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// t0 is the fixed clock of these tests.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// validClaimRequest is a request NewClaim accepts; cases change one field.
func validClaimRequest() ledger.ClaimRequest {
	return ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", ToolCallID: "call_01",
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent:       json.RawMessage(vecIntent),
		Request:      &ledger.Request{Method: "POST", Path: "/v1/payment_intents", ContentType: "application/x-www-form-urlencoded", Body: "amount=1050&currency=usd"},
		Expect:       &ledger.Expect{Amount: 1050, Currency: "USD"},
		ReplayWindow: 24 * time.Hour,
	}
}

func TestValidateIdentifiers(t *testing.T) {
	type check struct {
		name string
		fn   func(string) error
		want error
	}
	tenant := check{"tenant", ledger.ValidateTenant, ledger.ErrInvalidTenant}
	runID := check{"run_id", ledger.ValidateRunID, ledger.ErrInvalidRunID}
	tool := check{"tool", ledger.ValidateTool, ledger.ErrInvalidTool}
	action := check{"action", ledger.ValidateAction, ledger.ErrInvalidAction}
	key := check{"key", ledger.ValidateKey, ledger.ErrInvalidKey}
	vendor := check{"vendor", ledger.ValidateVendor, ledger.ErrInvalidVendor}

	tests := []struct {
		name  string
		value string
		ok    []check
		bad   []check
	}{
		{name: "simple", value: "abc", ok: []check{tenant, runID, tool, action, key, vendor}},
		{name: "empty", value: "", bad: []check{tenant, runID, tool, action, key, vendor}},
		{name: "digits underscore dash", value: "a_1-B", ok: []check{tenant, runID, tool, action, key}, bad: []check{vendor}},
		{name: "dot", value: "stripe.charge", ok: []check{tool, action, key}, bad: []check{tenant, runID, vendor}},
		{name: "NATS wildcard star", value: "a*", ok: []check{key}, bad: []check{tenant, runID, tool, action, vendor}},
		{name: "NATS wildcard gt", value: "a>", ok: []check{key}, bad: []check{tenant, runID, tool, action, vendor}},
		{name: "space", value: "a b", bad: []check{tenant, runID, tool, action, key, vendor}},
		{name: "tab", value: "a\tb", bad: []check{tenant, runID, tool, action, key, vendor}},
		{name: "DEL", value: "a\x7f", bad: []check{tenant, runID, tool, action, key, vendor}},
		{name: "non-ASCII", value: "café", bad: []check{tenant, runID, tool, action, key, vendor}},
		{name: "NUL", value: "a\x00", bad: []check{tenant, runID, tool, action, key, vendor}},
		{name: "unit separator", value: "a\x1fb", bad: []check{tenant, runID, tool, action, key, vendor}},
		{name: "upper case", value: "Stripe", ok: []check{tenant, runID, tool, action, key}, bad: []check{vendor}},
		{name: "printable punctuation", value: "cart:42/x?y=z", ok: []check{key}, bad: []check{tenant, runID, tool, action, vendor}},
		{name: "64 characters", value: strings.Repeat("a", 64), ok: []check{tenant, runID, tool, action, key, vendor}},
		{name: "65 characters", value: strings.Repeat("a", 65), ok: []check{tenant, runID, tool, action, key}, bad: []check{vendor}},
		{name: "128 characters", value: strings.Repeat("a", 128), ok: []check{tenant, runID, tool, action, key}, bad: []check{vendor}},
		{name: "129 characters", value: strings.Repeat("a", 129), ok: []check{key}, bad: []check{tenant, runID, tool, action, vendor}},
		{name: "255 characters", value: strings.Repeat("k", 255), ok: []check{key}, bad: []check{tenant, runID, tool, action, vendor}},
		{name: "256 characters", value: strings.Repeat("k", 256), bad: []check{tenant, runID, tool, action, key, vendor}},
	}
	for _, tt := range tests {
		for _, c := range tt.ok {
			t.Run(tt.name+"/"+c.name+" accepts", func(t *testing.T) {
				if err := c.fn(tt.value); err != nil {
					t.Fatalf("validate %s %q = %v, want nil", c.name, tt.value, err)
				}
			})
		}
		for _, c := range tt.bad {
			t.Run(tt.name+"/"+c.name+" rejects", func(t *testing.T) {
				err := c.fn(tt.value)
				if !errors.Is(err, c.want) {
					t.Fatalf("validate %s %q = %v, want %v", c.name, tt.value, err, c.want)
				}
				if !errors.Is(err, ledger.ErrInvalid) {
					t.Fatalf("errors.Is(%v, ErrInvalid) = false", err)
				}
			})
		}
	}
}

func TestNewClaimRejects(t *testing.T) {
	tests := []struct {
		name   string
		change func(*ledger.ClaimRequest)
		want   error
	}{
		{name: "tenant empty", change: func(r *ledger.ClaimRequest) { r.Tenant = "" }, want: ledger.ErrInvalidTenant},
		{name: "tenant with dot", change: func(r *ledger.ClaimRequest) { r.Tenant = "a.b" }, want: ledger.ErrInvalidTenant},
		{name: "run_id empty", change: func(r *ledger.ClaimRequest) { r.RunID = "" }, want: ledger.ErrInvalidRunID},
		{name: "run_id with dot", change: func(r *ledger.ClaimRequest) { r.RunID = "run.1" }, want: ledger.ErrInvalidRunID},
		{name: "run_id 129", change: func(r *ledger.ClaimRequest) { r.RunID = strings.Repeat("r", 129) }, want: ledger.ErrInvalidRunID},
		{name: "tool empty", change: func(r *ledger.ClaimRequest) { r.Tool = "" }, want: ledger.ErrInvalidTool},
		{name: "tool with slash", change: func(r *ledger.ClaimRequest) { r.Tool = "stripe/charge" }, want: ledger.ErrInvalidTool},
		{name: "tool 129", change: func(r *ledger.ClaimRequest) { r.Tool = strings.Repeat("t", 129) }, want: ledger.ErrInvalidTool},
		{name: "tool_call_id with space", change: func(r *ledger.ClaimRequest) { r.ToolCallID = "call 1" }, want: ledger.ErrInvalidToolCallID},
		{name: "tool_call_id non-ASCII", change: func(r *ledger.ClaimRequest) { r.ToolCallID = "callé" }, want: ledger.ErrInvalidToolCallID},
		{name: "tool_call_id 256", change: func(r *ledger.ClaimRequest) { r.ToolCallID = strings.Repeat("c", 256) }, want: ledger.ErrInvalidToolCallID},
		{name: "vendor empty", change: func(r *ledger.ClaimRequest) { r.Vendor = "" }, want: ledger.ErrInvalidVendor},
		{name: "vendor upper case", change: func(r *ledger.ClaimRequest) { r.Vendor = "Stripe" }, want: ledger.ErrInvalidVendor},
		{name: "vendor 65", change: func(r *ledger.ClaimRequest) { r.Vendor = strings.Repeat("v", 65) }, want: ledger.ErrInvalidVendor},
		{name: "tool_class empty", change: func(r *ledger.ClaimRequest) { r.ToolClass = "" }, want: ledger.ErrInvalidToolClass},
		{name: "tool_class unknown", change: func(r *ledger.ClaimRequest) { r.ToolClass = "write_maybe" }, want: ledger.ErrInvalidToolClass},
		{name: "key with space", change: func(r *ledger.ClaimRequest) { r.Key = "cart 42" }, want: ledger.ErrInvalidKey},
		{name: "key 256", change: func(r *ledger.ClaimRequest) { r.Key = strings.Repeat("k", 256) }, want: ledger.ErrInvalidKey},
		{name: "key non-ASCII", change: func(r *ledger.ClaimRequest) { r.Key = "panier-é" }, want: ledger.ErrInvalidKey},
		{name: "intent missing", change: func(r *ledger.ClaimRequest) { r.Intent = nil }, want: ledger.ErrInvalidIntent},
		{name: "intent array", change: func(r *ledger.ClaimRequest) { r.Intent = json.RawMessage(`[{"a":1}]`) }, want: ledger.ErrInvalidIntent},
		{name: "intent string", change: func(r *ledger.ClaimRequest) { r.Intent = json.RawMessage(`"charge"`) }, want: ledger.ErrInvalidIntent},
		{name: "intent null", change: func(r *ledger.ClaimRequest) { r.Intent = json.RawMessage(`null`) }, want: ledger.ErrInvalidIntent},
		{name: "intent duplicate key", change: func(r *ledger.ClaimRequest) { r.Intent = json.RawMessage(`{"a":1,"a":2}`) }, want: ledger.ErrInvalidIntent},
		{name: "intent trailing data", change: func(r *ledger.ClaimRequest) { r.Intent = json.RawMessage(`{"a":1}{}`) }, want: ledger.ErrInvalidIntent},
		{name: "intent invalid JSON", change: func(r *ledger.ClaimRequest) { r.Intent = json.RawMessage(`{"a":}`) }, want: ledger.ErrInvalidIntent},
		{name: "request method GET", change: func(r *ledger.ClaimRequest) { r.Request.Method = "GET" }, want: ledger.ErrInvalidRequest},
		{name: "request method lower case", change: func(r *ledger.ClaimRequest) { r.Request.Method = "post" }, want: ledger.ErrInvalidRequest},
		{name: "request path relative", change: func(r *ledger.ClaimRequest) { r.Request.Path = "v1/charges" }, want: ledger.ErrInvalidRequest},
		{name: "request path empty", change: func(r *ledger.ClaimRequest) { r.Request.Path = "" }, want: ledger.ErrInvalidRequest},
		{name: "request path with space", change: func(r *ledger.ClaimRequest) { r.Request.Path = "/v1/a b" }, want: ledger.ErrInvalidRequest},
		{name: "request path 2049", change: func(r *ledger.ClaimRequest) { r.Request.Path = "/" + strings.Repeat("p", 2048) }, want: ledger.ErrInvalidRequest},
		{name: "request content type header injection", change: func(r *ledger.ClaimRequest) { r.Request.ContentType = "text/plain\r\nX-Evil: 1" }, want: ledger.ErrInvalidRequest},
		{name: "request content type 256", change: func(r *ledger.ClaimRequest) { r.Request.ContentType = strings.Repeat("c", 256) }, want: ledger.ErrInvalidRequest},
		{name: "request body too large", change: func(r *ledger.ClaimRequest) {
			r.Request.Body = strings.Repeat("b", ledger.MaxRequestBody+1)
		}, want: ledger.ErrInvalidRequest},
		{name: "request body not UTF-8", change: func(r *ledger.ClaimRequest) { r.Request.Body = "amount=\xff" }, want: ledger.ErrInvalidRequest},
		{name: "negative replay window", change: func(r *ledger.ClaimRequest) { r.ReplayWindow = -time.Second }, want: ledger.ErrInvalidRequest},
		{name: "expect negative amount", change: func(r *ledger.ClaimRequest) { r.Expect.Amount = -1 }, want: ledger.ErrInvalidExpect},
		{name: "expect currency 2 letters", change: func(r *ledger.ClaimRequest) { r.Expect.Currency = "us" }, want: ledger.ErrInvalidExpect},
		{name: "expect currency 4 letters", change: func(r *ledger.ClaimRequest) { r.Expect.Currency = "usdt" }, want: ledger.ErrInvalidExpect},
		{name: "expect currency digits", change: func(r *ledger.ClaimRequest) { r.Expect.Currency = "u5d" }, want: ledger.ErrInvalidExpect},
		{name: "expect currency empty", change: func(r *ledger.ClaimRequest) { r.Expect.Currency = "" }, want: ledger.ErrInvalidExpect},
		{name: "expect currency non-ASCII", change: func(r *ledger.ClaimRequest) { r.Expect.Currency = "€" }, want: ledger.ErrInvalidExpect},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := validClaimRequest()
			tt.change(&req)
			c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0)
			if !errors.Is(err, tt.want) {
				t.Fatalf("NewClaim = %+v, %v; want %v", c, err, tt.want)
			}
			if !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("errors.Is(%v, ErrInvalid) = false", err)
			}
		})
	}
}

func TestNewClaimAcceptsBounds(t *testing.T) {
	tests := []struct {
		name   string
		change func(*ledger.ClaimRequest)
	}{
		{name: "as is", change: func(*ledger.ClaimRequest) {}},
		{name: "no tool_call_id", change: func(r *ledger.ClaimRequest) { r.ToolCallID = "" }},
		{name: "tool_call_id 255", change: func(r *ledger.ClaimRequest) { r.ToolCallID = strings.Repeat("c", 255) }},
		{name: "key 255", change: func(r *ledger.ClaimRequest) { r.Key = strings.Repeat("k", 255) }},
		{name: "key 1", change: func(r *ledger.ClaimRequest) { r.Key = "k" }},
		{name: "run_id 128", change: func(r *ledger.ClaimRequest) { r.RunID = strings.Repeat("r", 128) }},
		{name: "vendor 64", change: func(r *ledger.ClaimRequest) { r.Vendor = strings.Repeat("v", 64) }},
		{name: "every method", change: func(r *ledger.ClaimRequest) { r.Request.Method = "DELETE" }},
		{name: "no request", change: func(r *ledger.ClaimRequest) { r.Request = nil }},
		{name: "request without body", change: func(r *ledger.ClaimRequest) { r.Request.Body = "" }},
		{name: "request body at the limit", change: func(r *ledger.ClaimRequest) {
			r.Request.Body = strings.Repeat("b", ledger.MaxRequestBody)
		}},
		{name: "request path 2048", change: func(r *ledger.ClaimRequest) { r.Request.Path = "/" + strings.Repeat("p", 2047) }},
		{name: "no expect", change: func(r *ledger.ClaimRequest) { r.Expect = nil }},
		{name: "expect zero amount", change: func(r *ledger.ClaimRequest) { r.Expect.Amount = 0 }},
		{name: "no replay window", change: func(r *ledger.ClaimRequest) { r.ReplayWindow = 0 }},
		{name: "intent 64 deep", change: func(r *ledger.ClaimRequest) {
			r.Intent = json.RawMessage(`{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := validClaimRequest()
			tt.change(&req)
			c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0)
			if err != nil {
				t.Fatalf("NewClaim: %v", err)
			}
			// A valid claim's row must survive the stored JSON form.
			b, err := json.Marshal(c.Row)
			if err != nil {
				t.Fatalf("json.Marshal(row): %v", err)
			}
			var back ledger.Row
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("json.Unmarshal(row): %v", err)
			}
		})
	}
}

func TestOutcomeValidate(t *testing.T) {
	manyHeaders := map[string]string{}
	for i := 0; i < 65; i++ {
		manyHeaders[strings.Repeat("h", i+1)] = "v"
	}
	tests := []struct {
		name    string
		o       ledger.Outcome
		wantErr bool
	}{
		{name: "response 200", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1"}},
		{name: "response 100", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 100}},
		{name: "response 599", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 599}},
		{name: "response 99", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 99}, wantErr: true},
		{name: "response 600", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 600}, wantErr: true},
		{name: "response without status", o: ledger.Outcome{Kind: ledger.OutcomeResponse}, wantErr: true},
		{name: "timeout", o: ledger.Outcome{Kind: ledger.OutcomeTimeout}},
		{name: "timeout with status", o: ledger.Outcome{Kind: ledger.OutcomeTimeout, HTTPStatus: 504}, wantErr: true},
		{name: "network error", o: ledger.Outcome{Kind: ledger.OutcomeNetworkError}},
		{name: "network error with status", o: ledger.Outcome{Kind: ledger.OutcomeNetworkError, HTTPStatus: 500}, wantErr: true},
		{name: "empty kind", o: ledger.Outcome{HTTPStatus: 200}, wantErr: true},
		{name: "unknown kind", o: ledger.Outcome{Kind: "cancelled"}, wantErr: true},
		{name: "receipt 255", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: strings.Repeat("r", 255)}},
		{name: "receipt 256", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: strings.Repeat("r", 256)}, wantErr: true},
		{name: "receipt with space", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi 1"}, wantErr: true},
		{name: "64 headers", o: ledger.Outcome{Kind: ledger.OutcomeTimeout, Headers: func() map[string]string {
			m := map[string]string{}
			for i := 0; i < 64; i++ {
				m[strings.Repeat("h", i+1)] = "v"
			}
			return m
		}()}},
		{name: "65 headers", o: ledger.Outcome{Kind: ledger.OutcomeTimeout, Headers: manyHeaders}, wantErr: true},
		{name: "one header in two spellings", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 429,
			Headers: map[string]string{"Stripe-Should-Retry": "true", "stripe-should-retry": "false"}}, wantErr: true},
		{name: "result", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: `{"content":[]}`}},
		{name: "result of the largest size", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200,
			Result: `"` + strings.Repeat("r", ledger.MaxResultLen-2) + `"`}},
		{name: "result one byte too large", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200,
			Result: `"` + strings.Repeat("r", ledger.MaxResultLen-1) + `"`}, wantErr: true},
		{name: "result not JSON", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: "sent"}, wantErr: true},
		{name: "result with a raw NUL", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: "\"a\x00\""}, wantErr: true},
		{name: "result with an escaped NUL", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: `"a\u0000"`}},
		{name: "result not UTF-8", o: ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: "\"\xff\""}, wantErr: true},
		{name: "timeout with result", o: ledger.Outcome{Kind: ledger.OutcomeTimeout, Result: `{}`}, wantErr: true},
		{name: "network error with result", o: ledger.Outcome{Kind: ledger.OutcomeNetworkError, Result: `{}`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ledger.ErrInvalidOutcome) {
				t.Fatalf("Validate = %v, want ErrInvalidOutcome", err)
			}
		})
	}
}

func TestEvidenceValidate(t *testing.T) {
	tests := []struct {
		name string
		ev   ledger.Evidence
		want error
	}{
		{name: "webhook success", ev: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1"}},
		{name: "webhook progress", ev: ledger.Evidence{Source: ledger.SourceWebhook}},
		{name: "runtime unknown", ev: ledger.Evidence{Source: ledger.SourceRuntime, Status: ledger.StatusUnknown}},
		{name: "resolver failed", ev: ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusFailedPoison}},
		{name: "human succeeded", ev: ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Actor: "ops@example.com", Note: "checked the dashboard"}},
		{name: "human failed", ev: ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusFailedPoison}},
		{name: "no source", ev: ledger.Evidence{Status: ledger.StatusSucceeded}, want: ledger.ErrInvalidEvidence},
		{name: "unknown source", ev: ledger.Evidence{Source: "email", Status: ledger.StatusSucceeded}, want: ledger.ErrInvalidEvidence},
		{name: "unknown status", ev: ledger.Evidence{Source: ledger.SourceWebhook, Status: "done"}, want: ledger.ErrInvalidStatus},
		{name: "back to pending", ev: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusPending}, want: ledger.ErrInvalidStatus},
		{name: "human unknown", ev: ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusUnknown}, want: ledger.ErrInvalidStatus},
		{name: "human progress", ev: ledger.Evidence{Source: ledger.SourceHuman}, want: ledger.ErrInvalidStatus},
		{name: "receipt 256", ev: ledger.Evidence{Source: ledger.SourceWebhook, ReceiptID: strings.Repeat("r", 256)}, want: ledger.ErrInvalidEvidence},
		{name: "receipt with newline", ev: ledger.Evidence{Source: ledger.SourceWebhook, ReceiptID: "ch_1\n"}, want: ledger.ErrInvalidEvidence},
		{name: "vendor event id 256", ev: ledger.Evidence{Source: ledger.SourceWebhook, VendorEventID: strings.Repeat("e", 256)}, want: ledger.ErrInvalidEvidence},
		{name: "actor 256", ev: ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Actor: strings.Repeat("a", 256)}, want: ledger.ErrInvalidEvidence},
		{name: "note 1024", ev: ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Note: strings.Repeat("n", 1024)}},
		{name: "note 1025", ev: ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Note: strings.Repeat("n", 1025)}, want: ledger.ErrInvalidEvidence},
		{name: "runtime result", ev: ledger.Evidence{Source: ledger.SourceRuntime, Status: ledger.StatusSucceeded, Result: `{"ok":true}`}},
		{name: "webhook result", ev: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, Result: `{"ok":true}`}, want: ledger.ErrInvalidEvidence},
		{name: "human result", ev: ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Result: `{"ok":true}`}, want: ledger.ErrInvalidEvidence},
		{name: "runtime result too large", ev: ledger.Evidence{Source: ledger.SourceRuntime, Status: ledger.StatusSucceeded,
			Result: `"` + strings.Repeat("r", ledger.MaxResultLen) + `"`}, want: ledger.ErrInvalidEvidence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.ev.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
			if !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("errors.Is(%v, ErrInvalid) = false", err)
			}
		})
	}
}

func TestListQueryValidate(t *testing.T) {
	tests := []struct {
		name      string
		q         ledger.ListQuery
		want      error
		wantLimit int
	}{
		{name: "defaults", q: ledger.ListQuery{Tenant: "acme"}, wantLimit: ledger.DefaultListLimit},
		{name: "all filters", q: ledger.ListQuery{Tenant: "acme", Status: ledger.StatusUnknown, RunID: "run-1", Limit: 7, Cursor: "abc"}, wantLimit: 7},
		{name: "limit 1", q: ledger.ListQuery{Tenant: "acme", Limit: 1}, wantLimit: 1},
		{name: "limit max", q: ledger.ListQuery{Tenant: "acme", Limit: ledger.MaxListLimit}, wantLimit: ledger.MaxListLimit},
		{name: "limit over max", q: ledger.ListQuery{Tenant: "acme", Limit: ledger.MaxListLimit + 1}, want: ledger.ErrInvalidListQuery},
		{name: "negative limit", q: ledger.ListQuery{Tenant: "acme", Limit: -1}, want: ledger.ErrInvalidListQuery},
		{name: "unknown status", q: ledger.ListQuery{Tenant: "acme", Status: "done"}, want: ledger.ErrInvalidListQuery},
		{name: "bad run_id", q: ledger.ListQuery{Tenant: "acme", RunID: "run 1"}, want: ledger.ErrInvalidListQuery},
		{name: "cursor 1024", q: ledger.ListQuery{Tenant: "acme", Cursor: strings.Repeat("c", 1024)}, wantLimit: ledger.DefaultListLimit},
		{name: "cursor 1025", q: ledger.ListQuery{Tenant: "acme", Cursor: strings.Repeat("c", 1025)}, want: ledger.ErrInvalidListQuery},
		{name: "no tenant", q: ledger.ListQuery{}, want: ledger.ErrInvalidTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.q
			err := q.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				if q.Limit != tt.wantLimit {
					t.Fatalf("Limit after Validate = %d, want %d", q.Limit, tt.wantLimit)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDeliveryValidate(t *testing.T) {
	valid := func() ledger.Delivery {
		return ledger.Delivery{
			Tenant: "acme", Vendor: "stripe", EventID: "evt_1", LocalID: "rl_38af6fb5b479712bbaf3bf71cf2e82f3",
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1"},
			At:       t0,
		}
	}
	tests := []struct {
		name   string
		change func(*ledger.Delivery)
		want   error
	}{
		{name: "valid", change: func(*ledger.Delivery) {}},
		{name: "ignored, no evidence", change: func(d *ledger.Delivery) { d.Ignore, d.Evidence = true, ledger.Evidence{} }},
		{name: "no local id, echoed key", change: func(d *ledger.Delivery) { d.LocalID, d.IdempotencyKey = "", vecKeyAcme }},
		{name: "bad tenant", change: func(d *ledger.Delivery) { d.Tenant = "" }, want: ledger.ErrInvalidDelivery},
		{name: "bad vendor", change: func(d *ledger.Delivery) { d.Vendor = "Stripe" }, want: ledger.ErrInvalidDelivery},
		{name: "no event id", change: func(d *ledger.Delivery) { d.EventID = "" }, want: ledger.ErrInvalidDelivery},
		{name: "event id 256", change: func(d *ledger.Delivery) { d.EventID = strings.Repeat("e", 256) }, want: ledger.ErrInvalidDelivery},
		{name: "event id with space", change: func(d *ledger.Delivery) { d.EventID = "evt 1" }, want: ledger.ErrInvalidDelivery},
		{name: "local id with newline", change: func(d *ledger.Delivery) { d.LocalID = "rl_1\n" }, want: ledger.ErrInvalidDelivery},
		{name: "idempotency key 256", change: func(d *ledger.Delivery) { d.IdempotencyKey = strings.Repeat("k", 256) }, want: ledger.ErrInvalidDelivery},
		{name: "evidence from runtime", change: func(d *ledger.Delivery) { d.Evidence.Source = ledger.SourceRuntime }, want: ledger.ErrInvalidDelivery},
		{name: "evidence back to pending", change: func(d *ledger.Delivery) { d.Evidence.Status = ledger.StatusPending }, want: ledger.ErrInvalidStatus},
		{name: "ignored but bad event id", change: func(d *ledger.Delivery) { d.Ignore, d.EventID = true, "" }, want: ledger.ErrInvalidDelivery},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := valid()
			tt.change(&d)
			err := d.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestErrInvalid: every invalid-input error, detailed or wrapped, matches
// ErrInvalid; the conflicts with stored state do not.
func TestErrInvalid(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{ledger.ErrInvalidRunID, true},
		{ledger.ErrInvalidDelivery, true},
		{ledger.ErrInvalidStatus, true},
		{ledger.ErrInvalidAction, true},
		{ledger.ErrInvalidToolClass, true},
		{ledger.ErrInvalidFreeze, true},
		{errors.Join(errors.New("x"), ledger.ErrInvalidKey), true},
		{ledger.ErrInvalidOutcome.With("attempt must not be negative"), true},
		{fmt.Errorf("report: %w", ledger.ErrInvalidListQuery.With("cursor")), true},
		{&ledger.InvalidError{Field: "wait"}, true},
		{ledger.ErrInvalidTransition, false},
		{ledger.ErrFingerprintMismatch, false},
		{ledger.ErrNotFound, false},
		{ledger.ErrUnavailable, false},
		{ledger.ErrCompensationPending, false},
		{nil, false},
	}
	for _, tt := range tests {
		name := "nil"
		if tt.err != nil {
			name = tt.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			if got := errors.Is(tt.err, ledger.ErrInvalid); got != tt.want {
				t.Fatalf("errors.Is(%v, ErrInvalid) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestInvalidErrorWith: a detailed error keeps its sentinel's field and
// text, still matches the sentinel, and is what errors.As finds under a
// store's wrapping.
func TestInvalidErrorWith(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		sentinel  error
		wantField string
		wantText  string
	}{
		{name: "sentinel with a reason", err: ledger.ErrInvalidRunID, sentinel: ledger.ErrInvalidRunID,
			wantField: "run_id", wantText: "invalid run_id: want 1-128 of [A-Za-z0-9_-]"},
		{name: "sentinel without a reason", err: ledger.ErrInvalidListQuery, sentinel: ledger.ErrInvalidListQuery,
			wantField: "list query", wantText: "invalid list query"},
		{name: "detail", err: ledger.ErrInvalidListQuery.With("status %q", "done"), sentinel: ledger.ErrInvalidListQuery,
			wantField: "list query", wantText: `invalid list query: status "done"`},
		{name: "detail after a reason", err: ledger.ErrInvalidIntent.With("trailing data"), sentinel: ledger.ErrInvalidIntent,
			wantField: "intent", wantText: "invalid intent: want a JSON object: trailing data"},
		{name: "detail of a detail", err: ledger.ErrInvalidFreeze.With("tenant").With("too long"), sentinel: ledger.ErrInvalidFreeze,
			wantField: "freeze", wantText: "invalid freeze: tenant: too long"},
		{name: "under a store's wrapping", err: fmt.Errorf("bolt /var/lib/x.db: claim: %w", ledger.ErrInvalidKey), sentinel: ledger.ErrInvalidKey,
			wantField: "key", wantText: "invalid key: want 1-255 printable ASCII characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, tt.sentinel) || !errors.Is(tt.err, ledger.ErrInvalid) {
				t.Fatalf("%v matches %v: %v, ErrInvalid: %v; want both", tt.err, tt.sentinel,
					errors.Is(tt.err, tt.sentinel), errors.Is(tt.err, ledger.ErrInvalid))
			}
			var ie *ledger.InvalidError
			if !errors.As(tt.err, &ie) {
				t.Fatalf("errors.As(%v, *InvalidError) = false", tt.err)
			}
			if ie.Field != tt.wantField || ie.Error() != tt.wantText {
				t.Fatalf("InvalidError: field %q text %q, want %q %q", ie.Field, ie.Error(), tt.wantField, tt.wantText)
			}
		})
	}
	if errors.Is(ledger.ErrInvalidOutcome.With("x"), ledger.ErrInvalidEvidence) {
		t.Fatal("a detailed ErrInvalidOutcome matches ErrInvalidEvidence")
	}
}

// TestNULIsRefusedEverywhereItCouldBeStored: a NUL is valid UTF-8 and JSON,
// but PostgreSQL stores it neither in text nor in jsonb; every store refuses
// it up front as invalid input rather than one of them answering 503.
func TestNULIsRefusedEverywhereItCouldBeStored(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	req := ledger.ClaimRequest{
		Tenant: "acme", RunID: "r", Tool: "t", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(`{"a":1}`), Request: &ledger.Request{Method: "POST", Path: "/v1/x", Body: "a=1\x00"},
	}
	if _, err := ledger.NewClaim(req, ledger.DefaultPolicy(), at); !errors.Is(err, ledger.ErrInvalidRequest) {
		t.Errorf("request body with NUL: %v, want ErrInvalidRequest", err)
	}
	for _, ev := range []ledger.Evidence{
		{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Note: "seen\x00", Actor: "ops", At: at},
		{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Note: "seen", Actor: "o\x00ps", At: at},
		{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, Currency: "us\x00", At: at},
	} {
		if err := ev.Validate(); !errors.Is(err, ledger.ErrInvalidEvidence) {
			t.Errorf("evidence %+v: %v, want ErrInvalidEvidence", ev, err)
		}
	}
	f := ledger.Freeze{Tenant: "acme", Target: "t", Actor: "ops", Note: "incident\x00", At: at}
	if err := f.Validate(); !errors.Is(err, ledger.ErrInvalidFreeze) {
		t.Errorf("freeze note with NUL: %v, want ErrInvalidFreeze", err)
	}
}

func TestValidateTraceparent(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name  string
		value string
		ok    bool
	}{
		{name: "empty: not traced", value: "", ok: true},
		{name: "sampled", value: valid, ok: true},
		{name: "not sampled", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", ok: true},
		{name: "random flag", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", ok: true},
		{name: "upper case", value: strings.ToUpper(valid)},
		{name: "version ff", value: "ff" + valid[2:]},
		{name: "future version with more fields", value: "01" + valid[2:] + "-what-the-future-will-be-like"},
		{name: "zero trace id", value: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{name: "zero span id", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
		{name: "short trace id", value: "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"},
		{name: "non-hex", value: "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"},
		{name: "wrong separator", value: "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{name: "trailing data", value: valid + "-00"},
		{name: "oversized", value: valid + strings.Repeat("a", 8<<10)},
		{name: "NUL", value: valid[:54] + "\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ledger.ValidateTraceparent(tt.value)
			if got := err == nil; got != tt.ok {
				t.Fatalf("ValidateTraceparent(%q) = %v, want ok %v", tt.value, err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ledger.ErrInvalidTraceparent) || !errors.Is(err, ledger.ErrInvalid)) {
				t.Errorf("error %v does not match ErrInvalidTraceparent and ErrInvalid", err)
			}
		})
	}
}

// TestClaimKeepsTraceparent: a row a claim inserts keeps the claim's trace
// context, and every event of the row carries it; a bad one is refused
// before anything is stored.
func TestClaimKeepsTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := validClaimRequest()
	req.Traceparent = tp
	c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0)
	if err != nil {
		t.Fatal(err)
	}
	res, row, err := ledger.DecideClaim(nil, c, ledger.DefaultPolicy())
	if err != nil || row == nil {
		t.Fatalf("claim: %v %v", row, err)
	}
	if row.Traceparent != tp || res.Row.Traceparent != tp {
		t.Fatalf("row traceparent %q, result's %q, want %q", row.Traceparent, res.Row.Traceparent, tp)
	}
	ch, err := ledger.Apply(row, ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", At: t0.Add(time.Second)}, ledger.DefaultPolicy())
	if err != nil || ch.Event == nil {
		t.Fatalf("apply: %v %v", ch, err)
	}
	if got := ch.Event.Traceparent; got != tp {
		t.Errorf("event traceparent %q, want %q", got, tp)
	}

	req.Traceparent = "00-zz"
	if _, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0); !errors.Is(err, ledger.ErrInvalidTraceparent) {
		t.Errorf("bad traceparent: %v, want ErrInvalidTraceparent", err)
	}
}

// TestNewClaimReportsEveryProblem: a field left out reads "missing", and a
// body with several problems names them all, each still matching its
// sentinel and ErrInvalid.
func TestNewClaimReportsEveryProblem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*ledger.ClaimRequest)
		msg    string
		want   []error
	}{
		{"one field left out", func(r *ledger.ClaimRequest) { r.Tool = "" }, "missing tool", []error{ledger.ErrInvalidTool}},
		{"one field wrong", func(r *ledger.ClaimRequest) { r.Tool = "a/b" }, "invalid tool: want 1-128 of [A-Za-z0-9_.-]", []error{ledger.ErrInvalidTool}},
		{"three at once", func(r *ledger.ClaimRequest) { r.RunID, r.Vendor, r.Intent = "run 1", "", nil },
			"invalid run_id: want 1-128 of [A-Za-z0-9_-]; missing vendor; missing intent",
			[]error{ledger.ErrInvalidRunID, ledger.ErrInvalidVendor, ledger.ErrInvalidIntent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := validClaimRequest()
			tc.change(&req)
			_, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0)
			if err == nil || err.Error() != tc.msg {
				t.Fatalf("NewClaim: %v, want %q", err, tc.msg)
			}
			for _, w := range append(tc.want, ledger.ErrInvalid) {
				if !errors.Is(err, w) {
					t.Errorf("errors.Is(%v, %v) = false", err, w)
				}
			}
		})
	}
}
