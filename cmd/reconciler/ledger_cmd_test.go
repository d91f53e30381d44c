package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

// Tokens of the ledger command's fixture: long and distinctive, so a test
// can assert they never reach stdout or stderr.
const (
	ledgerAdminToken  = "tok_admin_ledgercmd_5b7d9f1e3a"
	ledgerTenantToken = "tok_tenant_ledgercmd_8c6a4e2d0f"
)

var ledgerT0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// ledgerFixture is the real API over a memstore, served on a loopback port.
type ledgerFixture struct {
	t     *testing.T
	store *memstore.Store
	url   string
}

func newLedgerFixture(t *testing.T) *ledgerFixture {
	t.Helper()
	st := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = st.Close() })
	srv, err := api.New(api.Options{
		Store:       st,
		Tokens:      map[string]string{ledgerTenantToken: "acme"},
		AdminTokens: []string{ledgerAdminToken},
		Policy:      ledger.DefaultPolicy(),
		Now:         func() time.Time { return ledgerT0.Add(time.Hour) },
	})
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &ledgerFixture{t: t, store: st, url: hs.URL}
}

// claim inserts a row for tenant acme first seen at ledgerT0+i minutes;
// timeout makes it unknown, as a vendor call that never answered.
func (f *ledgerFixture) claim(i int, key, runID string, timeout bool) ledger.Row {
	f.t.Helper()
	at := ledgerT0.Add(time.Duration(i) * time.Minute)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: runID, Tool: "stripe.charge", ToolCallID: fmt.Sprintf("call_%d", i),
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, Key: key,
		Intent: json.RawMessage(fmt.Sprintf(`{"amount":%d,"currency":"usd"}`, 1000+i)),
		Expect: &ledger.Expect{Amount: int64(1000 + i), Currency: "usd"},
	}, ledger.DefaultPolicy(), at)
	if err != nil {
		f.t.Fatalf("NewClaim: %v", err)
	}
	res, err := f.store.Claim(context.Background(), c)
	if err != nil {
		f.t.Fatalf("Claim %s: %v", key, err)
	}
	if !timeout {
		return res.Row
	}
	row, _, err := f.store.Report(context.Background(), "acme", key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: at.Add(time.Second)})
	if err != nil {
		f.t.Fatalf("Report %s: %v", key, err)
	}
	return row
}

// run drives runLedger with the fixture's URL and the given environment.
func (f *ledgerFixture) run(env map[string]string, args ...string) (code int, stdout, stderr string) {
	f.t.Helper()
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		switch k {
		case config.EnvAdminToken:
			return ledgerAdminToken
		case ledgerEnvURL:
			return f.url
		}
		return ""
	}
	var out, errb bytes.Buffer
	code = runLedger(context.Background(), args, &out, &errb, getenv)
	for _, tok := range []string{ledgerAdminToken, ledgerTenantToken, "tok_wrong_ledgercmd"} {
		if strings.Contains(out.String(), tok) || strings.Contains(errb.String(), tok) {
			f.t.Errorf("a token reached the output of %q", args)
		}
	}
	return code, out.String(), errb.String()
}

func TestLedgerShow(t *testing.T) {
	f := newLedgerFixture(t)
	// A business key with every character a path or query would misread.
	const key = "cart/42?x=1#frag%2F/.."
	f.claim(1, key, "run_a", true)

	t.Run("text", func(t *testing.T) {
		code, out, errOut := f.run(nil, "show", key, "--tenant", "acme")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		fields := ledgerShowFields(out)
		for name, want := range map[string]string{
			"key": key, "tenant": "acme", "status": "unknown", "run_id": "run_a", "tool": "stripe.charge",
			"tool_call_id": "call_1", "vendor": "stripe", "tool_class": "write_idempotent", "attempt": "1",
			"expect.amount": "1001", "expect.currency": "usd", "paged_at": "-", "resolution": "-",
			"first_seen_at": "2026-11-30T09:01:00Z", "idempotent_replayed": "false",
		} {
			if got := fields[name]; got != want {
				t.Errorf("%s: got %q, want %q\n%s", name, got, want, out)
			}
		}
	})
	t.Run("json", func(t *testing.T) {
		code, out, errOut := f.run(nil, "show", "--json", "--tenant", "acme", key)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var r ledger.Row
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		if r.Key != key || r.Status != ledger.StatusUnknown {
			t.Errorf("got %s %s, want %s unknown", r.Key, r.Status, key)
		}
		if strings.Count(out, "\n") != 1 {
			t.Errorf("want one line, got %q", out)
		}
	})
}

