package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

// Tokens of the fixture: two tenants and an admin. They are long and
// distinctive so a test can assert they never reach a log line.
const (
	tokenAcme   = "tok_acme_6f1d0c2b9e8a4f7d"
	tokenGlobex = "tok_globex_a3c5e7f9b1d2c4e6"
	tokenAdmin  = "tok_admin_0d9c8b7a6f5e4d3c"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

type fixture struct {
	t      *testing.T
	srv    *api.Server
	h      http.Handler
	store  *memstore.Store
	clock  *testkit.Clock
	reg    *prometheus.Registry
	logs   *testkit.SyncBuffer // log output of concurrent requests
	mu     sync.Mutex
	frozen map[string]bool // tool or class
}

// newFixture builds a Server over a fresh memstore with the fixture's
// tokens, clock, kill switch and registry; mods adjust the options.
func newFixture(t *testing.T, mods ...func(*api.Options)) *fixture {
	t.Helper()
	f := &fixture{
		t: t, store: memstore.New(ledger.DefaultPolicy()), clock: testkit.NewClock(t0),
		reg: prometheus.NewRegistry(), logs: &testkit.SyncBuffer{}, frozen: map[string]bool{},
	}
	t.Cleanup(func() { _ = f.store.Close() })
	o := api.Options{
		Store:       f.store,
		Tokens:      map[string]string{tokenAcme: "acme", tokenGlobex: "globex"},
		AdminTokens: []string{tokenAdmin},
		Policy:      ledger.DefaultPolicy(),
		ReplayWindow: func(vendor string, _ *ledger.Request) time.Duration {
			if vendor == "stripe" {
				return 24 * time.Hour
			}
			return 0
		},
		Frozen: func(tenant, tool string, class ledger.ToolClass) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.frozen[tenant+"/"+tool] || f.frozen[tenant+"/"+string(class)]
		},
		Registerer: f.reg,
		Logger:     slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:        f.clock.Now,
	}
	for _, m := range mods {
		m(&o)
	}
	srv, err := api.New(o)
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	f.srv, f.h = srv, srv.Handler()
	return f
}

func (f *fixture) freeze(tenant, toolOrClass string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen[tenant+"/"+toolOrClass] = true
}

// do sends one request through the real handler. A string body is sent as
// is; anything else is JSON-encoded; nil sends no body.
func (f *fixture) do(method, target, token string, body any) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequest(method, target, bodyReader(f.t, body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

func bodyReader(t *testing.T, body any) io.Reader {
	t.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return strings.NewReader(b)
	case []byte:
		return bytes.NewReader(b)
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatalf("marshal body: %v", err)
	}
	return bytes.NewReader(data)
}

// claimReq is a claim body; with() returns a copy with fields replaced.
type claimReq map[string]any

func newClaim(runID string) claimReq {
	return claimReq{
		"run_id": runID, "tool": "stripe.create_payment_intent", "tool_call_id": "call_1",
		"vendor": "stripe", "tool_class": "write_idempotent",
		"intent": map[string]any{"amount": 1050, "currency": "usd", "customer": "cus_1"},
	}
}

func (c claimReq) with(kv ...any) claimReq {
	out := claimReq{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

type claimResp struct {
	Decision          ledger.Decision `json:"decision"`
	Code              string          `json:"code"`
	Row               *ledger.Row     `json:"row"`
	ReplayWindowUntil *time.Time      `json:"replay_window_until"`
}

type rowResp struct {
	Row ledger.Row `json:"row"`
}

type listResp struct {
	Rows       []ledger.Row `json:"rows"`
	NextCursor string       `json:"next_cursor"`
}

type errResp struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// decode decodes a response body strictly into v.
func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T from %d %s: %v", v, rec.Code, rec.Body.String(), err)
	}
	return v
}

// wantStatus fails unless the response has the status.
func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, want int) {
	t.Helper()
	if rec.Code != want {
		t.Fatalf("status: got %d, want %d; body %s", rec.Code, want, rec.Body.String())
	}
}

// wantError fails unless the response is the error envelope with status and code.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) errResp {
	t.Helper()
	wantStatus(t, rec, status)
	e := decode[errResp](t, rec)
	if e.Error.Code != code {
		t.Fatalf("error code: got %q, want %q (message %q)", e.Error.Code, code, e.Error.Message)
	}
	if e.Error.Message == "" {
		t.Fatalf("error %q has no message", code)
	}
	return e
}

// mustClaim claims and checks the status, returning the response.
func (f *fixture) mustClaim(token string, body any, status int) claimResp {
	f.t.Helper()
	rec := f.do(http.MethodPost, "/v1/claims", token, body)
	wantStatus(f.t, rec, status)
	return decode[claimResp](f.t, rec)
}

// report posts an outcome for key and checks for 200.
func (f *fixture) report(token, key string, outcome any) ledger.Row {
	f.t.Helper()
	rec := f.do(http.MethodPost, "/v1/claims/"+escape(key)+"/outcome", token, outcome)
	wantStatus(f.t, rec, http.StatusOK)
	return decode[rowResp](f.t, rec).Row
}

func escape(key string) string {
	r := strings.NewReplacer("%", "%25", "/", "%2F", "?", "%3F", "#", "%23")
	return r.Replace(key)
}

var (
	okOutcome      = map[string]any{"kind": "response", "http_status": 200, "receipt_id": "pi_123"}
	timeoutOutcome = map[string]any{"kind": "timeout"}
	declined       = map[string]any{"kind": "response", "http_status": 402}
	serverError    = map[string]any{"kind": "response", "http_status": 500}
)

// gaugeValue reads an unlabelled gauge or the sum of a counter family.
func (f *fixture) metricValue(name string, labels map[string]string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatalf("gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func newRequest(t *testing.T, method, target string, body any) *http.Request {
	t.Helper()
	return httptest.NewRequest(method, target, bodyReader(t, body))
}

func serve(f *fixture, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}
