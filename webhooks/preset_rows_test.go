package webhooks_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/matcher"
	"github.com/agentledger/reconciler/webhooks"
)

// These tests follow deliveries from presets into the ledger: a delivery
// that joins a row by its local id closes an unknown row and publishes one
// event; a batch closes each of its rows once; a redelivery is 2xx and
// changes nothing; an orphan is parked. The signatures are made here the
// way each vendor makes them; preset_vectors_test.go proves the verifier
// against the vendors' own vectors.

func hmacOf(h func() hash.Hash, key, msg string) []byte {
	m := hmac.New(h, []byte(key))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// unknownRow claims a row for vendor and reports a timeout: the row is
// unknown, the state a delivery exists to close.
func (hs *harness) unknownRow(vendor, runID string) ledger.Row {
	hs.t.Helper()
	ctx := context.Background()
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: runID, Tool: vendor + ".write", Vendor: vendor,
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(`{"n":1}`), ReplayWindow: time.Hour,
	}, ledger.DefaultPolicy(), t0.Add(-2*time.Minute))
	if err != nil {
		hs.t.Fatal(err)
	}
	res, err := hs.store.Claim(ctx, c)
	if err != nil {
		hs.t.Fatal(err)
	}
	row, _, err := hs.store.Report(ctx, "acme", res.Row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, Attempt: res.Row.Attempt, At: t0.Add(-time.Minute)})
	if err != nil {
		hs.t.Fatal(err)
	}
	if row.Status != ledger.StatusUnknown {
		hs.t.Fatalf("row is %s after a timeout, want unknown", row.Status)
	}
	return row
}

// step is one delivery and what it must do.
type step struct {
	name       string
	req        vreq
	wantResult string // result, or the ack body
	// rows and their statuses after the step; events is the outbox's size.
	rows   []ledger.Row
	status []ledger.Status
	events int
}

func (hs *harness) run(steps []step) {
	hs.t.Helper()
	base := len(hs.outbox())
	for _, s := range steps {
		rec := hs.send(s.req)
		if rec.Code != http.StatusOK || answer(hs.t, rec) != s.wantResult {
			hs.t.Fatalf("%s: answer = %d %s, want 200 %s", s.name, rec.Code, rec.Body, s.wantResult)
		}
		for i, r := range s.rows {
			if got := hs.row(r).Status; got != s.status[i] {
				hs.t.Fatalf("%s: row %d is %s, want %s", s.name, i, got, s.status[i])
			}
		}
		if got := len(hs.outbox()) - base; got != s.events {
			hs.t.Fatalf("%s: outbox grew by %d, want %d", s.name, got, s.events)
		}
	}
}

const squareKey, squareURL = "sq-signature-key", "https://hooks.example.com/webhooks/square/sq"

func squareDelivery(eventID, typ, status, localID string) vreq {
	pay := "pay_" + localID[len(localID)-6:] // one payment per row, many events
	body := fmt.Sprintf(`{"merchant_id":"M1","type":%q,"event_id":%q,"created_at":"2026-03-01T12:00:00Z","data":{"type":"payment","id":%q,"object":{"payment":{"id":%q,"status":%q,"reference_id":%q}}}}`,
		typ, eventID, pay, pay, status, localID)
	return vreq{path: "/webhooks/square/sq", body: []byte(body), header: hdr("X-Square-Hmacsha256-Signature", b64(hmacOf(sha256.New, squareKey, squareURL+body)))}
}