// ledgerShowFields parses show's "name  value" lines.
func ledgerShowFields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		name, value, _ := strings.Cut(line, " ")
		m[name] = strings.TrimSpace(value)
	}
	return m
}

// TestLedgerShowEveryField proves show prints every field of ledger.Row,
// including nested ones, and a field this build does not know.
func TestLedgerShowEveryField(t *testing.T) {
	yes := true
	row := ledger.Row{
		Tenant: "acme", Key: "k1", IntentFingerprint: "fp", MetadataLocalID: "rl_1", RunID: "run", Tool: "t",
		ToolCallID: "c", Vendor: "stripe", ToolClass: ledger.ClassWriteLedger, Status: ledger.StatusSucceeded,
		Attempt: 2, VendorKey: "vk1", UpstreamReceiptID: "pi_1", IdempotentReplayed: true, VendorShouldRetry: &yes, LastHTTPStatus: 200,
		Result:      `{"content":[]}`,
		FirstSeenAt: ledgerT0, UpdatedAt: ledgerT0, SucceededAt: ledgerT0, PagedAt: ledgerT0, PendingUntil: ledgerT0,
		ReplayWindowUntil: ledgerT0, NextCheckAt: ledgerT0, CompensationOf: "k0", CompensationAction: "refund",
		Request:    &ledger.Request{Method: "POST", Path: "/v1/charges", ContentType: "x", Body: "a=1\tb"},
		Expect:     &ledger.Expect{Amount: 5, Currency: "usd"},
		Resolution: &ledger.Resolution{Source: ledger.SourceHuman, VendorEventID: "evt", Actor: "ann", Note: "line1\nline2\x1b[31m", At: ledgerT0},
		Alerts:     []ledger.Alert{{Kind: ledger.AlertMismatch, Source: ledger.SourceWebhook, VendorEventID: "evt2", Detail: "d", At: ledgerT0}},
		Autonomy:   ledger.AutonomyApproval,
		Approval: &ledger.Approval{ID: "ap_1", State: ledger.ApprovalGranted, Reason: "policy: false", RequestedAt: ledgerT0, ExpiresAt: ledgerT0,
			RequestedBy: "tok_a", Actor: "ann", Note: "ok", DecidedBy: "tok_b", DecidedAt: ledgerT0},
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	rowJSON, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	raw := strings.TrimSuffix(string(rowJSON), "}") + `,"future_field":{"x":1}}`
	var out bytes.Buffer
	if err := ledgerPrintRow(&out, json.RawMessage(raw), false); err != nil {
		t.Fatalf("print: %v", err)
	}
	fields := ledgerShowFields(out.String())
	var names []string
	collectJSONNames("", reflect.TypeOf(row), &names)
	names = append(names, "future_field.x")
	for _, n := range names {
		v, ok := fields[n]
		if !ok || v == "-" || v == "" {
			t.Errorf("field %s: got %q, want its value\n%s", n, v, out.String())
		}
	}
	for _, tc := range []struct{ name, want string }{
		{name: "resolution.note", want: `"line1\nline2\x1b[31m"`},
		{name: "request.body", want: `"a=1\tb"`},
		{name: "vendor_should_retry", want: "true"},
		{name: "attempt", want: "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fields[tc.name]; got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("an escape sequence reached the terminal: %q", out.String())
	}
}

// collectJSONNames lists the flattened JSON names of t's fields
// (resolution.actor, alerts[0].kind).
func collectJSONNames(prefix string, t reflect.Type, names *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		full := prefix + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}):
			collectJSONNames(full+".", ft, names)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			collectJSONNames(full+"[0].", ft.Elem(), names)
		default:
			*names = append(*names, full)
		}
	}
}

