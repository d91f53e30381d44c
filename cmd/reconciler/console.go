package main

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/console"
	"github.com/agentledger/reconciler/ledger"
)

// withConsole serves the ops console (docs/architecture.md §16) at /console
// beside the API: its reads come from the store and the event stream, its
// actions go to srv's handler with the signed-in person's token.
func (m *Main) withConsole(st ledger.Store, nc *nats.Conn, js jetstream.JetStream, srv *api.Server) (http.Handler, error) {
	cfg := m.Config
	apiHandler := srv.Handler()
	if !cfg.Console.Enabled {
		return apiHandler, nil
	}
	o := console.Options{
		Store: st, API: apiHandler,
		Identify: func(token string) (console.Identity, bool) {
			id, ok := srv.Identify(token)
			return console.Identity{Role: id.Role, Tenant: id.Tenant, Fingerprint: id.Fingerprint}, ok
		},
		Tenants:       consoleTenants(cfg),
		History:       console.StreamHistory{JS: js, Stream: cfg.Events.Stream, Prefix: cfg.Events.SubjectPrefix},
		Live:          nc,
		SubjectPrefix: cfg.Events.SubjectPrefix,
		Grace:         cfg.Resolver.Grace,
		TraceURL:      cfg.Console.TraceURL,
		VendorLinks:   cfg.Console.VendorLinks,
		Verification:  webhookVerification(cfg),
		SessionTTL:    cfg.Console.SessionTTL,
		SessionKey:    cfg.Console.SessionKey,
		SearchTimeout: cfg.Console.SearchTimeout,
		SecureCookie:  cfg.Console.SecureCookie,
		Logger:        m.Logger.With("component", "console"),
		Now:           m.Now,
	}
	// Every store of the repo keeps a row journal, searches completely and
	// records sign-outs; a store that did not would get the console's
	// fallbacks (no journal, the newest rows, this replica's sign-outs).
	if j, ok := st.(ledger.Journals); ok {
		o.Journal = j
	}
	if f, ok := st.(ledger.Finder); ok {
		o.Finder = f
	}
	if r, ok := st.(ledger.Revocations); ok {
		o.Revocations = r
	}
	c, err := console.New(o)
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	// Its live streams end as the HTTP server shuts down, or the shutdown
	// would wait for every open browser tab.
	m.onShutdownHTTP = append(m.onShutdownHTTP, c.Close)
	ch := c.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == "/console" || strings.HasPrefix(p, "/console/") {
			ch.ServeHTTP(w, r)
			return
		}
		apiHandler.ServeHTTP(w, r)
	}), nil
}

// consoleTenants are the tenants an admin may look at: every tenant with a
// token.
func consoleTenants(cfg config.Config) []string {
	set := map[string]bool{}
	for _, t := range cfg.TokenTenants() {
		set[t] = true
	}
	for _, t := range cfg.Tenants {
		set[t.ID] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// webhookVerification says, per vendor, how its endpoints verify a
// delivery: the console's timeline shows it beside each webhook.
func webhookVerification(cfg config.Config) map[string]string {
	out := map[string]string{}
	if len(cfg.Stripe.Endpoints) > 0 {
		out["stripe"] = "Stripe-Signature, HMAC-SHA256 of the timestamped body, within the endpoint's tolerance"
	}
	modes := map[string]bool{}
	for _, ep := range cfg.PayPal.Endpoints {
		modes[ep.Verify] = true
	}
	switch {
	case modes["offline"] && modes["postback"]:
		out["paypal"] = "PayPal's certificate (offline) or verify-webhook-signature (postback), per endpoint"
	case modes["postback"]:
		out["paypal"] = "PayPal's verify-webhook-signature API (postback)"
	case modes["offline"]:
		out["paypal"] = "PayPal's RSA-SHA256 signature with its allow-listed certificate (offline)"
	}
	for _, ep := range cfg.Standard.Endpoints {
		out[ep.Vendor] = fmt.Sprintf("Standard Webhooks signature (HMAC-SHA256 of id.timestamp.body) at endpoint %s", ep.Name)
	}
	return out
}
