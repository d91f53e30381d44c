package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/console"
	"github.com/agentledger/reconciler/ledger"
)

const mailClaim = `{"run_id": "run_1", "tool": "email.send", "tool_call_id": "call_1", "vendor": "resend",
	"tool_class": "write_ledger", "intent": {"to": "ap@example.com"}}`

func TestSignIn(t *testing.T) {
	cases := []struct {
		name, token, actor string
		badCSRF            bool
		want               int
		wantText           string
	}{
		{name: "admin", token: adminToken, actor: "alice", want: http.StatusSeeOther},
		{name: "approver", token: acmeApprover, actor: "bob", want: http.StatusSeeOther},
		{name: "tenant token", token: acmeToken, actor: "eve", want: http.StatusUnauthorized, wantText: "admin or approver token"},
		{name: "unknown token", token: "not-a-token-0123456789", actor: "eve", want: http.StatusUnauthorized, wantText: "admin or approver token"},
		{name: "no name", token: adminToken, actor: " ", want: http.StatusBadRequest, wantText: "Your name is required"},
		{name: "stale form", token: adminToken, actor: "alice", badCSRF: true, want: http.StatusForbidden, wantText: "The form expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			b := f.browser()
			b.get("/console/signin")
			csrf := b.csrf()
			if tc.badCSRF {
				csrf = "forged"
			}
			a := b.post("/console/signin", url.Values{"csrf": {csrf}, "actor": {tc.actor}, "token": {tc.token}})
			if a.Status != tc.want {
				t.Fatalf("status %d, want %d\n%s", a.Status, tc.want, a.Body)
			}
			if !strings.Contains(a.Body, tc.wantText) {
				t.Fatalf("body lacks %q:\n%s", tc.wantText, a.Body)
			}
			if strings.Contains(a.Body, tc.token) || strings.Contains(f.log.String(), tc.token) {
				t.Fatal("the token was echoed in a page or written to the log")
			}
			if tc.want != http.StatusSeeOther {
				if got := b.get("/console/attention"); got.Status != http.StatusSeeOther || got.Location != "/console/signin" {
					t.Fatalf("after a failed sign-in the console answers %d %s", got.Status, got.Location)
				}
				return
			}
			var session *http.Cookie
			for _, c := range (&http.Response{Header: a.Header}).Cookies() {
				if c.Name == "reconciler_console" {
					session = c
				}
			}
			if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Secure ||
				session.Path != "/console" || session.MaxAge != int((8*time.Hour)/time.Second) || strings.Contains(session.Value, tc.token) {
				t.Fatalf("session cookie %+v", session)
			}
			page := b.get("/console/attention")
			if page.Status != http.StatusOK || strings.Contains(page.Body, tc.token) {
				t.Fatalf("attention: %d (token on the page: %v)", page.Status, strings.Contains(page.Body, tc.token))
			}
		})
	}
}

func TestSecureCookie(t *testing.T) {
	cases := []struct {
		name   string
		opt    bool
		header string
		want   bool
	}{
		{name: "plain http", want: false},
		{name: "behind a TLS proxy", header: "https", want: true},
		{name: "configured", opt: true, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *console.Options) { o.SecureCookie = tc.opt })
			b := f.browser()
			b.get("/console/signin")
			a := b.post("/console/signin", url.Values{"csrf": {b.csrf()}, "actor": {"alice"}, "token": {adminToken}}, "X-Forwarded-Proto", tc.header)
			var secure, found bool
			for _, c := range (&http.Response{Header: a.Header}).Cookies() {
				if c.Name == "reconciler_console" {
					found, secure = true, c.Secure
				}
			}
			if !found || secure != tc.want {
				t.Fatalf("session cookie found %v, Secure %v, want %v", found, secure, tc.want)
			}
		})
	}
}

