package webhooks_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/fakemailgun"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/paging"
	"github.com/agentledger/reconciler/resolver"
	"github.com/agentledger/reconciler/vendors"
	"github.com/agentledger/reconciler/webhooks"
)

// mailgunKeys are the webhook signing key and the API key of the tests'
// Mailgun account.
const (
	mailgunSigningKey = "mailgun-signing-key"
	mailgunAPIKey     = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
)

// mailgunDelivery is a webhook as Mailgun posts it: the signature block
// (HMAC of timestamp+token only) beside an event-data the signature does
// not cover.
func mailgunDelivery(token, id, event, messageID, localID string) vreq {
	ts := strconv.FormatInt(t0.Unix(), 10)
	sig := hex.EncodeToString(hmacOf(sha256.New, mailgunSigningKey, ts+token))
	body := fmt.Sprintf(`{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":{"id":%q,"event":%q,"timestamp":%d,`+
		`"message":{"headers":{"message-id":%q}},"user-variables":{"metadata_local_id":%q}}}`,
		ts, token, sig, id, event, t0.Unix(), messageID, localID)
	return vreq{path: "/webhooks/mailgun/mg", body: []byte(body)}
}

type countPager struct{ n atomic.Int32 }

func (p *countPager) Trigger(context.Context, paging.Page) error { p.n.Add(1); return nil }
func (p *countPager) Resolve(context.Context, string) error      { return nil }