func TestPresetSquareClosesRows(t *testing.T) {
	hs := newHarness(t, webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "sq", Preset: "square", Tenant: "acme", Secrets: []string{squareKey}, URL: squareURL}}})
	a, b, c := hs.unknownRow("square", "run-a"), hs.unknownRow("square", "run-b"), hs.unknownRow("square", "run-c")
	completed := squareDelivery("e1", "payment.updated", "COMPLETED", a.MetadataLocalID)
	hs.run([]step{
		{"approved is progress", squareDelivery("e0", "payment.created", "APPROVED", a.MetadataLocalID), "accepted", []ledger.Row{a}, []ledger.Status{ledger.StatusUnknown}, 0},
		{"completed closes the row", completed, "accepted", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
		{"redelivery changes nothing", completed, "duplicate", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
		{"failed status fails whatever the type", squareDelivery("e2", "payment.created", "FAILED", b.MetadataLocalID), "accepted", []ledger.Row{b}, []ledger.Status{ledger.StatusFailedPoison}, 2},
		{"canceled too", squareDelivery("e3", "payment.updated", "CANCELED", c.MetadataLocalID), "accepted", []ledger.Row{c}, []ledger.Status{ledger.StatusFailedPoison}, 3},
		{"orphan is parked", squareDelivery("e4", "payment.updated", "COMPLETED", "rl_00000000000000000000000000000000"), "orphan", nil, nil, 3},
		{"another integration's reference is not parked", squareDelivery("e5", "payment.updated", "COMPLETED", "ORDER-1234-XYZ"), "unmatched", nil, nil, 3},
	})
	if got, want := hs.row(a).UpstreamReceiptID, "pay_"+a.MetadataLocalID[len(a.MetadataLocalID)-6:]; got != want {
		t.Errorf("receipt = %q, want %q", got, want)
	}
}

const adyenTestKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// adyenItem is one signed NotificationRequestItem.
func adyenItem(t *testing.T, psp, code, success, ref string) string {
	t.Helper()
	key, err := hex.DecodeString(adyenTestKey)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join([]string{psp, "", "Acme", ref, "1050", "EUR", code, success}, ":")))
	return fmt.Sprintf(`{"NotificationRequestItem":{"additionalData":{"hmacSignature":%q},"amount":{"currency":"EUR","value":1050},"eventCode":%q,"merchantAccountCode":"Acme","merchantReference":%q,"pspReference":%q,"success":%q}}`,
		b64(m.Sum(nil)), code, ref, psp, success)
}

func adyenDelivery(items ...string) vreq {
	return vreq{path: "/webhooks/adyen/ad", body: []byte(`{"live":"false","notificationItems":[` + strings.Join(items, ",") + `]}`)}
}

func TestPresetAdyenBatch(t *testing.T) {
	hs := newHarness(t, webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "ad", Preset: "adyen", Tenant: "acme", Secrets: []string{adyenTestKey}}}})
	a, b, c := hs.unknownRow("adyen", "run-a"), hs.unknownRow("adyen", "run-b"), hs.unknownRow("adyen", "run-c")
	good := adyenItem(t, "PSP1", "AUTHORISATION", "true", a.MetadataLocalID)
	forged := strings.Replace(adyenItem(t, "PSP2", "AUTHORISATION", "true", b.MetadataLocalID), `"value":1050`, `"value":1`, 1)
	rejected(t, hs, adyenDelivery(good, forged), "bad_signature")
	if hs.row(a).Status != ledger.StatusUnknown {
		t.Fatal("a refused batch changed a row")
	}
	batch := adyenDelivery(good, adyenItem(t, "PSP2", "AUTHORISATION", "true", b.MetadataLocalID), adyenItem(t, "PSP3", "AUTHORISATION", "false", c.MetadataLocalID))
	rows, three := []ledger.Row{a, b, c}, []ledger.Status{ledger.StatusSucceeded, ledger.StatusSucceeded, ledger.StatusFailedPoison}
	hs.run([]step{
		{"batch closes each row once", batch, "[accepted]", rows, three, 3},
		{"redelivered batch changes nothing", batch, "[accepted]", rows, three, 3},
	})
	for _, id := range []string{"PSP1:AUTHORISATION", "PSP3:AUTHORISATION"} {
		if !hs.seen("adyen", id) {
			t.Errorf("event %s not in the inbox", id)
		}
	}
}

