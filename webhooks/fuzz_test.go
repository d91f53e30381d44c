package webhooks_test

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/webhooks"
)

// seedBodies are the fixtures of one sender, as fuzz seeds.
func seedBodies(prefix string) [][]byte {
	var out [][]byte
	for _, n := range fixtures.Names() {
		if strings.HasPrefix(n, prefix) {
			out = append(out, fixtures.Load(n))
		}
	}
	return out
}

func FuzzParseStripeSignature(f *testing.F) {
	for _, b := range seedBodies("stripe/") {
		f.Add(fixtures.SignStripe(b, t0, stripeSecret, stripeSecretOld))
	}
	f.Add("t=1,v0=00,v1=zz")
	f.Add("t=,v1=")
	f.Add(",,,")
	f.Fuzz(func(t *testing.T, header string) {
		s, err := webhooks.ParseStripeSignature(header)
		if err != nil {
			if !errors.Is(err, webhooks.ErrBadSignature) && !errors.Is(err, webhooks.ErrUnparsable) {
				t.Fatalf("error %v wraps neither ErrBadSignature nor ErrUnparsable", err)
			}
			return
		}
		if len(s.V1) == 0 || len(s.V1) > 16 {
			t.Fatalf("%d v1 signatures accepted", len(s.V1))
		}
		for _, v := range s.V1 {
			if len(v) != 32 {
				t.Fatalf("a %d-byte v1 accepted", len(v))
			}
		}
		if !strings.Contains(header, "t=") {
			t.Fatal("a header without t= parsed")
		}
	})
}

// FuzzVerifyStripe: what we sign verifies; any change to the body or the
// timestamp does not.
func FuzzVerifyStripe(f *testing.F) {
	for _, b := range seedBodies("stripe/") {
		f.Add(b, int64(0), 0)
	}
	f.Add([]byte{}, int64(299), 3)
	f.Fuzz(func(t *testing.T, body []byte, skew int64, flip int) {
		at := t0.Add(time.Duration(skew%600) * time.Second)
		h := fixtures.SignStripe(body, at, stripeSecret)
		err := webhooks.VerifyStripe(h, body, []string{stripeSecretOld, stripeSecret}, 5*time.Minute, t0)
		d := t0.Sub(at)
		if d < 0 {
			d = -d
		}
		if want := d <= 5*time.Minute; (err == nil) != want {
			t.Fatalf("skew %s: err = %v", d, err)
		}
		if err != nil && !errors.Is(err, webhooks.ErrStale) {
			t.Fatalf("authentic delivery: %v, want only ErrStale", err)
		}
		if len(body) > 0 {
			bad := bytes.Clone(body)
			i := flip % len(bad)
			if i < 0 {
				i = -i
			}
			bad[i] ^= 1
			if err := webhooks.VerifyStripe(h, bad, []string{stripeSecret}, 5*time.Minute, t0); !errors.Is(err, webhooks.ErrBadSignature) {
				t.Fatalf("tampered body: %v", err)
			}
		}
	})
}

func FuzzStandardHeaders(f *testing.F) {
	for _, b := range seedBodies("resend/") {
		h, err := fixtures.SignStandard("msg_1", b, t0, resendSecret)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature"), b)
	}
	f.Add("", "x", "v1,", []byte("{}"))
	f.Add("m", "-1", "v1a,AAAA v1,@@@", []byte(nil))
	key, err := webhooks.ParseStandardSecret(resendSecret)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		sh, err := webhooks.VerifyStandard(h, body, [][]byte{key}, 5*time.Minute, t0)
		if err != nil {
			if !errors.Is(err, webhooks.ErrBadSignature) && !errors.Is(err, webhooks.ErrUnparsable) && !errors.Is(err, webhooks.ErrStale) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		// Accepted: it must be exactly what the signer produces.
		n, _ := strconv.ParseInt(ts, 10, 64)
		want, err := fixtures.SignStandard(sh.ID, body, time.Unix(n, 0), resendSecret)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(sig, strings.TrimPrefix(want.Get("webhook-signature"), "v1,")) {
			t.Fatalf("accepted a signature the signer did not make: %q", sig)
		}
	})
}

func FuzzDecodeStripe(f *testing.F) {
	for _, b := range seedBodies("stripe/") {
		f.Add(b)
	}
	f.Add([]byte(`{"id":"evt_1","type":"x","request":"req_1","data":{"object":{"metadata":null}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := webhooks.DecodeStripe(body, "")
		if err != nil {
			if !errors.Is(err, webhooks.ErrUnparsable) {
				t.Fatalf("error %v does not wrap ErrUnparsable", err)
			}
			return
		}
		if ev.ID == "" || ev.Type == "" || ev.Vendor != "stripe" {
			t.Fatalf("decoded %+v without id, type or vendor", ev)
		}
	})
}

func FuzzDecodeStandard(f *testing.F) {
	for _, b := range seedBodies("resend/") {
		f.Add(b, "data.tags.metadata_local_id")
	}
	f.Add([]byte(`{"type":"t","data":{"tags":[{"name":"a"},{"value":"b"},1,null]}}`), "data.tags.a")
	f.Add([]byte(`{"type":"t"}`), "..")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		ev, err := webhooks.DecodeStandard(body, "msg_1", "resend", path)
		if err != nil {
			if !errors.Is(err, webhooks.ErrUnparsable) {
				t.Fatalf("error %v does not wrap ErrUnparsable", err)
			}
			return
		}
		if ev.Type == "" || ev.ID != "msg_1" {
			t.Fatalf("decoded %+v without a type", ev)
		}
	})
}