func TestLedgerList(t *testing.T) {
	f := newLedgerFixture(t)
	const total = 7
	for i := range total {
		f.claim(i, fmt.Sprintf("key/%d", i), fmt.Sprintf("run_%d", i%2), i%3 == 0)
	}
	// Newest first: key/6 … key/0.
	newestFirst := func(keys ...int) []string {
		var s []string
		for _, k := range keys {
			s = append(s, fmt.Sprintf("key/%d", k))
		}
		return s
	}

	cases := []struct {
		name       string
		args       []string
		want       []string
		wantMore   bool
		wantNoRows bool
	}{
		{name: "one page", args: []string{"--limit", "3"}, want: newestFirst(6, 5, 4), wantMore: true},
		{name: "all pages", args: []string{"--limit", "3", "--all"}, want: newestFirst(6, 5, 4, 3, 2, 1, 0)},
		{name: "default limit", args: nil, want: newestFirst(6, 5, 4, 3, 2, 1, 0)},
		{name: "status", args: []string{"--status", "unknown", "--all", "--limit", "1"}, want: newestFirst(6, 3, 0)},
		{name: "run id", args: []string{"--run-id", "run_1"}, want: newestFirst(5, 3, 1)},
		{name: "both filters", args: []string{"--run-id", "run_1", "--status", "unknown"}, want: newestFirst(3)},
		{name: "nothing matches", args: []string{"--status", "failed_poison"}, wantNoRows: true},
	}
	for _, tc := range cases {
		t.Run(tc.name+"/json", func(t *testing.T) {
			code, out, errOut := f.run(nil, append([]string{"list", "--tenant", "acme", "--json"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if line == "" {
					continue
				}
				var r ledger.Row
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				got = append(got, r.Key)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if more := strings.Contains(errOut, "--cursor"); more != tc.wantMore {
				t.Errorf("more-rows hint %v, want %v: %q", more, tc.wantMore, errOut)
			}
		})
		t.Run(tc.name+"/table", func(t *testing.T) {
			code, out, errOut := f.run(nil, append([]string{"list", "--tenant", "acme"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if got := strings.Fields(lines[0]); !reflect.DeepEqual(got, []string{"KEY", "STATUS", "RUN_ID", "TOOL", "VENDOR", "ATTEMPT", "RECEIPT", "UPDATED_AT", "PAGED"}) {
				t.Errorf("header %v", got)
			}
			var got []string
			for _, l := range lines[1:] {
				cells := strings.Fields(l)
				if len(cells) != 9 {
					t.Fatalf("row %q: %d cells, want 9", l, len(cells))
				}
				got = append(got, cells[0])
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if noRows := strings.Contains(errOut, "no rows"); noRows != tc.wantNoRows {
				t.Errorf("no-rows note %v, want %v: %q", noRows, tc.wantNoRows, errOut)
			}
		})
	}

	t.Run("cursor from the hint", func(t *testing.T) {
		_, _, errOut := f.run(nil, "list", "--tenant", "acme", "--limit", "4", "--json")
		fields := strings.Fields(errOut)
		i := strings.Index(errOut, "--cursor ")
		if i < 0 || len(fields) < 5 {
			t.Fatalf("no cursor in %q", errOut)
		}
		cursor := strings.Fields(errOut[i+len("--cursor "):])[0]
		cursor = strings.TrimSuffix(cursor, ",")
		code, out, errOut := f.run(nil, "list", "--tenant", "acme", "--limit", "4", "--json", "--cursor", cursor)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if n := strings.Count(out, "\n"); n != 3 {
			t.Errorf("got %d rows after the cursor, want 3: %q", n, out)
		}
	})
}

func TestLedgerResolve(t *testing.T) {
	f := newLedgerFixture(t)
	const key = "order/2026/77"
	f.claim(1, key, "run_a", true)
	f.claim(2, "other", "run_a", true)

	code, out, errOut := f.run(map[string]string{"USER": "ann"},
		"resolve", key, "--tenant", "acme", "--status", "succeeded", "--receipt-id", "pi_123", "--note", "found in the Stripe dashboard")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	fields := ledgerShowFields(out)
	for name, want := range map[string]string{
		"key": key, "status": "succeeded", "upstream_receipt_id": "pi_123",
		"resolution.source": "human", "resolution.actor": "ann", "resolution.note": "found in the Stripe dashboard",
	} {
		if got := fields[name]; got != want {
			t.Errorf("printed %s: got %q, want %q", name, got, want)
		}
	}
	// The store, not just the output, holds who and why.
	row, err := f.store.Get(context.Background(), "acme", key)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != ledger.StatusSucceeded || row.Resolution == nil || row.Resolution.Actor != "ann" ||
		row.Resolution.Note != "found in the Stripe dashboard" || row.UpstreamReceiptID != "pi_123" {
		t.Errorf("stored row: %+v %+v", row, row.Resolution)
	}

	t.Run("actor flag over USER, json", func(t *testing.T) {
		code, out, errOut := f.run(map[string]string{"USER": "ann"},
			"resolve", "--tenant", "acme", "other", "--status", "failed_poison", "--note", "card declined by hand", "--actor", "bob", "--json")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var r ledger.Row
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		if r.Status != ledger.StatusFailedPoison || r.Resolution == nil || r.Resolution.Actor != "bob" {
			t.Errorf("got %s %+v", r.Status, r.Resolution)
		}
	})
	t.Run("settled row refuses another status", func(t *testing.T) {
		code, _, errOut := f.run(nil, "resolve", key, "--tenant", "acme", "--status", "failed_poison", "--note", "oops")
		if code != 1 || !strings.HasPrefix(errOut, "reconciler ledger: 409 invalid_transition: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("exit %d, stderr %q; want 1 and one 409 invalid_transition line", code, errOut)
		}
	})
}

func TestLedgerErrors(t *testing.T) {
	f := newLedgerFixture(t)
	f.claim(1, "k1", "run_a", true)

	cases := []struct {
		name       string
		env        map[string]string
		args       []string
		wantCode   int
		wantStderr string // prefix of stderr
	}{
		{name: "no subcommand", wantCode: 2, wantStderr: "reconciler ledger: want a subcommand"},
		{name: "unknown subcommand", args: []string{"delete"}, wantCode: 2, wantStderr: `reconciler ledger: unknown subcommand "delete"`},
		{name: "unknown flag", args: []string{"list", "--tenant", "acme", "--token", "x"}, wantCode: 2, wantStderr: "reconciler ledger: flag provided but not defined: -token"},
		{name: "missing tenant", args: []string{"list"}, wantCode: 2, wantStderr: "reconciler ledger: --tenant is required"},
		{name: "missing token", env: map[string]string{config.EnvAdminToken: ""}, args: []string{"list", "--tenant", "acme"}, wantCode: 2, wantStderr: "reconciler ledger: RECONCILER_ADMIN_TOKEN is not set"},
		{name: "token with space", env: map[string]string{config.EnvAdminToken: "a b"}, args: []string{"list", "--tenant", "acme"}, wantCode: 2, wantStderr: "reconciler ledger: RECONCILER_ADMIN_TOKEN holds white space"},
		{name: "unknown token", env: map[string]string{config.EnvAdminToken: "tok_wrong_ledgercmd"}, args: []string{"show", "k1", "--tenant", "acme"}, wantCode: 1, wantStderr: "reconciler ledger: 401 unauthorized: missing or unknown bearer token\n"},
		{name: "tenant token", env: map[string]string{config.EnvAdminToken: ledgerTenantToken}, args: []string{"resolve", "k1", "--tenant", "acme", "--status", "succeeded", "--note", "n"}, wantCode: 1, wantStderr: "reconciler ledger: 403 forbidden: this route needs an admin token\n"},
		{name: "no such key", args: []string{"show", "nope/1", "--tenant", "acme"}, wantCode: 1, wantStderr: "reconciler ledger: 404 not_found: no such claim\n"},
		{name: "other tenant's key", args: []string{"show", "k1", "--tenant", "globex"}, wantCode: 1, wantStderr: "reconciler ledger: 404 not_found: no such claim\n"},
		{name: "resolve no such key", args: []string{"resolve", "nope", "--tenant", "acme", "--status", "succeeded", "--note", "n"}, wantCode: 1, wantStderr: "reconciler ledger: 404 not_found: no such claim\n"},
		{name: "show without key", args: []string{"show", "--tenant", "acme"}, wantCode: 2, wantStderr: "reconciler ledger: show wants exactly one KEY, got 0"},
		{name: "show two keys", args: []string{"show", "a", "b", "--tenant", "acme"}, wantCode: 2, wantStderr: "reconciler ledger: show wants exactly one KEY, got 2"},
		{name: "list with argument", args: []string{"list", "k1", "--tenant", "acme"}, wantCode: 2, wantStderr: `reconciler ledger: list takes no arguments`},
		{name: "resolve bad status", args: []string{"resolve", "k1", "--tenant", "acme", "--status", "unknown", "--note", "n"}, wantCode: 2, wantStderr: `reconciler ledger: --status "unknown": want succeeded or failed_poison`},
		{name: "resolve no status", args: []string{"resolve", "k1", "--tenant", "acme", "--note", "n"}, wantCode: 2, wantStderr: `reconciler ledger: --status "": want succeeded or failed_poison`},
		{name: "resolve blank note", args: []string{"resolve", "k1", "--tenant", "acme", "--status", "succeeded", "--note", "  "}, wantCode: 2, wantStderr: "reconciler ledger: --note is required"},
		{name: "list bad status", args: []string{"list", "--tenant", "acme", "--status", "done"}, wantCode: 2, wantStderr: `reconciler ledger: --status "done"`},
		{name: "list bad limit", args: []string{"list", "--tenant", "acme", "--limit", "501"}, wantCode: 2, wantStderr: "reconciler ledger: --limit must be 1 to 500"},
		{name: "list bad cursor", args: []string{"list", "--tenant", "acme", "--cursor", "garbage"}, wantCode: 1, wantStderr: "reconciler ledger: 400 invalid_input: "},
		{name: "bad tenant", args: []string{"list", "--tenant", "Acme Corp"}, wantCode: 2, wantStderr: "reconciler ledger: --tenant: "},
		{name: "bad url scheme", args: []string{"list", "--tenant", "acme", "--url", "ftp://x"}, wantCode: 2, wantStderr: "reconciler ledger: --url ftp://x: want an http"},
		{name: "url with credentials", args: []string{"list", "--tenant", "acme", "--url", "http://u:secretpw@127.0.0.1:1"}, wantCode: 2, wantStderr: "reconciler ledger: --url: credentials belong in"},
		{name: "nothing listening", args: []string{"list", "--tenant", "acme", "--url", "http://127.0.0.1:1"}, wantCode: 1, wantStderr: "reconciler ledger: Get \"http://127.0.0.1:1/v1/claims?tenant=acme\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := f.run(tc.env, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, errOut)
			}
			if !strings.HasPrefix(errOut, tc.wantStderr) {
				t.Errorf("stderr %q, want prefix %q", errOut, tc.wantStderr)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if strings.Contains(errOut, "secretpw") {
				t.Errorf("a password reached stderr: %q", errOut)
			}
		})
	}

	t.Run("help", func(t *testing.T) {
		for _, args := range [][]string{{"--help"}, {"help"}, {"list", "-h"}} {
			code, out, _ := f.run(nil, args...)
			if code != 0 || !strings.HasPrefix(out, "Usage:") {
				t.Errorf("%q: exit %d, stdout %q", args, code, out)
			}
		}
	})
}

// TestLedgerTransport covers answers that are not the API's: a proxy's
// page, a redirect, a node that never answers.
func TestLedgerTransport(t *testing.T) {
	var leaked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(elsewhere.Close)
	release := make(chan struct{})
	var gotPath, gotQuery, gotAuth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath.Store(r.URL.EscapedPath())
		gotQuery.Store(r.URL.RawQuery)
		gotAuth.Store(r.Header.Get("Authorization"))
		switch {
		case strings.HasPrefix(r.URL.Path, "/proxy"):
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "<html>\n<body>upstream\tdown</body></html>")
		case strings.HasPrefix(r.URL.Path, "/moved"):
			http.Redirect(w, r, elsewhere.URL+"/v1/claims", http.StatusTemporaryRedirect)
		case strings.HasPrefix(r.URL.Path, "/hang"):
			select {
			case <-r.Context().Done():
			case <-release:
			}
		case strings.HasPrefix(r.URL.Path, "/loop"):
			fmt.Fprint(w, `{"rows":[],"next_cursor":"same"}`)
		default:
			fmt.Fprint(w, `{"row":{"key":"x","status":"pending"}}`)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	f := &ledgerFixture{t: t, url: srv.URL}
	cases := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{name: "proxy page", args: []string{"show", "k", "--url", srv.URL + "/proxy"}, wantCode: 1, wantStderr: "reconciler ledger: 502 bad_gateway: <html> <body>upstream down</body></html>\n"},
		{name: "redirect not followed", args: []string{"list", "--url", srv.URL + "/moved"}, wantCode: 1, wantStderr: "reconciler ledger: 307 temporary_redirect: redirected to " + elsewhere.URL + "/v1/claims; point --url there\n"},
		{name: "timeout", args: []string{"show", "k", "--url", srv.URL + "/hang", "--timeout", "50ms"}, wantCode: 1, wantStderr: "reconciler ledger: GET " + srv.URL + "/hang/v1/claims/k?tenant=acme: no answer within 50ms"},
		{name: "repeated cursor", args: []string{"list", "--all", "--url", srv.URL + "/loop"}, wantCode: 1, wantStderr: "reconciler ledger: the server repeated a cursor"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := f.run(nil, append(tc.args, "--tenant", "acme")...)
			if code != tc.wantCode || !strings.HasPrefix(errOut, tc.wantStderr) {
				t.Errorf("exit %d, stderr %q; want %d, %q", code, errOut, tc.wantCode, tc.wantStderr)
			}
		})
	}
	if n := leaked.Load(); n != 0 {
		t.Errorf("the token followed a redirect %d times", n)
	}

	t.Run("escaping and prefix", func(t *testing.T) {
		for _, tc := range []struct{ key, wantPath string }{
			{key: "a/b?d#e%f", wantPath: "/api/v1/claims/a%2Fb%3Fd%23e%25f"},
			{key: "..", wantPath: "/api/v1/claims/%2E%2E"},
			{key: ".", wantPath: "/api/v1/claims/%2E"},
			{key: "a..b", wantPath: "/api/v1/claims/a..b"},
		} {
			code, _, errOut := f.run(nil, "show", tc.key, "--tenant", "acme", "--url", srv.URL+"/api/")
			if code != 0 {
				t.Fatalf("%q: exit %d, stderr %q", tc.key, code, errOut)
			}
			if got := gotPath.Load(); got != tc.wantPath {
				t.Errorf("%q: path %v, want %s", tc.key, got, tc.wantPath)
			}
		}
		if got := gotQuery.Load(); got != "tenant=acme" {
			t.Errorf("query %v", got)
		}
		if got := gotAuth.Load(); got != "Bearer "+ledgerAdminToken {
			t.Errorf("authorization header is not the admin token")
		}
	})
	t.Run("plain http to another host warns", func(t *testing.T) {
		code, _, errOut := f.run(nil, "list", "--tenant", "acme", "--url", "http://192.0.2.1:1", "--timeout", "1ms")
		if code != 1 || !strings.HasPrefix(errOut, "reconciler ledger: warning: sending the admin token over plain http to 192.0.2.1:1\n") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}
