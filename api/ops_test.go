package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

func TestHealthAndReadiness(t *testing.T) {
	var storeUp, natsUp atomic.Bool
	check := func(up *atomic.Bool, name string) api.ReadyCheck {
		return api.ReadyCheck{Name: name, Check: func(ctx context.Context) error {
			if !up.Load() {
				return errors.New(name + " down: dial 10.0.0.9: secret-detail")
			}
			return ctx.Err()
		}}
	}
	f := newFixture(t, func(o *api.Options) { o.Ready = []api.ReadyCheck{check(&storeUp, "store"), check(&natsUp, "nats")} })
	type health struct {
		Status  string   `json:"status"`
		Failing []string `json:"failing"`
	}
	steps := []struct {
		name          string
		store, nats   bool
		status        int
		wantFailing   []string
		wantStatusStr string
	}{
		{name: "nothing up", status: 503, wantFailing: []string{"store", "nats"}, wantStatusStr: "not_ready"},
		{name: "store up", store: true, status: 503, wantFailing: []string{"nats"}, wantStatusStr: "not_ready"},
		{name: "all up", store: true, nats: true, status: 200, wantStatusStr: "ready"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			storeUp.Store(st.store)
			natsUp.Store(st.nats)
			wantStatus(t, f.do(http.MethodGet, "/healthz", "", nil), http.StatusOK)
			rec := f.do(http.MethodGet, "/readyz", "", nil)
			wantStatus(t, rec, st.status)
			got := decode[health](t, rec)
			if got.Status != st.wantStatusStr || strings.Join(got.Failing, ",") != strings.Join(st.wantFailing, ",") {
				t.Fatalf("readyz: got %+v, want %s failing %v", got, st.wantStatusStr, st.wantFailing)
			}
			if strings.Contains(rec.Body.String(), "secret-detail") {
				t.Fatal("readyz serves a check's error text")
			}
		})
	}
}