// TestHeaders: every answer carries the strict CSP; every page that may
// show tenant data is no-store; the static assets may be cached.
func TestHeaders(t *testing.T) {
	f := newFixture(t)
	key := f.claim(acmeToken, mailClaim, http.StatusCreated)
	b := f.browser()
	b.signIn(adminToken, "alice")
	for _, path := range []string{"/console/signin", "/console/attention", "/console/attention?tenant=globex", rowPath("acme", key),
		"/console/run?tenant=acme&run_id=run_1", "/console/search?tenant=acme&q=call_1", "/console/tools?tenant=acme",
		"/console/row?tenant=acme&key=nope", "/console/nowhere"} {
		a := b.get(path)
		if a.Status >= 500 {
			t.Errorf("%s: %d", path, a.Status)
		}
		csp := a.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if cc := a.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", path, cc)
		}
		if a.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
		if strings.Contains(a.Body, "<script>") || inlineHandler.MatchString(a.Body) {
			t.Errorf("%s: inline script", path)
		}
	}
	for _, path := range []string{"/console/static/console.css", "/console/static/console.js"} {
		a := b.get(path)
		if a.Status != http.StatusOK || a.Header.Get("Content-Security-Policy") == "" || a.Header.Get("Cache-Control") == "no-store" {
			t.Errorf("%s: %d, headers %v", path, a.Status, a.Header)
		}
	}
}

// inlineHandler is an event handler attribute, which the CSP would block.
var inlineHandler = regexp.MustCompile(`\son[a-z]+\s*=`)

// TestFormsNeedCSRF: a form without the session's token, from another
// origin, or without a session is refused, and nothing changes.
func TestFormsNeedCSRF(t *testing.T) {
	f := newFixture(t)
	key := f.claim(acmeToken, mailClaim, http.StatusCreated)
	b := f.browser()
	b.signIn(adminToken, "alice")
	b.get(rowPath("acme", key))
	good := url.Values{"csrf": {b.csrf()}, "tenant": {"acme"}, "key": {key}, "status": {"failed_poison"}, "note": {"n"}}
	forged := url.Values{"tenant": {"acme"}, "key": {key}, "status": {"failed_poison"}, "note": {"n"}}
	if a := b.post("/console/actions/resolve", forged); a.Status != http.StatusForbidden {
		t.Fatalf("no CSRF token: %d", a.Status)
	}
	forged.Set("csrf", "guess")
	if a := b.post("/console/actions/resolve", forged); a.Status != http.StatusForbidden {
		t.Fatalf("a wrong CSRF token: %d", a.Status)
	}
	if a := b.post("/console/actions/resolve", good, "Origin", "https://evil.example"); a.Status != http.StatusForbidden {
		t.Fatalf("another origin: %d", a.Status)
	}
	if a := f.browser().post("/console/actions/resolve", good); a.Status != http.StatusUnauthorized {
		t.Fatalf("no session: %d", a.Status)
	}
	if r := f.row("acme", key); r.Status != ledger.StatusPending {
		t.Fatalf("a refused form changed the row: %s", r.Status)
	}
}

