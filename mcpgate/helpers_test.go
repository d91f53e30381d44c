package mcpgate_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/freeze"
	"github.com/agentledger/reconciler/internal/mcptest"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/mcpgate"
	"github.com/agentledger/reconciler/registry"
	"github.com/agentledger/reconciler/webhooks"
)

func TestMain(m *testing.M) {
	mcptest.RunChild() // the upstream, when this binary is its child process
	os.Exit(m.Run())
}

const (
	tokenAcme  = "tok_acme_3c9e1f0a7b5d"
	tokenAdmin = "tok_admin_6a2d8f4c0e1b"
)

// resendSecret signs the Standard Webhooks deliveries of the test's Resend.
var resendSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("mcp-gate-test-secret-0123456789"))

// ledgerEnv is the real API over a memstore, with the tool registry, the
// kill switch and a Standard Webhooks endpoint for Resend.
type ledgerEnv struct {
	store *memstore.Store
	srv   *httptest.Server
}

func newLedger(t *testing.T) *ledgerEnv {
	t.Helper()
	st := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = st.Close() })
	srv, err := api.New(api.Options{
		Store: st, Tokens: map[string]string{tokenAcme: "acme"}, AdminTokens: []string{tokenAdmin},
		Registry: registry.New(st, registry.Options{}), KillSwitch: freeze.New(st, freeze.Options{}),
		PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	wh, err := webhooks.New(webhooks.Options{Store: st, Applied: srv.Signal,
		Standard: []webhooks.StandardEndpoint{{Name: "resend", Tenant: "acme", Secrets: []string{resendSecret}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wh.Close)
	wh.Register(srv.Echo())
	e := &ledgerEnv{store: st, srv: httptest.NewServer(srv.Handler())}
	t.Cleanup(e.srv.Close)
	return e
}

// tools are the registry entries of the upstream's tools.
func tools() []ledger.Tool {
	done := ledger.Checklist{SideEffectDocumented: true, KeyBornInRuntime: true, LedgerOrUniqueField: true,
		TimeoutLeavesUnknown: true, ErrorClassesMapped: true, DuplicateDeliveryTest: true, CheckedBy: "alice"}
	write := func(name string, class ledger.ToolClass, k ledger.KeyPlacement, fields ...string) ledger.Tool {
		return ledger.Tool{Name: name, Vendor: "resend", Class: class, SideEffect: "email", KeyPlacement: k,
			IntentFields: fields, Checklist: done}
	}
	arg := func(a string) ledger.KeyPlacement { return ledger.KeyPlacement{Argument: a} }
	none := ledger.KeyPlacement{None: true}
	return []ledger.Tool{
		write("send_email", ledger.ClassWriteIdempotent, arg("idempotency_key")),
		write("create_ticket", ledger.ClassWriteIdempotent, arg("client_ref"), "title"),
		write("slow_email", ledger.ClassWriteIdempotent, arg("idempotency_key")),
		write("reject_email", ledger.ClassWriteLedger, none),
		write("big_report", ledger.ClassWriteLedger, none),
		write("fail_email", ledger.ClassWriteLedger, none),
		{Name: "get_email", Vendor: "resend", Class: ledger.ClassRead},
	}
}

func (e *ledgerEnv) client(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url, tokenAcme, client.WithRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *ledgerEnv) register(t *testing.T, ts ...ledger.Tool) {
	t.Helper()
	c := e.client(t, e.srv.URL)
	for _, tool := range ts {
		if _, _, err := c.PutTool(context.Background(), tool); err != nil {
			t.Fatalf("register %s: %v", tool.Name, err)
		}
	}
}

// rows returns the tenant's rows, newest first.
func (e *ledgerEnv) rows(t *testing.T) []ledger.Row {
	t.Helper()
	page, err := e.store.List(context.Background(), ledger.ListQuery{Tenant: "acme", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return page.Rows
}

// admin sends one admin request to the API.
func (e *ledgerEnv) admin(t *testing.T, method, path, body string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tokenAdmin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
}

// deliver posts Resend's signed email.sent event for the row's local id.
func (e *ledgerEnv) deliver(t *testing.T, localID string) {
	t.Helper()
	body, err := fixtures.Set(fixtures.Load("resend/email.sent"), "metadata_local_id", localID)
	if err != nil {
		t.Fatal(err)
	}
	h, err := fixtures.SignStandard("msg_"+localID, body, time.Now(), resendSecret)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/webhooks/standard/resend", bytes.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook: %d", resp.StatusCode)
	}
}

// session is a client session of a gate in front of the in-process
// upstream, over in-memory transports.
type session struct {
	*mcp.ClientSession
	gate     *mcpgate.Gate
	upstream *mcptest.Log
	// upstreamServer is the in-process upstream (nil for a child process).
	upstreamServer *mcp.Server
	// listChanged receives the gate's tools/list_changed notifications.
	listChanged chan struct{}
}

type gateOpt func(*mcpgate.Options)

func withTimeout(d time.Duration) gateOpt { return func(o *mcpgate.Options) { o.CallTimeout = d } }
func strict() gateOpt                     { return func(o *mcpgate.Options) { o.Strict = true } }

// connect starts a gate whose ledger is at ledgerURL and a client session
// of it.
func connect(t *testing.T, e *ledgerEnv, ledgerURL string, opts ...gateOpt) *session {
	t.Helper()
	ctx := context.Background()
	log := mcptest.NewLog("")
	upT, gateUpT := mcp.NewInMemoryTransports()
	up := mcptest.NewServer(log)
	ss, err := up.Connect(ctx, upT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	o := mcpgate.Options{Ledger: e.client(t, ledgerURL), RunID: "run_mcp", CallTimeout: 5 * time.Second, ReportTimeout: 2 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	g, err := mcpgate.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Open(ctx, gateUpT); err != nil {
		t.Fatalf("Open: %v", err)
	}
	s := serve(t, g, log)
	s.upstreamServer = up
	return s
}

// serve serves a client session of an open gate.
func serve(t *testing.T, g *mcpgate.Gate, log *mcptest.Log) *session {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srvT, cliT := mcp.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, srvT) }()
	changed := make(chan struct{}, 16)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	}).Connect(ctx, cliT, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		// A test whose upstream fails may end the session; its calls say so.
		if err := <-served; err != nil && ctx.Err() == nil && !errors.Is(err, mcpgate.ErrUpstreamEnded) {
			t.Errorf("Serve: %v", err)
		}
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &session{ClientSession: cs, gate: g, upstream: log, listChanged: changed}
}

// call calls a tool of the gate; a protocol error fails the test.
func (s *session) call(t *testing.T, name string, args map[string]any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func resultJSON(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// proxy is a ledger in front of the real one whose answers a test breaks:
// fail returns "" to forward the request, or how to answer instead —
// "json" (a 200 that is not JSON), "5xx" (a 502 page), "drop" (the
// connection closed without an answer).
func proxy(t *testing.T, target string, fail func(r *http.Request) string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch fail(r) {
		case "":
			rp.ServeHTTP(w, r)
		case "json":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("<html>all good</html>"))
		case "5xx":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		case "drop":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		default:
			t.Errorf("proxy: unknown failure")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}