// TestReadinessDegraded: a check that returns *api.Degraded keeps /readyz
// at 200, says degraded and serves its detail; a failing check still wins.
func TestReadinessDegraded(t *testing.T) {
	var behind, down atomic.Bool
	f := newFixture(t, func(o *api.Options) {
		o.Ready = []api.ReadyCheck{
			{Name: "store", Check: func(context.Context) error {
				if down.Load() {
					return errors.New("store down")
				}
				return nil
			}},
			{Name: "events", Check: func(context.Context) error {
				if behind.Load() {
					return &api.Degraded{Detail: "outbox holds 12000 events (degraded past 10000); oldest waited 2.5s"}
				}
				return nil
			}},
		}
	})
	type health struct {
		Status   string            `json:"status"`
		Failing  []string          `json:"failing"`
		Degraded map[string]string `json:"degraded"`
	}
	steps := []struct {
		name         string
		behind, down bool
		status       int
		want         health
	}{
		{name: "ready", status: 200, want: health{Status: "ready"}},
		{name: "behind", behind: true, status: 200, want: health{Status: "degraded",
			Degraded: map[string]string{"events": "outbox holds 12000 events (degraded past 10000); oldest waited 2.5s"}}},
		{name: "behind and down", behind: true, down: true, status: 503, want: health{Status: "not_ready", Failing: []string{"store"},
			Degraded: map[string]string{"events": "outbox holds 12000 events (degraded past 10000); oldest waited 2.5s"}}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			behind.Store(st.behind)
			down.Store(st.down)
			rec := f.do(http.MethodGet, "/readyz", "", nil)
			wantStatus(t, rec, st.status)
			got := decode[health](t, rec)
			if got.Status != st.want.Status || fmt.Sprint(got.Failing) != fmt.Sprint(st.want.Failing) || fmt.Sprint(got.Degraded) != fmt.Sprint(st.want.Degraded) {
				t.Fatalf("readyz: got %+v, want %+v", got, st.want)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
	f.report(tokenAcme, key, declined)
	// The vendor says it succeeded after all: a late_success alert.
	f.report(tokenAcme, key, okOutcome)
	f.do(http.MethodGet, "/v1/claims/"+key, tokenGlobex, nil) // 404

	rec := f.do(http.MethodGet, "/metrics", "", nil)
	wantStatus(t, rec, http.StatusOK)
	text := rec.Body.String()
	for _, want := range []string{
		`reconciler_http_requests_total{code="201",route="/v1/claims"} 1`,
		`reconciler_http_requests_total{code="200",route="/v1/claims/:key/outcome"} 2`,
		`reconciler_http_requests_total{code="404",route="/v1/claims/:key"} 1`,
		`reconciler_http_request_duration_seconds_count{code="201",route="/v1/claims"} 1`,
		`reconciler_claims_total{decision="proceed",tenant="acme"} 1`,
		`reconciler_transitions_total{from="pending",source="runtime",to="failed_poison"} 1`,
		`reconciler_transitions_total{from="failed_poison",source="runtime",to="succeeded"} 1`,
		`reconciler_alerts_total{kind="late_success"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, key) {
		t.Error("a raw URL (the key) reached a metric label")
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	// Webhooks and the resolver register the same transition and alert
	// series; a second registration must reuse, not fail.
	reg := prometheus.NewRegistry()
	for i := range 2 {
		_, err := api.New(api.Options{Store: memstore.New(ledger.DefaultPolicy()), Tokens: map[string]string{tokenAcme: "acme"}, Registerer: reg})
		if err != nil {
			t.Fatalf("server %d on a shared registry: %v", i, err)
		}
	}
}

func TestOpenAPI(t *testing.T) {
	f := newFixture(t)
	rec := f.do(http.MethodGet, "/openapi.yaml", "", nil)
	wantStatus(t, rec, http.StatusOK)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/yaml") {
		t.Errorf("content type: got %q", ct)
	}
	var doc struct {
		OpenAPI string                               `yaml:"openapi"`
		Paths   map[string]map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version: got %q", doc.OpenAPI)
	}
	param := regexp.MustCompile(`:([a-z_]+)`)
	served := map[string]bool{}
	for _, r := range f.srv.Echo().Routes() {
		if r.Method == "echo_route_not_found" {
			continue
		}
		served[r.Method+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			documented[strings.ToUpper(method)+" "+path] = true
			if _, ok := op["responses"]; !ok {
				t.Errorf("%s %s documents no responses", method, path)
			}
		}
	}
	var missing, stale []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		// The webhooks package registers these on the same router; the
		// full router's check is cmd/reconciler's TestOpenAPIRoutes.
		if strings.Contains(r, " /webhooks/") {
			continue
		}
		if !served[r] {
			stale = append(stale, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("routes missing from openapi.yaml: %v", missing)
	}
	if len(stale) > 0 {
		t.Errorf("openapi.yaml documents routes nobody serves: %v", stale)
	}
	if len(served) < 10 {
		t.Errorf("only %d routes served; the walk found too little", len(served))
	}
	if !documented["POST /v1/claims/{key}/resolve"] || !documented["GET /readyz"] {
		t.Error("the walk did not see the documented routes")
	}
}

// faultyStore fails every call with err, or panics when err is nil.
type faultyStore struct {
	*memstore.Store
	err error
}

func (s faultyStore) fail() error {
	if s.err == nil {
		panic("store exploded: password=hunter2")
	}
	return s.err
}

func (s faultyStore) Claim(context.Context, ledger.Claim) (ledger.ClaimResult, error) {
	return ledger.ClaimResult{}, s.fail()
}

func (s faultyStore) Get(context.Context, string, string) (ledger.Row, error) {
	return ledger.Row{}, s.fail()
}

func (s faultyStore) List(context.Context, ledger.ListQuery) (ledger.Page, error) {
	return ledger.Page{}, s.fail()
}

func TestStoreFailures(t *testing.T) {
	const secret = "hunter2"
	tests := []struct {
		name   string
		err    error // nil: the store panics
		status int
		code   string
		msg    string
	}{
		{name: "internal error", err: fmt.Errorf("postgres: dial tcp 10.0.0.5:5432: password=%s refused", secret), status: 500, code: "internal", msg: "internal error"},
		{name: "panic", status: 500, code: "internal", msg: "internal error"},
		{name: "unavailable", err: fmt.Errorf("bolt at /var/lib/%s.db: %w", secret, ledger.ErrUnavailable), status: 503, code: "unavailable", msg: "store unavailable"},
		{name: "timeout", err: fmt.Errorf("query %s: %w", secret, context.DeadlineExceeded), status: 503, code: "unavailable"},
		{name: "wrapped invalid input", err: fmt.Errorf("bolt %s: %w", secret, ledger.ErrInvalidListQuery), status: 400, code: "invalid_input", msg: "invalid list query"},
		{name: "wrapped detailed invalid input", err: fmt.Errorf("bolt %s: %w", secret, ledger.ErrInvalidListQuery.With("cursor")), status: 400, code: "invalid_input", msg: "invalid list query: cursor"},
		{name: "an invalid input the API has never heard of", err: fmt.Errorf("bolt %s: %w", secret, &ledger.InvalidError{Field: "shard", Reason: "want 0-7"}), status: 400, code: "invalid_input", msg: "invalid shard: want 0-7"},
		{name: "a bare ErrInvalid", err: fmt.Errorf("bolt %s: %w", secret, ledger.ErrInvalid), status: 400, code: "invalid_input", msg: "invalid input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *api.Options) { o.Store = faultyStore{Store: memstore.New(ledger.DefaultPolicy()), err: tc.err} })
			for _, target := range []string{"/v1/claims", "/v1/claims/k1"} {
				rec := f.do(http.MethodGet, target, tokenAcme, nil)
				e := wantError(t, rec, tc.status, tc.code)
				if tc.msg != "" && e.Error.Message != tc.msg {
					t.Errorf("%s message: got %q, want %q", target, e.Error.Message, tc.msg)
				}
				if strings.Contains(rec.Body.String(), secret) {
					t.Errorf("%s leaks internal text: %s", target, rec.Body.String())
				}
				if tc.status == 503 && rec.Header().Get("Retry-After") == "" {
					t.Errorf("%s: 503 without Retry-After", target)
				}
			}
			rec := f.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1"))
			wantError(t, rec, tc.status, tc.code)
			if tc.status == 500 && !strings.Contains(f.logs.String(), secret) {
				t.Error("the real error of a 500 was not logged")
			}
		})
	}
}

func TestUnknownRoutes(t *testing.T) {
	f := newFixture(t)
	wantError(t, f.do(http.MethodGet, "/v2/claims", tokenAcme, nil), http.StatusNotFound, "not_found")
	wantError(t, f.do(http.MethodDelete, "/v1/claims", tokenAcme, nil), http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestLogsHoldNoSecrets(t *testing.T) {
	f := newFixture(t)
	const marker = "alice.secret@example.com"
	body := newClaim("run_1").with("intent", map[string]any{"to": marker, "template_id": "tpl_1"})
	key := f.mustClaim(tokenAcme, body, http.StatusCreated).Row.Key
	f.report(tokenAcme, key, map[string]any{"kind": "response", "http_status": 200, "receipt_id": "msg_1", "headers": map[string]string{"X-Echo": marker}})
	f.do(http.MethodPost, "/v1/claims/"+key+"/resolve", tokenAdmin, map[string]any{"tenant": "acme", "status": "succeeded", "note": marker})
	f.do(http.MethodGet, "/v1/claims", "tok_wrong_"+marker, nil)
	logs := f.logs.String()
	for _, secret := range []string{tokenAcme, tokenAdmin, marker} {
		if strings.Contains(logs, secret) {
			t.Errorf("a log line holds %q", secret)
		}
	}
	for _, want := range []string{`"tenant":"acme"`, `"key":"` + key + `"`, `"run_id":"run_1"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	store := memstore.New(ledger.DefaultPolicy())
	tests := []struct {
		name string
		o    api.Options
	}{
		{name: "no store", o: api.Options{Tokens: map[string]string{"t": "acme"}}},
		{name: "no tokens", o: api.Options{Store: store}},
		{name: "empty token", o: api.Options{Store: store, Tokens: map[string]string{"": "acme"}}},
		{name: "token with a space", o: api.Options{Store: store, Tokens: map[string]string{"a b": "acme"}}},
		{name: "bad tenant", o: api.Options{Store: store, Tokens: map[string]string{"t": "ac.me"}}},
		{name: "token both admin and tenant", o: api.Options{Store: store, Tokens: map[string]string{"t": "acme"}, AdminTokens: []string{"t"}}},
		{name: "negative body limit", o: api.Options{Store: store, Tokens: map[string]string{"t": "acme"}, BodyLimit: -1}},
		{name: "nameless ready check", o: api.Options{Store: store, Tokens: map[string]string{"t": "acme"}, Ready: []api.ReadyCheck{{Check: func(context.Context) error { return nil }}}}},
		{name: "gatherer without registerer", o: api.Options{Store: store, Tokens: map[string]string{"t": "acme"}, Gatherer: prometheus.NewRegistry()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := api.New(tc.o); err == nil {
				t.Fatal("New accepted bad options")
			}
		})
	}
}

func TestOpenAPIAccessor(t *testing.T) {
	a := api.OpenAPI()
	a[0] = 'X'
	if b := api.OpenAPI(); b[0] == 'X' {
		t.Fatal("OpenAPI hands out the embedded bytes")
	}
	f := newFixture(t)
	rec := f.do(http.MethodGet, "/openapi.yaml", "", nil)
	body, _ := io.ReadAll(rec.Body)
	if string(body) != string(api.OpenAPI()) {
		t.Fatal("served document differs from the embedded one")
	}
}
