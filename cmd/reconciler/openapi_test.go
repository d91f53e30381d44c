package main

import (
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/webhooks"
)

// TestOpenAPIRoutes checks the whole router as serve builds it — the API and
// the webhook routes on one echo — against api/openapi.yaml, both ways.
func TestOpenAPIRoutes(t *testing.T) {
	st := memstore.New(ledger.DefaultPolicy())
	srv, err := api.New(api.Options{Store: st, Tokens: map[string]string{e2eToken: "default"}, AdminTokens: []string{e2eAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	wh, err := webhooks.New(webhooks.Options{Store: st,
		Stripe: []webhooks.StripeEndpoint{{Name: "default", Tenant: "default", Secrets: []string{"whsec_x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	wh.Register(srv.Echo())

	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" {
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	param := regexp.MustCompile(`:([a-z_]+)`)
	served := map[string]bool{}
	for _, r := range srv.Echo().Routes() {
		if r.Method != "echo_route_not_found" {
			served[r.Method+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
		}
	}
	var missing, stale []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !served[r] {
			stale = append(stale, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing)+len(stale) > 0 {
		t.Fatalf("routes served but not in openapi.yaml: %v; documented but not served: %v", missing, stale)
	}
	if !served["POST /webhooks/stripe/{endpoint}"] {
		t.Fatalf("webhook routes missing from the router: %v", served)
	}
}
