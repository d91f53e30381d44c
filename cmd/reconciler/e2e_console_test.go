package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/nats-io/nats.go"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
)

// chromiumPath finds the browser the console's test drives: $RECONCILER_TEST_CHROME,
// else Debian's chromium (or another Chrome) on the PATH.
func chromiumPath() (string, bool) {
	if p := os.Getenv("RECONCILER_TEST_CHROME"); p != "" {
		return p, true
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// screenshotDir is where the browser test leaves its screenshots:
// $RECONCILER_CONSOLE_SCREENSHOTS when set (CI keeps it as an artifact),
// else a directory of the test's own.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("RECONCILER_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestE2EConsoleBrowser drives the ops console in a real browser against
// the real program: sign in; find a paged row under needs attention; read
// its timeline; resolve it with a note (the NATS event arrives); approve a
// gated claim (the SDK's waiting Do proceeds, and the live feed shows its
// success); freeze a class (the next claim is 423); the run and search
// pages; keyboard and 320 px checks; sign out. Each page's screenshot is
// saved.
func TestE2EConsoleBrowser(t *testing.T) {
	chrome, ok := chromiumPath()
	if !ok {
		t.Skip("Chromium not found: install it (Debian: apt-get install -y chromium) or set RECONCILER_TEST_CHROME to a Chrome binary")
	}
	const (
		acmeToken = "console-acme-token-0123456789"
		approver  = "console-acme-approver-0123456789"
		admin     = "console-admin-token-0123456789"
		// stripeSecret signs the deliveries of the journal's webhook row.
		stripeSecret = "whsec_console_e2e_0123456789"
	)
	cfg := configtest.WriteFile(t, "reconciler.yaml", []byte(`tenants:
  - id: acme
    tokens: ["`+acmeToken+`"]
    approver_tokens: ["`+approver+`"]
  - id: globex
    tokens: ["console-globex-token-0123456789"]
admin_tokens: ["`+admin+`"]
resolver:
  interval: 200ms
  grace: 200ms
stripe:
  endpoints:
    - name: default
      tenant: acme
      secrets: ["`+stripeSecret+`"]
console:
  trace_url: http://jaeger.example/trace/{trace_id}
  vendor_links:
    resend: https://resend.com/emails/{receipt_id}
`))
	// Traced, so each row keeps its claim's trace id for the console to
	// link; the spans go to a receiver that drops them.
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer otlp.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL) // autoexport reads the process's environment
	m := startMain(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL}, "serve", "--config", cfg, "--data", t.TempDir(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()
	base := "http://" + addr
	shots := screenshotDir(t)

	// A row the resolver pages: an email whose send timed out, at a vendor
	// with no lookup and no replay window.
	code, body := call(t, addr, acmeToken, http.MethodPost, "/v1/claims", `{"run_id": "run_mail", "tool": "email.send",
		"tool_call_id": "call_7", "vendor": "resend", "tool_class": "write_ledger", "intent": {"to": "ap@example.com", "invoice": "in_42"}}`)
	if code != http.StatusCreated {
		t.Fatalf("claim: %d %v", code, body)
	}
	paged := rowField(t, body, "key")
	if code, body := call(t, addr, acmeToken, http.MethodPost, "/v1/claims/"+paged+"/outcome", `{"kind": "timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome: %d %v", code, body)
	}
	waitUntil(t, "the row to be paged", func() bool {
		_, body := call(t, addr, acmeToken, http.MethodGet, "/v1/claims/"+paged, "")
		return rowField(t, body, "paged_at") != ""
	})

	nc, err := nats.Connect(m.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	resolved, err := nc.SubscribeSync("recon.acme.run_mail.succeeded")
	if err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1100, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	// The first Run starts the browser, which lives as long as that
	// context: the browser's own, not the deadline below.
	if err := chromedp.Run(bctx); err != nil {
		t.Fatalf("start %s: %v", chrome, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 50*time.Second)
	defer cancel()

	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			var loc, text string
			dctx, cancel := context.WithTimeout(bctx, 3*time.Second)
			defer cancel()
			_ = chromedp.Run(dctx, chromedp.Location(&loc), chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &text))
			t.Fatalf("%s: %v\nat %s:\n%s", what, err, loc, text)
		}
	}
	shot := func(name string) {
		t.Helper()
		var png []byte
		run("screenshot "+name, chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	textOf := func(sel string) string {
		t.Helper()
		var s string
		run("read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
		return s
	}
	flash := func(want string) {
		t.Helper()
		run("wait for the result", chromedp.WaitVisible(".flash", chromedp.ByQuery))
		if got := textOf(".flash"); !strings.Contains(got, want) {
			t.Fatalf("flash %q, want %q", got, want)
		}
	}

	// Sign in: a page asked for before signing in sends the browser to the form.
	run("sign-in page", chromedp.Navigate(base+"/console/attention"), chromedp.WaitVisible("#token", chromedp.ByQuery))
	shot("signin")
	run("sign in",
		chromedp.SendKeys("#actor", "alice", chromedp.ByQuery),
		chromedp.SendKeys("#token", admin, chromedp.ByQuery),
		chromedp.Submit("#token", chromedp.ByQuery),
		chromedp.WaitVisible("#paged", chromedp.ByQuery))

	// Keyboard: the first Tab reaches the skip link, which moves focus to
	// the page's content.
	var focused string
	run("tab to the skip link", chromedp.KeyEvent(kb.Tab), chromedp.Evaluate(`document.activeElement.className`, &focused))
	if focused != "skip" {
		t.Fatalf("first Tab focuses %q, want the skip link", focused)
	}
	run("skip to content", chromedp.KeyEvent(kb.Enter), chromedp.Evaluate(`document.activeElement.id`, &focused))
	if focused != "main" {
		t.Fatalf("the skip link focuses %q, want main", focused)
	}

	// Needs attention: the paged row is listed under "Paged".
	rowLink := `#paged a[href*="key=` + paged + `"]`
	run("find the paged row", chromedp.WaitVisible(rowLink, chromedp.ByQuery))
	shot("attention")

	// Its row page: every field and the timeline.
	run("open the row", chromedp.Click(rowLink, chromedp.ByQuery), chromedp.WaitVisible(".timeline", chromedp.ByQuery))
	timeline := textOf(".timeline")
	// The page's reason comes from the row journal the resolver wrote in
	// the escalate's transaction.
	for _, want := range []string{"Claimed by run run_mail", "Outcome reported → unknown", "Paged a person", "why: no lookup for vendor resend"} {
		if !strings.Contains(timeline, want) {
			t.Fatalf("timeline lacks %q:\n%s", want, timeline)
		}
	}
	if fields := textOf("dl.fields"); !strings.Contains(fields, "call_7") || !strings.Contains(fields, paged) {
		t.Fatalf("fields lack the tool call id or the key:\n%s", fields)
	}

	// Resolve it by hand, with a receipt and a note.
	run("resolve",
		chromedp.Click(`input[name=status][value=succeeded]`, chromedp.ByQuery),
		chromedp.SendKeys("#receipt", "msg_0042", chromedp.ByQuery),
		chromedp.SendKeys("#resolve-note", "delivered per the Resend dashboard", chromedp.ByQuery),
		chromedp.Click(`form[action="/console/actions/resolve"] button[type=submit]`, chromedp.ByQuery))
	flash("Resolve as succeeded: done")
	msg, err := resolved.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the resolution event: %v", err)
	}
	var ev ledger.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Key != paged || ev.Source != ledger.SourceHuman || ev.ReceiptID != "msg_0042" {
		t.Fatalf("event %s: %v", msg.Data, err)
	}
	timeline = textOf(".timeline")
	if !strings.Contains(timeline, "Resolved by hand → succeeded") || !strings.Contains(timeline, "alice") {
		t.Fatalf("timeline after the resolve:\n%s", timeline)
	}
	var vendorLink, traceLink string
	run("vendor and trace links",
		chromedp.AttributeValue(`a[href^="https://resend.com/emails/"]`, "href", &vendorLink, nil, chromedp.ByQuery),
		chromedp.AttributeValue(`a[href^="http://jaeger.example/trace/"]`, "href", &traceLink, nil, chromedp.ByQuery))
	if vendorLink != "https://resend.com/emails/msg_0042" || len(traceLink) != len("http://jaeger.example/trace/")+32 {
		t.Fatalf("links: vendor %q, trace %q", vendorLink, traceLink)
	}
	shot("row")

	// The row page at 320 px: nothing wider than the screen.
	var width int
	run("320 px", chromedp.EmulateViewport(320, 900), chromedp.Reload(), chromedp.WaitVisible(".timeline", chromedp.ByQuery),
		chromedp.Evaluate(`document.documentElement.scrollWidth`, &width))
	if width > 320 {
		t.Fatalf("the row page is %d px wide at a 320 px viewport", width)
	}
	shot("row-320")
	run("desktop again", chromedp.EmulateViewport(1100, 900))

	// A Stripe delivery that settles a row, then the same delivery again:
	// the duplicate changed nothing, and the row journal shows it with its
	// vendor event id and the endpoint that verified it.
	code, body = call(t, addr, acmeToken, http.MethodPost, "/v1/claims", `{"run_id": "run_hook", "tool": "stripe.payment_intents.create",
		"tool_call_id": "call_h", "vendor": "stripe", "tool_class": "write_idempotent", "intent": {"amount": 1050}}`)
	if code != http.StatusCreated {
		t.Fatalf("claim: %d %v", code, body)
	}
	hooked, localID := rowField(t, body, "key"), rowField(t, body, "metadata_local_id")
	payload, err := fixtures.Set(fixtures.Load("stripe/2024-06-20/payment_intent.succeeded"), "metadata_local_id", localID)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/stripe/default", bytes.NewReader(payload))
		req.Header.Set("Stripe-Signature", fixtures.SignStripe(payload, time.Now(), stripeSecret))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	run("the webhook row", chromedp.Navigate(base+"/console/row?tenant=acme&key="+hooked), chromedp.WaitVisible(".timeline", chromedp.ByQuery))
	timeline = textOf(".timeline")
	for _, want := range []string{"Webhook delivery → succeeded", "Webhook delivery: a duplicate, changed nothing",
		"vendor event evt_", "verified: signature checked by endpoint default (stripe); Stripe-Signature"} {
		if !strings.Contains(timeline, want) {
			t.Fatalf("webhook row's timeline lacks %q:\n%s", want, timeline)
		}
	}
	shot("row-webhook")

	// A gated claim: the SDK's Do waits for the approval the browser gives.
	gated := strings.Replace(e2eTool, `"autonomy": "autonomous"`, `"autonomy": "approval"`, 1)
	if code, body := call(t, addr, acmeToken, http.MethodPut, "/v1/tools/payments.refund", gated); code != http.StatusCreated {
		t.Fatalf("PUT tool: %d %v", code, body)
	}
	rc, err := client.New(base, acmeToken)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	release := make(chan struct{})
	type doResult struct {
		out client.Outcome
		err error
	}
	done := make(chan doResult, 1)
	go func() {
		out, err := rc.Do(ctx, client.ClaimRequest{RunID: "run_refund", Tool: "payments.refund", ToolCallID: "call_9",
			Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, Intent: map[string]any{"charge": "ch_1", "amount": 500}},
			func(ctx context.Context, key, localID string) (client.Result, error) {
				calls.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
					return client.Result{}, ctx.Err()
				}
				return client.Result{HTTPStatus: 200, ReceiptID: "re_1"}, nil
			})
		done <- doResult{out, err}
	}()
	approvalLink := `#approvals a[href*="tenant=acme"]`
	run("find the approval request", chromedp.Navigate(base+"/console/attention?tenant=acme"), chromedp.WaitVisible(`#approvals`, chromedp.ByQuery))
	for i := 0; ; i++ {
		var n int
		run("count approvals", chromedp.Evaluate(`document.querySelectorAll('`+approvalLink+`').length`, &n))
		if n > 0 {
			break
		}
		if i > 50 {
			t.Fatal("the approval request never showed under needs attention")
		}
		time.Sleep(100 * time.Millisecond)
		run("reload", chromedp.Reload(), chromedp.WaitVisible(`#approvals`, chromedp.ByQuery))
	}
	run("open the request", chromedp.Click(approvalLink, chromedp.ByQuery), chromedp.WaitVisible("#approve-note", chromedp.ByQuery))
	if calls.Load() != 0 {
		t.Fatal("the SDK called the vendor before the approval")
	}
	shot("approval")
	run("approve",
		chromedp.SendKeys("#approve-note", "refund agreed with the customer", chromedp.ByQuery),
		chromedp.Click(`form[action="/console/actions/approve"] button[type=submit]`, chromedp.ByQuery))
	flash("Approve: done")
	// The live feed is connected on this page: let the call finish, and its
	// success arrives in the browser by Server-Sent Events.
	run("live feed open", chromedp.WaitReady(`#live[data-state="open"]`, chromedp.ByQuery))
	close(release)
	var res doResult
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the SDK's Do did not return after the approval")
	}
	if res.err != nil || !res.out.Called || !res.out.AwaitedApproval || calls.Load() != 1 || res.out.ReceiptID() != "re_1" {
		t.Fatalf("Do after the approval: %+v, %v (calls %d)", res.out, res.err, calls.Load())
	}
	run("live event", chromedp.WaitVisible(`#live li`, chromedp.ByQuery))
	waitUntil(t, "the live feed to show the success", func() bool {
		var s string
		_ = chromedp.Run(ctx, chromedp.Text(`#live ul`, &s, chromedp.ByQuery))
		return strings.Contains(s, "succeeded")
	})
	shot("row-live")

	// Freeze a class on the tools page: the next claim of it is 423.
	run("tools", chromedp.Navigate(base+"/console/tools?tenant=acme"), chromedp.WaitVisible("#target", chromedp.ByQuery))
	if tools := textOf("main"); !strings.Contains(tools, "payments.refund") || !strings.Contains(tools, "effective approval") {
		t.Fatalf("tools page:\n%s", tools)
	}
	run("freeze",
		chromedp.SendKeys("#target", "write_ledger", chromedp.ByQuery),
		chromedp.SendKeys("#freeze-note", "mail provider incident", chromedp.ByQuery),
		chromedp.Click(`form[action="/console/actions/freeze"] button[type=submit]`, chromedp.ByQuery))
	flash("Freeze write_ledger: done")
	code, body = call(t, addr, acmeToken, http.MethodPost, "/v1/claims", `{"run_id": "run_mail2", "tool": "email.send",
		"vendor": "resend", "tool_class": "write_ledger", "intent": {"to": "b@example.com"}}`)
	if code != http.StatusLocked || body["code"] != "tool_frozen" {
		t.Fatalf("a claim of the frozen class: %d %v", code, body)
	}
	shot("tools")

	// The run page, and a search by receipt id.
	run("run page", chromedp.Navigate(base+"/console/run?tenant=acme&run_id=run_mail"), chromedp.WaitVisible(".runrows", chromedp.ByQuery))
	if s := textOf(".runrows"); !strings.Contains(s, "email.send") || !strings.Contains(s, "msg_0042") {
		t.Fatalf("run page:\n%s", s)
	}
	shot("run")
	run("search", chromedp.Navigate(base+"/console/search?tenant=acme"), chromedp.WaitVisible("#q", chromedp.ByQuery),
		chromedp.SendKeys("#q", "msg_0042", chromedp.ByQuery), chromedp.Submit("#q", chromedp.ByQuery),
		chromedp.WaitVisible(".rows", chromedp.ByQuery))
	if s := textOf(".rows"); !strings.Contains(s, "matched on receipt id") {
		t.Fatalf("search:\n%s", s)
	}
	shot("search")

	// Every page reads at 320 px: nothing wider than the screen (the
	// summary table scrolls inside its own box).
	run("320 px", chromedp.EmulateViewport(320, 900))
	for _, path := range []string{"/console/attention?tenant=acme", "/console/tools?tenant=acme",
		"/console/run?tenant=acme&run_id=run_mail", "/console/search?tenant=acme&q=msg_0042"} {
		run("320 px: "+path, chromedp.Navigate(base+path), chromedp.WaitVisible("main", chromedp.ByQuery),
			chromedp.Evaluate(`document.documentElement.scrollWidth`, &width))
		if width > 320 {
			t.Errorf("%s is %d px wide at a 320 px viewport", path, width)
		}
	}
	shot("search-320")
	run("desktop again", chromedp.EmulateViewport(1100, 900))

	// Sign out: the session is gone, and a page sends the browser to sign in.
	run("sign out", chromedp.Click(`form[action="/console/signout"] button`, chromedp.ByQuery), chromedp.WaitVisible("#token", chromedp.ByQuery),
		chromedp.Navigate(base+"/console/attention"), chromedp.WaitVisible("#token", chromedp.ByQuery))
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the browser test ran out of time")
	}
	t.Logf("screenshots in %s", shots)
}
