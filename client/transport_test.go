package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/client"
)

// TestTransport checks what the vendor receives through client.Transport.
func TestTransport(t *testing.T) {
	tests := []struct {
		name        string
		tr          client.Transport
		method      string
		contentType string
		body        string
		header      map[string]string // set by the caller (a model's value, say)
		keyed       bool
		wantErr     error
		check       func(t *testing.T, r *http.Request, body string)
	}{
		{name: "Idempotency-Key overwrites the model's", tr: client.Transport{Header: "Idempotency-Key"},
			method: "POST", body: `{"amount":1}`, contentType: "application/json",
			header: map[string]string{"Idempotency-Key": "model-invented"}, keyed: true,
			check: func(t *testing.T, r *http.Request, body string) {
				if got := r.Header.Values("Idempotency-Key"); len(got) != 1 || got[0] != "key_1" {
					t.Errorf("Idempotency-Key = %v, want [key_1]", got)
				}
				if body != `{"amount":1}` {
					t.Errorf("body = %s, want it unchanged", body)
				}
			}},
		{name: "PayPal-Request-Id", tr: client.Transport{Header: "PayPal-Request-Id"}, method: "POST", keyed: true,
			body: `{"intent":"CAPTURE"}`, contentType: "application/json",
			check: func(t *testing.T, r *http.Request, body string) {
				if got := r.Header.Get("PayPal-Request-Id"); got != "key_1" {
					t.Errorf("PayPal-Request-Id = %q, want key_1", got)
				}
			}},
		{name: "JSON body field", tr: client.Transport{BodyField: "idempotency_key"}, method: "POST", keyed: true,
			body: `{"amount_money":{"amount":1050},"idempotency_key":"model-invented"}`, contentType: "application/json",
			check: func(t *testing.T, r *http.Request, body string) {
				var m map[string]any
				if err := json.Unmarshal([]byte(body), &m); err != nil {
					t.Fatal(err)
				}
				if m["idempotency_key"] != "key_1" || m["amount_money"].(map[string]any)["amount"] != 1050.0 {
					t.Errorf("body = %s, want idempotency_key key_1 and the amount kept", body)
				}
				if r.ContentLength != int64(len(body)) {
					t.Errorf("Content-Length %d for a %d-byte body", r.ContentLength, len(body))
				}
			}},
		{name: "form body field", tr: client.Transport{BodyField: "request_id"}, method: "PUT", keyed: true,
			body: "amount=1050&request_id=x", contentType: "application/x-www-form-urlencoded",
			check: func(t *testing.T, r *http.Request, body string) {
				v, _ := url.ParseQuery(body)
				if v.Get("request_id") != "key_1" || v.Get("amount") != "1050" {
					t.Errorf("body = %s, want request_id=key_1 and amount kept", body)
				}
			}},
		{name: "a read passes without a key", tr: client.Transport{Header: "Idempotency-Key"}, method: "GET",
			check: func(t *testing.T, r *http.Request, body string) {
				if r.Header.Get("Idempotency-Key") != "" {
					t.Error("a read got a key")
				}
			}},
		{name: "a write without a key is refused", tr: client.Transport{Header: "Idempotency-Key"}, method: "POST",
			body: `{}`, wantErr: client.ErrNoKey},
		{name: "a body field on a non-object body is refused", tr: client.Transport{BodyField: "idempotency_key"}, method: "POST",
			keyed: true, body: `[1]`, contentType: "application/json", wantErr: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *http.Request
			var gotBody string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got, gotBody = r, string(b)
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			tr := tt.tr
			hc := &http.Client{Transport: &tr}
			ctx := context.Background()
			if tt.keyed {
				ctx = client.WithKey(ctx, "key_1", "rl_1")
			}
			req, err := http.NewRequestWithContext(ctx, tt.method, srv.URL+"/v1/x", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := hc.Do(req)
			if tt.check == nil { // refusals
				if err == nil {
					resp.Body.Close()
					t.Fatal("request went out")
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error = %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Error("the vendor received the request")
				}
				return
			}
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			resp.Body.Close()
			if req.Header.Get("Idempotency-Key") != tt.header["Idempotency-Key"] {
				t.Error("the transport changed the caller's request")
			}
			tt.check(t, got, gotBody)
		})
	}
}

func TestResultFromResponse(t *testing.T) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}}
	resp.Header.Set("Idempotent-Replayed", "true")
	resp.Header.Set("Stripe-Should-Retry", "false")
	resp.Header.Set("Request-Id", "req_1")
	res := client.ResultFromResponse(resp, "pi_1")
	if res.HTTPStatus != 200 || res.ReceiptID != "pi_1" || len(res.Headers) != 2 ||
		res.Headers["Idempotent-Replayed"] != "true" || res.Headers["Stripe-Should-Retry"] != "false" {
		t.Errorf("ResultFromResponse = %+v", res)
	}
	if got := client.ResultFromResponse(nil, ""); got.HTTPStatus != 0 {
		t.Errorf("nil response = %+v", got)
	}
}

// TestTransportVendorKey: the vendor gets the row's vendor_key, not the
// ledger key, in a header or at a dotted path of a JSON body.
func TestTransportVendorKey(t *testing.T) {
	var gotHeader, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotHeader, gotBody = r.Header.Get("Idempotency-Key"), string(b)
	}))
	defer srv.Close()
	ck := client.CallKey{Key: strings.Repeat("ab", 32), LocalID: "rl_1", VendorKey: "short-vendor-key-0123456789abcdef"}
	ctx := client.WithCallKey(context.Background(), ck)
	for _, tc := range []struct {
		name  string
		tr    client.Transport
		body  string
		check func(t *testing.T)
	}{
		{"header", client.Transport{Header: "Idempotency-Key"}, `{"a":1}`, func(t *testing.T) {
			if gotHeader != ck.VendorKey {
				t.Errorf("header %q, want the vendor key", gotHeader)
			}
		}},
		{"dotted body path", client.Transport{BodyField: "variables.input.id"}, `{"query":"q","variables":{"input":{"title":"t","n":12345678901234567890}}}`, func(t *testing.T) {
			var doc struct {
				Query     string `json:"query"`
				Variables struct {
					Input map[string]json.RawMessage `json:"input"`
				} `json:"variables"`
			}
			if err := json.Unmarshal([]byte(gotBody), &doc); err != nil {
				t.Fatal(err)
			}
			if got := string(doc.Variables.Input["id"]); got != `"`+ck.VendorKey+`"` {
				t.Errorf("input.id = %s, want the vendor key", got)
			}
			if doc.Query != "q" || string(doc.Variables.Input["title"]) != `"t"` || string(doc.Variables.Input["n"]) != "12345678901234567890" {
				t.Errorf("the rest of the body changed: %s", gotBody)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Transport: &tc.tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			tc.check(t)
		})
	}
}
