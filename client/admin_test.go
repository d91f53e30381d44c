package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// TestAdminJSON: an admin reads and resolves another tenant's rows, and the
// JSON variants hand back the rows the server sent.
func TestAdminJSON(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := e.client(t)
	var keys []string
	for i := range 3 {
		r, err := c.Claim(ctx, chargeClaim(1000+i))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, r.Key())
	}
	admin := newClient(t, e.srv.URL, tokenAdmin, client.WithTenant("acme"))

	raw, err := admin.GetJSON(ctx, keys[0])
	if err != nil {
		t.Fatalf("GetJSON: %v", err)
	}
	var row ledger.Row
	if err := json.Unmarshal(raw, &row); err != nil || row.Key != keys[0] || row.Tenant != "acme" {
		t.Errorf("GetJSON = %s (%v), want the row of %s", raw, err, keys[0])
	}

	page, err := admin.ListJSON(ctx, client.ListQuery{Limit: 2})
	if err != nil {
		t.Fatalf("ListJSON: %v", err)
	}
	if len(page.Rows) != 2 || page.NextCursor == "" {
		t.Fatalf("ListJSON = %d rows, cursor %q; want 2 and a cursor", len(page.Rows), page.NextCursor)
	}
	rest, err := admin.ListJSON(ctx, client.ListQuery{Limit: 2, Cursor: page.NextCursor})
	if err != nil || len(rest.Rows) != 1 || rest.NextCursor != "" {
		t.Fatalf("second page: %d rows, cursor %q, err %v; want the last row", len(rest.Rows), rest.NextCursor, err)
	}

	raw, err = admin.ResolveJSON(ctx, keys[1], client.ResolveRequest{
		Tenant: "acme", Status: ledger.StatusFailedPoison, Note: "declined by hand", Actor: "ann",
	})
	if err != nil {
		t.Fatalf("ResolveJSON: %v", err)
	}
	row = ledger.Row{}
	if err := json.Unmarshal(raw, &row); err != nil || row.Status != ledger.StatusFailedPoison || row.Resolution == nil || row.Resolution.Actor != "ann" {
		t.Errorf("ResolveJSON = %s (%v), want failed_poison resolved by ann", raw, err)
	}
	if got := e.row(t, keys[1]); got.Status != ledger.StatusFailedPoison {
		t.Errorf("stored status %s, want failed_poison", got.Status)
	}
}

// TestRawRowsKeepUnknownFields: what a newer server sends reaches the caller.
func TestRawRowsKeepUnknownFields(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/claims" {
			fmt.Fprint(w, `{"rows":[{"key":"a","future":1},{"key":"b"}],"next_cursor":"c1"}`)
			return
		}
		fmt.Fprint(w, `{"row":{"key":"a","future":{"x":true}}}`)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, tokenAdmin)
	ctx := context.Background()

	raw, err := c.GetJSON(ctx, "a")
	if err != nil || string(raw) != `{"key":"a","future":{"x":true}}` {
		t.Errorf("GetJSON = %s, %v", raw, err)
	}
	page, err := c.ListJSON(ctx, client.ListQuery{})
	if err != nil || len(page.Rows) != 2 || string(page.Rows[0]) != `{"key":"a","future":1}` || page.NextCursor != "c1" {
		t.Errorf("ListJSON = %+v, %v", page, err)
	}
}

// TestMaxResponse: an answer past the cap is refused, not cut and misread;
// an error answer past it is still the API's error.
func TestMaxResponse(t *testing.T) {
	big := `{"row":{"key":"a","note":"` + strings.Repeat("x", 200) + `"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/missing") {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"not_found","message":"no such claim"}}`+strings.Repeat(" ", 200))
			return
		}
		fmt.Fprint(w, big)
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	small := newClient(t, srv.URL, tokenAdmin, client.WithMaxResponse(100), client.WithRetries(0, 1))
	if _, err := small.GetJSON(ctx, "a"); err == nil || !strings.Contains(err.Error(), "answer larger than 100 bytes") {
		t.Errorf("GetJSON = %v, want the answer refused", err)
	}
	if _, err := small.Get(ctx, "missing"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get of a long 404 = %v, want ErrNotFound", err)
	}
	if _, err := newClient(t, srv.URL, tokenAdmin, client.WithMaxResponse(int64(len(big)))).GetJSON(ctx, "a"); err != nil {
		t.Errorf("an answer of exactly the cap: %v", err)
	}
	if _, err := client.New(srv.URL, tokenAdmin, client.WithMaxResponse(0)); err == nil {
		t.Error("New accepted a cap of 0")
	}
}

// TestKeyPathDotSegments: a key of dots travels encoded, so no proxy
// resolves it away as "." or "..".
func TestKeyPathDotSegments(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.EscapedPath())
		fmt.Fprint(w, `{"row":{"key":"x"}}`)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL+"/api/", tokenAdmin)
	for _, tc := range []struct{ key, want string }{
		{key: "a/b?d#e%f", want: "/api/v1/claims/a%2Fb%3Fd%23e%25f"},
		{key: "..", want: "/api/v1/claims/%2E%2E"},
		{key: ".", want: "/api/v1/claims/%2E"},
		{key: "a..b", want: "/api/v1/claims/a..b"},
	} {
		if _, err := c.Get(context.Background(), tc.key); err != nil {
			t.Fatalf("%q: %v", tc.key, err)
		}
		if p := got.Load(); p != tc.want {
			t.Errorf("%q: path %v, want %s", tc.key, p, tc.want)
		}
	}
}