// TestMailgunHint: with a Mailgun vendor profile, a Mailgun delivery is a
// hint. Through the real route it is recorded and joined, applies nothing,
// and makes the row due; the resolver's pass then asks a fake Mailgun
// (Events API, basic auth, paging) and the vendor's answer, not the
// body's claim, settles the row.
func TestMailgunHint(t *testing.T) {
	var wakes atomic.Int32
	hs := newHarness(t, webhooks.Options{
		Presets: []webhooks.PresetEndpoint{{Name: "mg", Preset: "mailgun", Tenant: "acme", Secrets: []string{mailgunSigningKey}}},
		Refetch: map[string]bool{"mailgun": true},
		Recheck: func() { wakes.Add(1) },
	})
	now := func() time.Time { return *hs.now.Load() }
	mg := fakemailgun.New("mg.example.com", mailgunAPIKey, now)
	t.Cleanup(mg.Close)
	doc := fmt.Sprintf("vendors:\n  - name: mailgun\n    preset: mailgun\n    api_key: %s\n    api_base: %s\n    rate_limit: 1000/s\n", mailgunAPIKey, mg.APIBase())
	ps, err := vendors.Parse("test.yaml", []byte(doc), vendors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := resolver.NewProfiled(ps[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	pager := &countPager{}
	res := resolver.New(hs.store, resolver.Options{Lookups: map[string]resolver.Lookup{"mailgun": lk}, Pager: pager, Now: now, VendorTimeout: 10 * time.Second})
	pass := func() {
		t.Helper()
		if err := res.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	due := func(r ledger.Row) bool {
		t.Helper()
		rows, err := hs.store.Due(context.Background(), now(), 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range rows {
			if d.Key == r.Key {
				return true
			}
		}
		return false
	}
	// hinted posts d and checks it was recorded, changed no status,
	// published nothing and made the row due.
	hinted := func(t *testing.T, r ledger.Row, d vreq, events int) {
		t.Helper()
		w := wakes.Load()
		if rec := hs.send(d); rec.Code != 200 || result(t, rec) != "accepted" {
			t.Fatalf("delivery: %d %s, want 200 accepted", rec.Code, rec.Body)
		}
		if got := hs.row(r); got.Status != ledger.StatusUnknown || got.UpstreamReceiptID != "" {
			t.Fatalf("after the hint the row is %s with receipt %q: the body applied", got.Status, got.UpstreamReceiptID)
		}
		if n := len(hs.outbox()); n != events {
			t.Fatalf("outbox %d records after a hint, want %d", n, events)
		}
		if !due(r) || wakes.Load() != w+1 {
			t.Fatalf("row due %v, wakes %d: the hint did not make it due now", due(r), wakes.Load()-w)
		}
	}
	mg.Noise(350) // other messages' events: the lookup pages past them

	t.Run("the body says delivered, Mailgun says rejected: failed", func(t *testing.T) {
		r := hs.unknownRow("mailgun", "run-a")
		mg.Add("a@mg.example.com", r.MetadataLocalID, "rejected", "")
		hinted(t, r, mailgunDelivery("tok-a", "ev-a", "delivered", "a@mg.example.com", r.MetadataLocalID), len(hs.outbox()))
		pass()
		if got := hs.row(r); got.Status != ledger.StatusFailedPoison {
			t.Fatalf("row %s, want failed_poison from the vendor's answer", got.Status)
		}
	})
	t.Run("the body says delivered, Mailgun only saw a permanent failure: not succeeded", func(t *testing.T) {
		r := hs.unknownRow("mailgun", "run-b")
		mg.Add("b@mg.example.com", r.MetadataLocalID, "failed", "permanent")
		before := len(hs.outbox())
		hinted(t, r, mailgunDelivery("tok-b", "ev-b", "delivered", "b@mg.example.com", r.MetadataLocalID), before)
		pass()
		if got := hs.row(r); got.Status == ledger.StatusSucceeded {
			t.Fatal("a forged delivered closed the row")
		}
	})
	t.Run("the body says delivered, Mailgun knows nothing: stays unknown", func(t *testing.T) {
		r := hs.unknownRow("mailgun", "run-c")
		before := len(hs.outbox())
		hinted(t, r, mailgunDelivery("tok-c", "ev-c", "delivered", "c@mg.example.com", r.MetadataLocalID), before)
		pass()
		if got := hs.row(r); got.Status != ledger.StatusUnknown || len(hs.outbox()) != before {
			t.Fatalf("row %s, outbox %d: a delivery Mailgun does not know settled the row", got.Status, len(hs.outbox())-before)
		}
	})
	t.Run("a genuine delivery closes the row once, with one event", func(t *testing.T) {
		r := hs.unknownRow("mailgun", "run-d")
		mg.Add("d@mg.example.com", r.MetadataLocalID, "accepted", "")
		mg.Add("d@mg.example.com", r.MetadataLocalID, "delivered", "")
		before := len(hs.outbox())
		// The body names another message id: the receipt comes from Mailgun.
		d := mailgunDelivery("tok-d", "ev-d", "delivered", "forged@mg.example.com", r.MetadataLocalID)
		hinted(t, r, d, before)
		pass()
		got := hs.row(r)
		if got.Status != ledger.StatusSucceeded || got.UpstreamReceiptID != "d@mg.example.com" {
			t.Fatalf("row %s receipt %q, want succeeded with Mailgun's message id", got.Status, got.UpstreamReceiptID)
		}
		if rec := hs.send(d); rec.Code != 200 || result(t, rec) != "duplicate" {
			t.Fatalf("redelivery: %d %s, want 200 duplicate", rec.Code, rec.Body)
		}
		pass()
		if n := len(hs.outbox()) - before; n != 1 {
			t.Fatalf("%d events for one genuine delivery, want 1", n)
		}
	})
	if pager.n.Load() != 0 {
		t.Errorf("%d pages, want none", pager.n.Load())
	}
}

// TestMailgunTokenAcrossReplicas: the signature token is recorded in the
// store with the event, so a replica whose own cache never saw it still
// refuses it on another event (400, nothing stored) and answers the same
// event as a duplicate.
func TestMailgunTokenAcrossReplicas(t *testing.T) {
	opts := func() webhooks.Options {
		return webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "mg", Preset: "mailgun", Tenant: "acme", Secrets: []string{mailgunSigningKey}}}}
	}
	one := newHarness(t, opts())
	o := opts()
	o.Store = one.store // a second replica over the same store
	two := newHarness(t, o)
	a, b := one.unknownRow("mailgun", "run-a"), one.unknownRow("mailgun", "run-b")

	first := mailgunDelivery("tok-shared", "ev-1", "delivered", "a@mg.example.com", a.MetadataLocalID)
	if rec := one.send(first); rec.Code != 200 || result(t, rec) != "accepted" {
		t.Fatalf("first delivery: %d %s", rec.Code, rec.Body)
	}
	events := len(one.outbox())
	if rec := two.send(first); rec.Code != 200 || result(t, rec) != "duplicate" {
		t.Fatalf("the same delivery at the other replica: %d %s, want 200 duplicate", rec.Code, rec.Body)
	}
	glued := mailgunDelivery("tok-shared", "ev-2", "failed", "b@mg.example.com", b.MetadataLocalID)
	if rec := two.send(glued); rec.Code != 400 || errorCode(t, rec) != "bad_signature" {
		t.Fatalf("the token on another event at the other replica: %d %s, want 400 bad_signature", rec.Code, rec.Body)
	}
	if got := one.row(b); got.Status != ledger.StatusUnknown || len(one.outbox()) != events {
		t.Fatalf("row b %s, outbox +%d: the replayed token changed something", got.Status, len(one.outbox())-events)
	}
	// Nothing of ev-2 was stored: with its own token it is new.
	fresh := mailgunDelivery("tok-fresh", "ev-2", "delivered", "b@mg.example.com", b.MetadataLocalID)
	if rec := two.send(fresh); rec.Code != 200 || result(t, rec) != "accepted" {
		t.Fatalf("ev-2 with a fresh token: %d %s, want 200 accepted", rec.Code, rec.Body)
	}
}