func TestPresetSendGridBatch(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	hs := newHarness(t, webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "sg", Preset: "sendgrid", Tenant: "acme", Secrets: []string{b64(der)}, Tolerance: 10 * time.Minute}}})
	a, b := hs.unknownRow("sendgrid", "run-a"), hs.unknownRow("sendgrid", "run-b")
	sign := func(body string, at time.Time) vreq {
		ts := strconv.FormatInt(at.Unix(), 10)
		sum := sha256.Sum256([]byte(ts + body))
		sig, err := ecdsa.SignASN1(rand.Reader, priv, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return vreq{path: "/webhooks/sendgrid/sg", body: []byte(body), header: hdr(
			"X-Twilio-Email-Event-Webhook-Signature", b64(sig), "X-Twilio-Email-Event-Webhook-Timestamp", ts)}
	}
	body := fmt.Sprintf(`[{"event":"processed","sg_event_id":"sg1","sg_message_id":"m1","metadata_local_id":%q},`+
		`{"event":"dropped","sg_event_id":"sg2","sg_message_id":"m2","metadata_local_id":%q},{"event":"open","sg_event_id":"sg3","metadata_local_id":%q}]`+"\r\n",
		a.MetadataLocalID, b.MetadataLocalID, a.MetadataLocalID)
	rows := []ledger.Row{a, b}
	closed := []ledger.Status{ledger.StatusSucceeded, ledger.StatusFailedPoison}
	hs.run([]step{
		{"batch closes each row once", sign(body, t0), "accepted", rows, closed, 2},
		{"redelivery (signed anew) changes nothing", sign(body, t0.Add(time.Minute)), "duplicate", rows, closed, 2},
	})
	rec := hs.send(sign(body, t0))
	var ack struct{ Results []string }
	if err := json.Unmarshal(rec.Body.Bytes(), &ack); err != nil || !slices.Equal(ack.Results, []string{"duplicate", "duplicate", "duplicate"}) {
		t.Fatalf("batch ack = %s, want three duplicates", rec.Body)
	}
	// An element without its event id refuses the whole batch.
	c := hs.unknownRow("sendgrid", "run-c")
	noID := fmt.Sprintf(`[{"event":"processed","sg_event_id":"sg9","metadata_local_id":%q},{"event":"processed"}]`, c.MetadataLocalID)
	if rec := hs.send(sign(noID, t0)); rec.Code != http.StatusBadRequest || hs.row(c).Status != ledger.StatusUnknown {
		t.Fatalf("batch with an element lacking sg_event_id: %d %s, row %s; want 400 and the row untouched", rec.Code, rec.Body, hs.row(c).Status)
	}
	hs.setNow(t0.Add(11 * time.Minute))
	rejected(t, hs, sign(body, t0), "stale")
}

func twilioSign(token, rawURL string, form url.Values) string {
	names := make([]string, 0, len(form))
	for k := range form {
		names = append(names, k)
	}
	slices.Sort(names)
	s := rawURL
	for _, k := range names {
		s += k + form.Get(k)
	}
	return b64(hmacOf(sha1.New, token, s))
}

func TestPresetTwilioStatusCallback(t *testing.T) {
	const token, base = "twilio-auth-token", "https://hooks.example.com/webhooks/twilio/tw"
	hs := newHarness(t, webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "tw", Preset: "twilio", Tenant: "acme", Secrets: []string{"old-token", token}, URL: base}}})
	a := hs.unknownRow("twilio", "run-a")
	query := "metadata_local_id=" + a.MetadataLocalID
	callback := func(status string, idem string) vreq {
		form := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {status}, "AccountSid": {"AC1"}}
		h := hdr("X-Twilio-Signature", twilioSign(token, base+"?"+query, form), "Content-Type", "application/x-www-form-urlencoded")
		if idem != "" {
			h.Set("I-Twilio-Idempotency-Token", idem)
		}
		return vreq{path: "/webhooks/twilio/tw?" + query, body: []byte(form.Encode()), header: h}
	}
	hs.run([]step{
		{"sent closes the row", callback("sent", "idem-1"), "accepted", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
		{"Twilio's retry changes nothing", callback("sent", "idem-1"), "duplicate", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
		{"delivered, keyed by sid and status", callback("delivered", ""), "accepted", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
	})
	// Twilio's back ends sign with and without the default port.
	withPort := callback("delivered", "idem-3")
	withPort.header.Set("X-Twilio-Signature", twilioSign(token, "https://hooks.example.com:443/webhooks/twilio/tw?"+query,
		url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"delivered"}, "AccountSid": {"AC1"}}))
	if rec := hs.send(withPort); rec.Code != http.StatusOK {
		t.Fatalf("signed over the URL with :443: %d %s, want 200", rec.Code, rec.Body)
	}
	if !hs.seen("twilio", "SM1:delivered") {
		t.Error("without I-Twilio-Idempotency-Token the event id is not MessageSid:MessageStatus")
	}
	// The local id is read from the signed URL: another local id in the
	// query breaks the signature.
	forged := callback("failed", "idem-2")
	forged.path = "/webhooks/twilio/tw?metadata_local_id=rl_11111111111111111111111111111111"
	rejected(t, hs, forged, "bad_signature")
}