func TestSessionEnds(t *testing.T) {
	t.Run("sign out", func(t *testing.T) {
		f := newFixture(t)
		b := f.browser()
		b.signIn(adminToken, "alice")
		cookies := b.c.Jar.Cookies(mustURL(t, f.srv.URL+"/console/"))
		b.form("/console/attention", "/console/signout", url.Values{})
		// The old cookie, replayed, is worth nothing.
		old := f.browser()
		old.c.Jar.SetCookies(mustURL(t, f.srv.URL+"/console/"), cookies)
		if a := old.get("/console/attention"); a.Status != http.StatusSeeOther || a.Location != "/console/signin" {
			t.Fatalf("after sign-out the old cookie gets %d %s", a.Status, a.Location)
		}
	})
	t.Run("expiry", func(t *testing.T) {
		f := newFixture(t, func(o *console.Options) { o.SessionTTL = time.Hour })
		b := f.browser()
		b.signIn(adminToken, "alice")
		f.clock.Advance(59 * time.Minute)
		if a := b.get("/console/attention"); a.Status != http.StatusOK {
			t.Fatalf("inside the TTL: %d", a.Status)
		}
		f.clock.Advance(2 * time.Minute)
		if a := b.get("/console/attention"); a.Status != http.StatusSeeOther || a.Location != "/console/signin" {
			t.Fatalf("past the TTL: %d %s", a.Status, a.Location)
		}
	})
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

const gatedTool = `{"vendor": "stripe", "class": "write_idempotent", "side_effect": "refund",
	"key_placement": {"header": "Idempotency-Key"}, "autonomy": "approval",
	"checklist": {"side_effect_documented": true, "key_born_in_runtime": true, "ledger_or_unique_field": true,
		"timeout_leaves_unknown": true, "error_classes_mapped": true, "duplicate_delivery_test": true, "checked_by": "carol"}}`

func refundClaim(run string) string {
	return `{"run_id": "` + run + `", "tool": "payments.refund", "vendor": "stripe", "tool_class": "write_idempotent", "intent": {"charge": "ch_1"}}`
}

// TestApproverSeesOnlyItsTenant: an approver's session shows and decides
// its own tenant only; what only an admin may do is refused by the API.
func TestApproverSeesOnlyItsTenant(t *testing.T) {
	f := newFixture(t)
	for _, tok := range []string{acmeToken, globexToken} {
		if code, out := f.apiCall(tok, http.MethodPut, "/v1/tools/payments.refund", gatedTool); code != http.StatusCreated {
			t.Fatalf("PUT tool: %d %v", code, out)
		}
	}
	acmeKey := f.claim(acmeToken, refundClaim("run_a"), http.StatusAccepted)
	globexKey := f.claim(globexToken, refundClaim("run_g"), http.StatusAccepted)
	mailKey := f.claim(acmeToken, mailClaim, http.StatusCreated)

	b := f.browser()
	b.signIn(acmeApprover, "bob")
	page := b.get("/console/attention")
	mustContain(t, "the approver's attention page", page.Body, acmeKey[:12], "Tenant acme")
	if strings.Contains(page.Body, globexKey[:12]) || strings.Contains(page.Body, "globex") {
		t.Fatalf("the acme approver sees globex:\n%s", page.Body)
	}
	for _, path := range []string{"/console/attention?tenant=globex", rowPath("globex", globexKey), "/console/tools?tenant=globex",
		"/console/run?tenant=globex&run_id=run_g", "/console/search?tenant=globex&q=" + globexKey} {
		if a := b.get(path); a.Status != http.StatusForbidden || strings.Contains(a.Body, globexKey[:12]) {
			t.Errorf("%s: %d", path, a.Status)
		}
	}
	// Deciding another tenant's request: refused before any call.
	b.get(rowPath("acme", acmeKey))
	a := b.post("/console/actions/approve", url.Values{"csrf": {b.csrf()}, "tenant": {"globex"}, "key": {globexKey}, "note": {"x"}})
	if a.Status != http.StatusSeeOther {
		t.Fatalf("approve globex: %d", a.Status)
	}
	if r := f.row("globex", globexKey); r.Approval.State != ledger.ApprovalRequested {
		t.Fatalf("the acme approver decided globex's request: %s", r.Approval.State)
	}
	// Resolving is the admin's: the API refuses the approver's token.
	page = b.form(rowPath("acme", mailKey), "/console/actions/resolve",
		url.Values{"tenant": {"acme"}, "key": {mailKey}, "status": {"failed_poison"}, "note": {"x"}})
	mustContain(t, "the refused resolve", page.Body, "refused", "an approver token only reads and decides approvals")
	if r := f.row("acme", mailKey); r.Status != ledger.StatusPending {
		t.Fatalf("an approver resolved a row: %s", r.Status)
	}
	// Its own tenant's request: approved, recorded with its name and token.
	page = b.form(rowPath("acme", acmeKey), "/console/actions/approve", url.Values{"tenant": {"acme"}, "key": {acmeKey}, "note": {"ok"}})
	mustContain(t, "the approval", page.Body, "Approve: done", "Approved", "by bob")
	r := f.row("acme", acmeKey)
	if r.Approval.State != ledger.ApprovalGranted || r.Approval.Actor != "bob" || r.Approval.Note != "ok" || r.Approval.DecidedBy == "" {
		t.Fatalf("approval %+v", r.Approval)
	}
}

// TestActionsWithoutJavaScript: every action is a plain form post that
// the API applies, with the signed-in name as the actor.
func TestActionsWithoutJavaScript(t *testing.T) {
	f := newFixture(t)
	if code, out := f.apiCall(acmeToken, http.MethodPut, "/v1/tools/payments.refund", gatedTool); code != http.StatusCreated {
		t.Fatalf("PUT tool: %d %v", code, out)
	}
	mailKey := f.claim(acmeToken, mailClaim, http.StatusCreated)
	if code, out := f.apiCall(acmeToken, http.MethodPost, "/v1/claims/"+mailKey+"/outcome", `{"kind": "timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome: %d %v", code, out)
	}
	denyKey := f.claim(acmeToken, refundClaim("run_d"), http.StatusAccepted)
	b := f.browser()
	b.signIn(adminToken, "alice")

	t.Run("resolve needs a receipt for a success, and a note", func(t *testing.T) {
		page := b.form(rowPath("acme", mailKey), "/console/actions/resolve", url.Values{"tenant": {"acme"}, "key": {mailKey}, "status": {"succeeded"}, "note": {"seen"}})
		mustContain(t, "page", page.Body, "a success needs the vendor&#39;s receipt id")
		page = b.form(rowPath("acme", mailKey), "/console/actions/resolve", url.Values{"tenant": {"acme"}, "key": {mailKey}, "status": {"succeeded"}, "receipt_id": {"msg_1"}})
		mustContain(t, "page", page.Body, "a note is required")
		if r := f.row("acme", mailKey); r.Status != ledger.StatusUnknown {
			t.Fatalf("row %s", r.Status)
		}
	})
	t.Run("resolve", func(t *testing.T) {
		page := b.form(rowPath("acme", mailKey), "/console/actions/resolve",
			url.Values{"tenant": {"acme"}, "key": {mailKey}, "status": {"succeeded"}, "receipt_id": {"msg_1"}, "note": {"in the Resend dashboard"}})
		mustContain(t, "page", page.Body, "Resolve as succeeded: done", "Resolved by hand → succeeded", "by alice; note: in the Resend dashboard")
		r := f.row("acme", mailKey)
		if r.Status != ledger.StatusSucceeded || r.UpstreamReceiptID != "msg_1" || r.Resolution.Actor != "alice" || r.Resolution.Source != ledger.SourceHuman {
			t.Fatalf("row %+v", r)
		}
	})
	t.Run("deny", func(t *testing.T) {
		page := b.form(rowPath("acme", denyKey), "/console/actions/deny", url.Values{"tenant": {"acme"}, "key": {denyKey}, "note": {"not this customer"}})
		mustContain(t, "page", page.Body, "Deny: done", "Denied")
		if r := f.row("acme", denyKey); r.Status != ledger.StatusFailedPoison || r.Approval.State != ledger.ApprovalDenied || r.Approval.Actor != "alice" {
			t.Fatalf("row %+v", r)
		}
	})
	t.Run("freeze and unfreeze", func(t *testing.T) {
		page := b.form("/console/tools?tenant=acme", "/console/actions/freeze", url.Values{"tenant": {"acme"}, "target": {"write_ledger"}, "note": {"incident"}})
		mustContain(t, "page", page.Body, "Freeze write_ledger: done", "frozen by alice")
		f.claim(acmeToken, `{"run_id": "run_2", "tool": "email.send", "vendor": "resend", "tool_class": "write_ledger", "intent": {"to": "x"}}`, http.StatusLocked)
		page = b.form("/console/tools?tenant=acme", "/console/actions/unfreeze", url.Values{"tenant": {"acme"}, "target": {"write_ledger"}})
		mustContain(t, "page", page.Body, "Unfreeze: a note is required")
		page = b.form("/console/tools?tenant=acme", "/console/actions/unfreeze", url.Values{"tenant": {"acme"}, "target": {"write_ledger"}, "note": {"over"}})
		mustContain(t, "page", page.Body, "Unfreeze write_ledger: done", "Nothing is frozen")
		f.claim(acmeToken, `{"run_id": "run_2", "tool": "email.send", "vendor": "resend", "tool_class": "write_ledger", "intent": {"to": "x"}}`, http.StatusCreated)
	})
	t.Run("redrive", func(t *testing.T) {
		page := b.form("/console/attention", "/console/actions/redrive", url.Values{"note": {"after the NATS outage"}})
		mustContain(t, "page", page.Body, "Redrive: done")
	})
	// Every action is in the API's own log, as a curl's would be.
	log := f.log.String()
	mustContain(t, "the API's log", log, `"msg":"resolved by hand"`, `"msg":"approval decided"`, `"msg":"kill switch: frozen"`, `"msg":"redrive"`)
	if strings.Contains(log, adminToken) {
		t.Fatal("a token in the log")
	}
}

// TestNeedsAttention sorts each kind of open row into its section.
func TestNeedsAttention(t *testing.T) {
	f := newFixture(t)
	outboxTool := strings.Replace(gatedTool, `"autonomy": "approval"`, `"autonomy": "outbox"`, 1)
	for name, tool := range map[string]string{"payments.refund": gatedTool, "payments.later": outboxTool} {
		if code, out := f.apiCall(acmeToken, http.MethodPut, "/v1/tools/"+name, tool); code != http.StatusCreated {
			t.Fatalf("PUT %s: %d %v", name, code, out)
		}
	}
	report := func(key, body string) {
		if code, out := f.apiCall(acmeToken, http.MethodPost, "/v1/claims/"+key+"/outcome", body); code != http.StatusOK {
			t.Fatalf("outcome: %d %v", code, out)
		}
	}
	mail := func(run string) string {
		return `{"run_id": "` + run + `", "tool": "email.send", "vendor": "resend", "tool_class": "write_ledger", "intent": {"to": "` + run + `"}}`
	}
	paged := f.claim(acmeToken, mail("run_paged"), http.StatusCreated)
	report(paged, `{"kind": "timeout"}`)
	late := f.claim(acmeToken, mail("run_late"), http.StatusCreated)
	report(late, `{"kind": "timeout"}`)
	stuck := f.claim(acmeToken, mail("run_stuck"), http.StatusCreated)
	approval := f.claim(acmeToken, refundClaim("run_approval"), http.StatusAccepted)
	queued := f.claim(acmeToken, `{"run_id": "run_queued", "tool": "payments.later", "vendor": "stripe", "tool_class": "write_idempotent",
		"intent": {"charge": "ch_2"}, "request": {"method": "POST", "path": "/v1/refunds", "body": "charge=ch_2"}}`, http.StatusAccepted)
	settled := f.claim(acmeToken, mail("run_ok"), http.StatusCreated)
	report(settled, `{"kind": "response", "http_status": 200, "receipt_id": "msg_9"}`)
	// Past the grace, the queue's minute and the attempt's lease.
	f.clock.Advance(16 * time.Minute)
	if _, first, err := f.store.Escalate(t.Context(), "acme", paged, f.clock.Now()); err != nil || !first {
		t.Fatalf("escalate: %v %v", first, err)
	}
	recent := f.claim(acmeToken, mail("run_recent"), http.StatusCreated)
	report(recent, `{"kind": "timeout"}`)

	b := f.browser()
	b.signIn(adminToken, "alice")
	page := b.get("/console/attention?tenant=acme").Body
	section := func(id string) string {
		i := strings.Index(page, `<section id="`+id+`"`)
		if i < 0 {
			t.Fatalf("no section %s", id)
		}
		rest := page[i:]
		return rest[:strings.Index(rest, "</section>")]
	}
	cases := []struct {
		section string
		in      []string
		out     []string
	}{
		{"paged", []string{paged}, []string{late, stuck, approval, queued, settled, recent}},
		{"unknown", []string{late}, []string{paged, recent, settled}},
		{"stuck", []string{stuck}, []string{approval, queued, settled}},
		{"approvals", []string{approval}, []string{queued, stuck}},
		{"queued", []string{queued}, []string{approval, stuck}},
	}
	for _, tc := range cases {
		s := section(tc.section)
		for _, k := range tc.in {
			if !strings.Contains(s, "key="+k) {
				t.Errorf("section %s lacks %s:\n%s", tc.section, k[:12], s)
			}
		}
		for _, k := range tc.out {
			if strings.Contains(s, "key="+k) {
				t.Errorf("section %s holds %s", tc.section, k[:12])
			}
		}
	}
	// The summary counts acme's five and globex's none.
	mustContain(t, "summary", page, `<td>1</td><td>1</td><td>1</td><td>1</td><td>1</td><td>5</td>`, `<td>0</td><td>0</td><td>0</td><td>0</td><td>0</td><td>0</td>`)
}

// TestRowRunSearch: the row page's fields and links, the run in claim
// order, and search by each id.
func TestRowRunSearch(t *testing.T) {
	f := newFixture(t)
	first := f.claim(acmeToken, `{"run_id": "run_7", "tool": "stripe.charge", "tool_call_id": "call_a", "vendor": "stripe",
		"tool_class": "write_idempotent", "intent": {"amount": 1}}`, http.StatusCreated)
	f.clock.Advance(time.Second)
	second := f.claim(acmeToken, `{"run_id": "run_7", "tool": "email.send", "tool_call_id": "call_b", "vendor": "resend",
		"tool_class": "write_ledger", "intent": {"to": "x"}}`, http.StatusCreated)
	if code, out := f.apiCall(acmeToken, http.MethodPost, "/v1/claims/"+first+"/outcome", `{"kind": "response", "http_status": 200, "receipt_id": "pi_77"}`); code != http.StatusOK {
		t.Fatalf("outcome: %d %v", code, out)
	}
	b := f.browser()
	b.signIn(adminToken, "alice")
	page := b.get(rowPath("acme", first)).Body
	r := f.row("acme", first)
	mustContain(t, "row page", page, first, r.IntentFingerprint, r.MetadataLocalID, "call_a", "run_7",
		`href="https://dashboard.stripe.com/payments/pi_77"`, "Outcome reported → succeeded", "receipt pi_77")

	run := b.get("/console/run?tenant=acme&run_id=run_7").Body
	i, j := strings.Index(run, "key="+first), strings.Index(run, "key="+second)
	if i < 0 || j < 0 || i > j {
		t.Fatalf("run page order: first at %d, second at %d", i, j)
	}
	for q, want := range map[string]string{first: "matched on key", r.MetadataLocalID: "matched on local id", "pi_77": "matched on receipt id", "call_a": "matched on tool call id"} {
		page := b.get("/console/search?" + url.Values{"tenant": {"acme"}, "q": {q}}.Encode()).Body
		mustContain(t, "search "+q, page, want, "key="+first)
	}
	mustContain(t, "search by run", b.get("/console/search?tenant=acme&q=run_7").Body, "2 row(s)")
	mustContain(t, "search for nothing", b.get("/console/search?tenant=acme&q=nothing_here").Body, "Nothing matches")
}

func TestNewRefusesBadOptions(t *testing.T) {
	base := func() console.Options {
		return console.Options{Store: nil, API: http.NotFoundHandler(), Identify: func(string) (console.Identity, bool) { return console.Identity{}, false }, Tenants: []string{"a"}}
	}
	cases := map[string]func(*console.Options){
		"no store":              func(o *console.Options) {},
		"vendor link no holder": func(o *console.Options) { o.VendorLinks = map[string]string{"stripe": "https://x.example/"} },
		"trace url not http":    func(o *console.Options) { o.TraceURL = "javascript:alert({trace_id})" },
		"tenant not a token":    func(o *console.Options) { o.Tenants = []string{"a b"} },
		"no tenants":            func(o *console.Options) { o.Tenants = nil },
		"no identify":           func(o *console.Options) { o.Identify = nil },
		"no api":                func(o *console.Options) { o.API = nil },
	}
	f := newFixture(t)
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			o := base()
			if name != "no store" {
				o.Store = f.store
			}
			mutate(&o)
			if _, err := console.New(o); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

// TestAttentionShowsAll: a section lists its oldest 100 rows and links to
// the whole list.
func TestAttentionShowsAll(t *testing.T) {
	f := newFixture(t)
	for i := range 101 {
		key := f.claim(acmeToken, `{"run_id": "run_many", "tool": "email.send", "vendor": "resend", "tool_class": "write_ledger",
			"intent": {"n": `+strconv.Itoa(i)+`}}`, http.StatusCreated)
		if code, out := f.apiCall(acmeToken, http.MethodPost, "/v1/claims/"+key+"/outcome", `{"kind": "timeout"}`); code != http.StatusOK {
			t.Fatalf("outcome: %d %v", code, out)
		}
	}
	f.clock.Advance(2 * time.Minute)
	b := f.browser()
	b.signIn(adminToken, "alice")
	page := b.get("/console/attention?tenant=acme").Body
	if n := strings.Count(page, `<li class="status-unknown">`); n != 100 || !strings.Contains(page, "Showing the oldest 100 of 101") {
		t.Fatalf("%d rows listed", n)
	}
	page = b.get("/console/attention?tenant=acme&all=unknown").Body
	if n := strings.Count(page, `<li class="status-unknown">`); n != 101 || strings.Contains(page, "Showing the oldest 100") {
		t.Fatalf("show all: %d rows listed", n)
	}
}
