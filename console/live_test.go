package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/console"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/ledger"
)

// natsFixture is an embedded NATS server with the service's stream, and a
// core connection to it.
func natsFixture(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, srv.ClientURL())
	natstest.EnsureStream(t, js)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

func publish(t *testing.T, js jetstream.JetStream, ev ledger.Event) {
	t.Helper()
	data, _ := json.Marshal(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "recon."+ev.Tenant+"."+ev.RunID+"."+ev.Status, data); err != nil {
		t.Fatal(err)
	}
}

// sseEvents opens /console/events with b's session and returns the data of
// each resolution event as it arrives.
func sseEvents(t *testing.T, b *browser) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.f.srv.URL+"/console/events", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("events: %d %v", resp.StatusCode, resp.Header)
	}
	out := make(chan string, 16)
	ready := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == ": live":
				close(ready)
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "resolution":
				out <- strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream did not start")
	}
	return out
}

// TestLiveFeed: each session's stream carries the events of the tenants it
// may see, as NATS delivers them, and ends when the console closes.
func TestLiveFeed(t *testing.T) {
	nc, js := natsFixture(t)
	f := newFixture(t, func(o *console.Options) { o.Live = nc })
	admin, approver := f.browser(), f.browser()
	admin.signIn(adminToken, "alice")
	approver.signIn(acmeApprover, "bob")
	adminEvents, approverEvents := sseEvents(t, admin), sseEvents(t, approver)
	// Both streams are registered before the first publish: the
	// subscription is synchronous with the ": live" line.
	publish(t, js, ledger.Event{Tenant: "globex", Key: "k_globex", RunID: "run_g", Tool: "t", Status: "succeeded", Source: ledger.SourceWebhook})
	publish(t, js, ledger.Event{Tenant: "acme", Key: "k_acme", RunID: "run_a", Tool: "t", Status: "escalated", Source: ledger.SourceResolver})

	next := func(ch <-chan string) string {
		select {
		case s := <-ch:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("no live event")
			return ""
		}
	}
	if a, b := next(adminEvents), next(adminEvents); !strings.Contains(a, `"key":"k_globex"`) || !strings.Contains(b, `"key":"k_acme"`) {
		t.Fatalf("admin's events: %s, %s", a, b)
	}
	if a := next(approverEvents); !strings.Contains(a, `"key":"k_acme"`) || !strings.Contains(a, `"status":"escalated"`) {
		t.Fatalf("the acme approver's first event: %s (another tenant's would come first)", a)
	}
	f.console.Close()
	select {
	case _, open := <-adminEvents:
		if open {
			t.Fatal("an event after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived Close")
	}
}

// TestStreamHistory reads a run's events from the stream in order, and
// only that run's; the row page's timeline shows them.
func TestStreamHistory(t *testing.T) {
	_, js := natsFixture(t)
	at := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	evs := []ledger.Event{
		{Tenant: "acme", Key: "k1", RunID: "run_1", Status: "unknown", Source: ledger.SourceRuntime, At: at},
		{Tenant: "acme", Key: "k1", RunID: "run_2", Status: "unknown", Source: ledger.SourceRuntime, At: at},
		{Tenant: "globex", Key: "k1", RunID: "run_1", Status: "succeeded", Source: ledger.SourceWebhook, At: at},
		{Tenant: "acme", Key: "k1", RunID: "run_1", Status: "escalated", Source: ledger.SourceResolver, At: at.Add(time.Minute)},
		{Tenant: "acme", Key: "k1", RunID: "run_1", Status: "succeeded", Source: ledger.SourceWebhook, VendorEventID: "evt_1", ReceiptID: "pi_1", At: at.Add(2 * time.Minute)},
	}
	for _, ev := range evs {
		publish(t, js, ev)
	}
	h := console.StreamHistory{JS: js, Stream: "RECON", Prefix: "recon"}
	got, err := h.RunEvents(context.Background(), "acme", "run_1")
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, ev := range got {
		statuses = append(statuses, ev.Tenant+"/"+ev.RunID+"/"+ev.Status)
	}
	if strings.Join(statuses, " ") != "acme/run_1/unknown acme/run_1/escalated acme/run_1/succeeded" {
		t.Fatalf("events %v", statuses)
	}
	h.Max = 2
	if got, err := h.RunEvents(context.Background(), "acme", "run_1"); err != nil || len(got) != 2 || got[1].Status != "escalated" {
		t.Fatalf("the first 2 events: %v %v", got, err)
	}
	if got, err := h.RunEvents(context.Background(), "acme", "run_none"); err != nil || len(got) != 0 {
		t.Fatalf("an empty run: %v %v", got, err)
	}
	if _, err := h.RunEvents(context.Background(), "acme", "run.1"); err == nil {
		t.Fatal("a run id that is not a subject token was read")
	}
}

// TestTimelineFromStream: the row page's timeline joins the stream's events
// to the row: the webhook delivery with its vendor event id and how it was
// verified, the page, the approval's decision.
func TestTimelineFromStream(t *testing.T) {
	_, js := natsFixture(t)
	f := newFixture(t, func(o *console.Options) {
		o.History = console.StreamHistory{JS: js, Stream: "RECON", Prefix: "recon"}
		o.Verification = map[string]string{"resend": "Standard Webhooks signature at endpoint resend"}
	})
	key := f.claim(acmeToken, mailClaim, http.StatusCreated)
	if code, out := f.apiCall(acmeToken, http.MethodPost, "/v1/claims/"+key+"/outcome", `{"kind": "timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome: %d %v", code, out)
	}
	now := f.clock.Now()
	publish(t, js, ledger.Event{Tenant: "acme", Key: key, RunID: "run_1", Status: "unknown", Source: ledger.SourceRuntime, At: now})
	publish(t, js, ledger.Event{Tenant: "acme", Key: key, RunID: "run_1", Status: "escalated", Source: ledger.SourceResolver, At: now.Add(time.Hour)})
	publish(t, js, ledger.Event{Tenant: "acme", Key: "other", RunID: "run_1", Status: "succeeded", Source: ledger.SourceRuntime, At: now})
	publish(t, js, ledger.Event{Tenant: "acme", Key: key, RunID: "run_1", Status: "succeeded", Source: ledger.SourceWebhook,
		VendorEventID: "msg_evt_9", ReceiptID: "msg_9", At: now.Add(2 * time.Hour)})
	b := f.browser()
	b.signIn(adminToken, "alice")
	page := b.get(rowPath("acme", key)).Body
	tl := page[strings.Index(page, `<ol class="timeline">`):]
	tl = tl[:strings.Index(tl, "</ol>")]
	want := []string{"Claimed by run run_1", "Outcome reported → unknown", "Paged a person (escalated)",
		"Webhook delivery → succeeded", "vendor event msg_evt_9; verified: Standard Webhooks signature at endpoint resend; receipt msg_9"}
	last := -1
	for _, w := range want {
		i := strings.Index(tl, w)
		if i < 0 || i < last {
			t.Fatalf("timeline lacks %q in order:\n%s", w, tl)
		}
		last = i
	}
	if strings.Count(tl, "<li") != 5 || strings.Contains(page, "could not be read") {
		t.Fatalf("timeline: %d entries (another row's event, or a duplicate?):\n%s", strings.Count(tl, "<li"), tl)
	}
}