func TestPresetMailgunReplay(t *testing.T) {
	const key = "mailgun-signing-key"
	var logs bytes.Buffer
	hs := newHarness(t, webhooks.Options{Logger: newTextLogger(&logs), Presets: []webhooks.PresetEndpoint{{Name: "mg", Preset: "mailgun", Tenant: "acme", Secrets: []string{key}}}})
	a, b := hs.unknownRow("mailgun", "run-a"), hs.unknownRow("mailgun", "run-b")
	ts := strconv.FormatInt(t0.Unix(), 10)
	sigBlock := fmt.Sprintf(`{"timestamp":%q,"token":"tok-1","signature":%q}`, ts, hex.EncodeToString(hmacOf(sha256.New, key, ts+"tok-1")))
	delivery := func(id, event, local string) vreq {
		return vreq{path: "/webhooks/mailgun/mg", body: []byte(fmt.Sprintf(`{"signature":%s,"event-data":{"id":%q,"event":%q,"user-variables":{"metadata_local_id":%q}}}`, sigBlock, id, event, local))}
	}
	hs.run([]step{
		{"delivered closes the row", delivery("ev-1", "delivered", a.MetadataLocalID), "accepted", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
		{"redelivery with the same token", delivery("ev-1", "delivered", a.MetadataLocalID), "duplicate", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
	})
	if !strings.Contains(logs.String(), "body_signed=false") || strings.Contains(logs.String(), key) || strings.Contains(logs.String(), "tok-1") {
		t.Fatalf("log = %q, want body_signed=false on the event and neither key nor token", logs.String())
	}
	// The same signature block glued to another event is a replay.
	rejected(t, hs, delivery("ev-2", "failed", b.MetadataLocalID), "bad_signature")
	if hs.row(b).Status != ledger.StatusUnknown {
		t.Fatal("a replayed token changed a row")
	}
}

func TestPresetPostmarkBasicAuth(t *testing.T) {
	hs := newHarness(t, webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "pm", Preset: "postmark", Tenant: "acme", Secrets: []string{"hooks:s3cret-pass"}}}})
	a := hs.unknownRow("postmark", "run-a")
	body := fmt.Sprintf(`{"RecordType":"Delivery","MessageID":"m-1","DeliveredAt":"2026-03-01T12:00:00Z","Metadata":{"metadata_local_id":%q}}`, a.MetadataLocalID)
	req := vreq{path: "/webhooks/postmark/pm", body: []byte(body), header: hdr("Authorization", "Basic "+b64([]byte("hooks:s3cret-pass")))}
	hs.run([]step{
		{"delivery closes the row", req, "accepted", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
		{"redelivery changes nothing", req, "duplicate", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1},
	})
}

