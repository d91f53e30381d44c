package webhooks

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Fuzz targets for the parsers of the preset verifier: templates (from
// configuration), form bodies and batches (from the network). Seeds: every
// preset's templates and the bodies in testdata/fuzz/<target>/.

func FuzzTemplate(f *testing.F) {
	specs, err := Presets()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range specs {
		for _, t := range append(append([]string{s.Signed}, s.EventID...), s.EventType...) {
			f.Add(t)
		}
	}
	f.Add("{{literal}")
	f.Add("{header:}")
	f.Add("{json:a.b}{")
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := parseTemplate(s, nil)
		if err != nil {
			return
		}
		r := &request{method: "POST", header: http.Header{"X-A": {"1"}}, body: []byte("b"), ts: "1", url: "https://h/p", query: url.Values{}}
		out := tpl.render(nil, r, map[string]any{"a": map[string]any{"b": "c"}}, 0)
		// A template without placeholders renders its literal text, with
		// "{{" read as "{".
		if !strings.ContainsAny(strings.ReplaceAll(s, "{{", ""), "{}") && string(out) != strings.ReplaceAll(s, "{{", "{") {
			t.Fatalf("literal template %q rendered %q", s, out)
		}
		for _, p := range tpl {
			if p.kind != partLiteral && p.kind != partBody && p.kind != partTS && p.kind != partURL && p.kind != partMethod &&
				p.kind != partBodySHA256 && p.kind != partIndex && p.arg == "" {
				t.Fatalf("placeholder %d of %q has no argument", p.kind, s)
			}
		}
	})
}

func FuzzFormBody(f *testing.F) {
	f.Add([]byte("MessageSid=SM1&MessageStatus=sent&To=%2B15551234567"))
	f.Add([]byte("a=1&a=2&b"))
	f.Add([]byte("%zz=1"))
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, err := decodeForm(body)
		if err != nil {
			if !errors.Is(err, ErrUnparsable) {
				t.Fatalf("error %v is not ErrUnparsable", err)
			}
			return
		}
		form, _ := url.ParseQuery(string(body))
		for k, v := range doc {
			if v != form.Get(k) {
				t.Fatalf("%q = %q, want the first value %q", k, v, form.Get(k))
			}
		}
		if !bytes.Equal(twilioParams(form), twilioParams(form)) {
			t.Fatal("twilioParams is not deterministic")
		}
	})
}

// FuzzBatch runs arbitrary bodies through the SendGrid and Adyen presets
// (verified with a key nobody has): nothing panics, nothing verifies, and
// every refusal wraps a sentinel that answers 400.
func FuzzBatch(f *testing.F) {
	f.Add([]byte(`[{"event":"processed","sg_event_id":"a"}]` + "\r\n"))
	f.Add([]byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"p","additionalData":{"hmacSignature":"AAAA"}}}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"notificationItems":{}}`))
	specs, err := Presets()
	if err != nil {
		f.Fatal(err)
	}
	var vs []*verifier
	for _, name := range []string{"sendgrid", "adyen", "hubspot"} {
		key := "k"
		switch name {
		case "sendgrid":
			key = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
		case "adyen":
			key = strings.Repeat("0a", 32)
		}
		v, err := specs[name].compile("https://hooks.example.com/x", []string{key})
		if err != nil {
			f.Fatal(err)
		}
		vs = append(vs, v)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range vs {
			req := httptest.NewRequest(http.MethodPost, "/webhooks/x/y", bytes.NewReader(body))
			req.Header.Set("X-Twilio-Email-Event-Webhook-Signature", "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=")
			req.Header.Set("X-Twilio-Email-Event-Webhook-Timestamp", "1600112502")
			evs, err := v.accept(req, body, time.Unix(1600112502, 0), nil)
			if err == nil {
				t.Fatalf("%s: an unsigned body verified: %d events", v.scheme, len(evs))
			}
			if !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrUnparsable) && !errors.Is(err, ErrStale) {
				t.Fatalf("%s: error %v wraps no sentinel", v.scheme, err)
			}
		}
		// The batch parser alone: elements are objects, within bounds.
		var doc any
		if decodeEvent(body, &doc) != nil {
			return
		}
		for _, b := range []batchPath{{on: true}, {on: true, array: "notificationItems", item: "NotificationRequestItem"}} {
			els, err := b.elements(doc)
			if err != nil {
				continue
			}
			if len(els) == 0 || len(els) > maxBatch {
				t.Fatalf("%d elements", len(els))
			}
			for _, el := range els {
				if _, ok := el.(map[string]any); !ok {
					t.Fatalf("element %T is not an object", el)
				}
			}
		}
	})
}

// BenchmarkPresetAccept measures one delivery's verification and decoding
// per scheme (no store): the cost a forged flood buys.
func BenchmarkPresetAccept(b *testing.B) {
	specs, err := Presets()
	if err != nil {
		b.Fatal(err)
	}
	const sgKey = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
	sgBody := `[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address","sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA","sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0","smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]` + "\r\n"
	sqBody := `{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`
	adBody := `{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="},"amount":{"currency":"EUR","value":1000},"eventCode":"EVENT","merchantAccountCode":"merchantAccount","merchantReference":"reference","originalReference":"originalReference","pspReference":"pspReference","success":"true"}}]}`
	cases := []struct {
		preset, key, url, body string
		header                 http.Header
		at                     time.Time
	}{
		{"square", "Ibxx_5AKakO-3qeNVR61Dw", "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9", sqBody,
			http.Header{"X-Square-Hmacsha256-Signature": {"GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="}}, time.Now()},
		{"sendgrid", sgKey, "", sgBody, http.Header{
			"X-Twilio-Email-Event-Webhook-Signature": {"MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM="},
			"X-Twilio-Email-Event-Webhook-Timestamp": {"1600112502"}}, time.Unix(1600112502, 0)},
		{"adyen", "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00", "", adBody, http.Header{}, time.Now()},
	}
	for _, tc := range cases {
		b.Run(tc.preset, func(b *testing.B) {
			v, err := specs[tc.preset].compile(tc.url, []string{tc.key})
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, "/webhooks/x/y", nil)
			req.Header = tc.header
			body := []byte(tc.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.accept(req, body, tc.at, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
