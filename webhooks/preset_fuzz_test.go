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