func TestPresetSlackChallenge(t *testing.T) {
	const secret = "slack-signing-secret"
	hs := newHarness(t, webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "sl", Preset: "slack", Tenant: "acme", Secrets: []string{secret}}}})
	body := `{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	ts := strconv.FormatInt(t0.Unix(), 10)
	sig := "v0=" + hex.EncodeToString(hmacOf(sha256.New, secret, "v0:"+ts+":"+body))
	rec := hs.send(vreq{path: "/webhooks/slack/sl", body: []byte(body), header: hdr("X-Slack-Signature", sig, "X-Slack-Request-Timestamp", ts)})
	if rec.Code != http.StatusOK || rec.Body.String() != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Fatalf("url_verification: %d %q, want the challenge", rec.Code, rec.Body)
	}
	rejected(t, hs, vreq{path: "/webhooks/slack/sl", body: []byte(body), header: hdr("X-Slack-Signature", "v0=00", "X-Slack-Request-Timestamp", ts)}, "bad_signature")
}

// TestCustomEndpoint declares a vendor with no preset from the knobs alone.
func TestCustomEndpoint(t *testing.T) {
	const secret = "acme-vendor-secret"
	spec := webhooks.Spec{
		Scheme: "hmac", Hash: "sha512", KeyEncoding: "utf8", Signed: "{header:X-Acme-Id}.{ts}.{body}",
		Signature: webhooks.SignatureSpec{Source: "header:X-Acme-Signature", Encoding: "hex", Prefix: "v1=", Separator: ","},
		Timestamp: webhooks.TimestampSpec{Source: "header:X-Acme-Time", Unit: "s", Tolerance: 2 * time.Minute},
		EventID:   []string{"{header:X-Acme-Id}"}, EventType: []string{"{json:kind}"}, ObjectID: []string{"{json:object.id}"},
		LocalIDPath: "object.labels.metadata_local_id",
		Types:       map[string]matcher.Action{"object.created": "succeeded"},
	}
	hs := newHarness(t, webhooks.Options{Presets: []webhooks.PresetEndpoint{{Name: "acme", Tenant: "acme", Vendor: "acmevendor", Secrets: []string{secret}, Spec: spec}}})
	a := hs.unknownRow("acmevendor", "run-a")
	body := fmt.Sprintf(`{"kind":"object.created","object":{"id":"obj_1","labels":{"metadata_local_id":%q}}}`, a.MetadataLocalID)
	ts := strconv.FormatInt(t0.Unix(), 10)
	m := hmac.New(sha512.New, []byte(secret))
	m.Write([]byte("d-1." + ts + "." + body))
	req := vreq{path: "/webhooks/custom/acme", body: []byte(body), header: hdr(
		"X-Acme-Id", "d-1", "X-Acme-Time", ts, "X-Acme-Signature", "v1=00ff,v1="+hex.EncodeToString(m.Sum(nil)))}
	hs.run([]step{{"created closes the row", req, "accepted", []ledger.Row{a}, []ledger.Status{ledger.StatusSucceeded}, 1}})
	rejected(t, hs, req.with(func(r *vreq) { r.header.Set("X-Acme-Id", "d-2") }), "bad_signature")
}

// TestPresetAnswers: the answers every endpoint gives hold for presets: 413
// past the body limit, 404 for an unknown preset or name, both storing nothing.
func TestPresetAnswers(t *testing.T) {
	hs := newHarness(t, webhooks.Options{BodyLimit: 256, Presets: []webhooks.PresetEndpoint{{Name: "sq", Preset: "square", Tenant: "acme", Secrets: []string{squareKey}, URL: squareURL}}})
	big := squareDelivery("e1", "payment.updated", "COMPLETED", "rl_00000000000000000000000000000000")
	big.body = append(big.body, strings.Repeat(" ", 300)...)
	if rec := hs.send(big); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the limit: %d %s, want 413", rec.Code, rec.Body)
	}
	for _, path := range []string{"/webhooks/square/other", "/webhooks/nope/sq", "/webhooks/custom/sq"} {
		r := squareDelivery("e2", "payment.updated", "COMPLETED", "rl_00000000000000000000000000000000")
		r.path = path
		if rec := hs.send(r); rec.Code != http.StatusNotFound || errorCode(t, rec) != "not_found" {
			t.Fatalf("%s: %d %s, want 404 not_found", path, rec.Code, rec.Body)
		}
	}
	if n := len(hs.outbox()); n != 0 {
		t.Fatalf("outbox holds %d records", n)
	}
}
