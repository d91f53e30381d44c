package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/registry"
)

// withRegistry serves a tool registry over the env's store.
func withRegistry(o *api.Options) {
	o.Registry = registry.New(o.Store.(ledger.Tools), registry.Options{})
}

func emailTool() ledger.Tool {
	return ledger.Tool{
		Name: "resend.emails.send", Vendor: "resend", Class: ledger.ClassWriteIdempotent, SideEffect: "email",
		KeyPlacement: ledger.KeyPlacement{Argument: "idempotency_key"}, IntentFields: []string{"to", "subject"},
		Checklist: ledger.Checklist{SideEffectDocumented: true, CheckedBy: "alice"},
		// Ignored: the token names the tenant, the store keeps the version.
		Tenant: "globex", Version: 7,
	}
}

// TestTools: register, read, list, replace and unregister through the SDK.
func TestTools(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, withRegistry)
	c := e.client(t)

	stored, changed, err := c.PutTool(ctx, emailTool())
	if err != nil || !changed {
		t.Fatalf("PutTool = %v, changed %v", err, changed)
	}
	if stored.Tenant != "acme" || stored.Version != 1 || stored.Autonomy != ledger.AutonomyAutonomous || stored.CreatedAt.IsZero() {
		t.Fatalf("stored entry %+v", stored)
	}
	if _, changed, err := c.PutTool(ctx, emailTool()); err != nil || changed {
		t.Fatalf("the same PutTool again = %v, changed %v; want unchanged", err, changed)
	}

	got, err := c.GetTool(ctx, "resend.emails.send")
	if err != nil || got.KeyPlacement.Argument != "idempotency_key" || got.Version != 1 || len(got.IntentFields) != 2 {
		t.Fatalf("GetTool = %+v, %v", got, err)
	}
	admin := newClient(t, e.srv.URL, tokenAdmin, client.WithTenant("acme"))
	if got, err := admin.GetTool(ctx, "resend.emails.send"); err != nil || got.Tenant != "acme" {
		t.Fatalf("an admin's GetTool = %+v, %v", got, err)
	}

	read := ledger.Tool{Name: "resend.emails.get", Vendor: "resend", Class: ledger.ClassRead}
	if _, _, err := c.PutTool(ctx, read); err != nil {
		t.Fatalf("PutTool(read): %v", err)
	}
	list, err := c.ListTools(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "resend.emails.get" || list[1].Name != "resend.emails.send" {
		t.Fatalf("ListTools = %+v, %v", list, err)
	}

	if err := c.DeleteTool(ctx, "resend.emails.get"); err != nil {
		t.Fatalf("DeleteTool: %v", err)
	}
	if _, err := c.GetTool(ctx, "resend.emails.get"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("GetTool after delete = %v, want ErrNotFound", err)
	}
	if err := c.DeleteTool(ctx, "resend.emails.get"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("DeleteTool twice = %v, want ErrNotFound", err)
	}

	bad := emailTool()
	bad.KeyPlacement = ledger.KeyPlacement{}
	if _, _, err := c.PutTool(ctx, bad); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("PutTool without a key placement = %v, want ErrInvalidInput", err)
	}
	for _, name := range []string{"", ".", ".."} {
		if _, err := c.GetTool(ctx, name); !errors.Is(err, client.ErrInvalidInput) {
			t.Errorf("GetTool(%q) = %v, want ErrInvalidInput before any request", name, err)
		}
	}
}

// TestToolsWithoutRegistry: a server without a registry answers 501, a
// typed error and never an empty registry.
func TestToolsWithoutRegistry(t *testing.T) {
	c := newEnv(t).client(t)
	_, err := c.ListTools(context.Background())
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented {
		t.Fatalf("ListTools = %v, want a 501 *Error", err)
	}
}

// TestToolsBadAnswers: a registry read whose answer is not the API's is an
// error, never an empty or zero entry.
func TestToolsBadAnswers(t *testing.T) {
	var sends atomic.Int32
	cases := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"not JSON", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>ok</html>")) }},
		{"5xx", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sends.Store(0)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sends.Add(1); tc.handler(w, r) }))
			t.Cleanup(srv.Close)
			c := newClient(t, srv.URL, tokenAcme)
			if got, err := c.GetTool(context.Background(), "resend.emails.send"); err == nil {
				t.Fatalf("GetTool = %+v, nil; want an error", got)
			}
			if list, err := c.ListTools(context.Background()); err == nil {
				t.Fatalf("ListTools = %+v, nil; want an error", list)
			}
			if sends.Load() < 2 {
				t.Fatalf("%d requests; a failed read is retried", sends.Load())
			}
		})
	}
	t.Run("network error", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		c := newClient(t, srv.URL, tokenAcme)
		if _, err := c.GetTool(context.Background(), "resend.emails.send"); err == nil {
			t.Fatal("GetTool against a closed port: nil error")
		}
	})
}
