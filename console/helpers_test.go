package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/console"
	"github.com/agentledger/reconciler/freeze"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/registry"
)

const (
	acmeToken     = "acme-tenant-token-0123456789"
	globexToken   = "globex-tenant-token-0123456789"
	adminToken    = "console-admin-token-0123456789"
	acmeApprover  = "acme-approver-token-0123456789"
	globexApprove = "globex-approver-token-0123456789"
	// testSessionKey is the fixtures' shared session key (two consoles
	// over one store are two replicas).
	testSessionKey = "console-test-session-key-0123456789abcdef"
)

// fixture is the real API on a memstore, with the console beside it as
// cmd/reconciler serves them.
type fixture struct {
	t       *testing.T
	store   *memstore.Store
	api     *api.Server
	console *console.Console
	clock   *testkit.Clock
	log     *testkit.SyncBuffer
	srv     *httptest.Server
	opts    console.Options
}

type fixtureOption func(*console.Options)

func newFixture(t *testing.T, opts ...fixtureOption) *fixture {
	t.Helper()
	clk := testkit.NewClock(time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC))
	st := memstore.New(ledger.DefaultPolicy())
	kill := freeze.New(st, freeze.Options{})
	reg := registry.New(st, registry.Options{})
	if err := reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	logBuf := &testkit.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := api.New(api.Options{
		Store: st, KillSwitch: kill, Registry: reg,
		Tokens:         map[string]string{acmeToken: "acme", globexToken: "globex"},
		AdminTokens:    []string{adminToken},
		ApproverTokens: map[string]string{acmeApprover: "acme", globexApprove: "globex"},
		Logger:         log, Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := console.Options{
		Store: st, API: srv.Handler(),
		Identify: func(tok string) (console.Identity, bool) {
			id, ok := srv.Identify(tok)
			return console.Identity{Role: id.Role, Tenant: id.Tenant, Fingerprint: id.Fingerprint}, ok
		},
		Tenants: []string{"acme", "globex"}, Grace: time.Minute,
		VendorLinks: map[string]string{"stripe": "https://dashboard.stripe.com/payments/{receipt_id}"},
		TraceURL:    "https://tempo.example/trace/{trace_id}",
		// As cmd/reconciler wires them: the store's complete search, its
		// row journal and its sign-outs.
		Finder: st, Journal: st, Revocations: st,
		SessionKey: testSessionKey,
		Logger:     log, Now: clk.Now,
	}
	for _, fn := range opts {
		fn(&o)
	}
	c, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ch, ah := c.Handler(), srv.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/console") {
			ch.ServeHTTP(w, r)
			return
		}
		ah.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { c.Close(); hs.Close() })
	return &fixture{t: t, store: st, api: srv, console: c, clock: clk, log: logBuf, srv: hs, opts: o}
}

// apiCall is one JSON request to the API with a token.
func (f *fixture) apiCall(token, method, path, body string) (int, map[string]any) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// claim makes a claim and returns its row's key.
func (f *fixture) claim(token, body string, want int) string {
	f.t.Helper()
	code, out := f.apiCall(token, http.MethodPost, "/v1/claims", body)
	if code != want {
		f.t.Fatalf("claim: %d %v, want %d", code, out, want)
	}
	row, _ := out["row"].(map[string]any)
	key, _ := row["key"].(string)
	return key
}

func (f *fixture) row(tenant, key string) ledger.Row {
	f.t.Helper()
	r, err := f.store.Get(context.Background(), tenant, key)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// browser is a cookie-keeping HTTP client that does not follow redirects,
// so a test sees each 303; it sends no JavaScript, as a browser with
// scripts off.
type browser struct {
	t    *testing.T
	f    *fixture
	c    *http.Client
	last string // the last page's body
}

func (f *fixture) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: f.t, f: f, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type answer struct {
	Status   int
	Header   http.Header
	Body     string
	Location string
}

func (b *browser) do(req *http.Request) answer {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	b.last = string(body)
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(body), Location: resp.Header.Get("Location")}
}

func (b *browser) get(path string) answer {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.f.srv.URL+path, nil)
	return b.do(req)
}

// post sends a form as a browser does (Origin of the page).
func (b *browser) post(path string, form url.Values, header ...string) answer {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.f.srv.URL)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return b.do(req)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the last page's forms.
func (b *browser) csrf() string {
	b.t.Helper()
	m := csrfRE.FindStringSubmatch(b.last)
	if m == nil {
		b.t.Fatalf("no CSRF token on the page:\n%s", b.last)
	}
	return m[1]
}

// signIn signs in with a token and a name, and fails the test unless it works.
func (b *browser) signIn(token, actor string) {
	b.t.Helper()
	b.get("/console/signin")
	a := b.post("/console/signin", url.Values{"csrf": {b.csrf()}, "actor": {actor}, "token": {token}})
	if a.Status != http.StatusSeeOther || a.Location != "/console/attention" {
		b.t.Fatalf("sign in: %d %s\n%s", a.Status, a.Location, a.Body)
	}
}

// form posts a console form with the CSRF token of page, and follows the
// 303 back to the page that shows the result.
func (b *browser) form(page, action string, form url.Values) answer {
	b.t.Helper()
	b.get(page)
	form.Set("csrf", b.csrf())
	a := b.post(action, form)
	if a.Status != http.StatusSeeOther {
		b.t.Fatalf("POST %s: %d\n%s", action, a.Status, a.Body)
	}
	return b.get(a.Location)
}

func rowPath(tenant, key string) string {
	return "/console/row?" + url.Values{"tenant": {tenant}, "key": {key}}.Encode()
}

func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, body)
		}
	}
}
