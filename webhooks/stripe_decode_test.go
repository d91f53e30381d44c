package webhooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The reflection decoder DecodeStripe used before its one-pass scanner
// (stripe_decode.go), kept as the scanner's oracle: both must accept the
// same bodies and read the same Event from them.

type stripeEvent struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Created    int64           `json:"created"`
	Livemode   bool            `json:"livemode"`
	APIVersion string          `json:"api_version"`
	Request    json.RawMessage `json:"request"`
	Data       struct {
		Object stripeObject `json:"object"`
	} `json:"data"`
}

type stripeObject struct {
	ID             string                     `json:"id"`
	Object         string                     `json:"object"`
	Amount         *int64                     `json:"amount"`
	AmountReceived *int64                     `json:"amount_received"`
	Currency       string                     `json:"currency"`
	Metadata       map[string]json.RawMessage `json:"metadata"`
	PaymentIntent  json.RawMessage            `json:"payment_intent"`
	Charge         json.RawMessage            `json:"charge"`
}

type stripeRequest struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
}

func decodeStripeReflect(body []byte, metadataKey string) (Event, error) {
	if metadataKey == "" {
		metadataKey = DefaultMetadataKey
	}
	var se stripeEvent
	if err := decodeEvent(body, &se); err != nil {
		return Event{}, fmt.Errorf("%w: stripe event: %v", ErrUnparsable, err)
	}
	if se.ID == "" || se.Type == "" {
		return Event{}, fmt.Errorf("%w: stripe event: no id or type", ErrUnparsable)
	}
	obj := se.Data.Object
	ev := Event{
		Vendor:   "stripe",
		ID:       se.ID,
		Type:     se.Type,
		ObjectID: obj.ID,
		LocalID:  rawStringOf(obj.Metadata[metadataKey]),
		Currency: strings.ToLower(obj.Currency),
		Livemode: se.Livemode,
		Raw:      body,
	}
	if se.Created > 0 {
		ev.Created = time.Unix(se.Created, 0).UTC()
	}
	if pi := rawStringOf(obj.PaymentIntent); obj.Object == "charge" && pi != "" {
		ev.ObjectID = pi
	}
	switch {
	case obj.Amount != nil:
		ev.Amount = obj.Amount
	case obj.AmountReceived != nil:
		ev.Amount = obj.AmountReceived
	}
	if len(se.Request) > 0 && se.Request[0] == '{' {
		var r stripeRequest
		if decodeEvent(se.Request, &r) == nil {
			ev.IdempotencyKey = r.IdempotencyKey
		}
	}
	return ev, nil
}

func rawStringOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if decodeEvent(raw, &s) != nil {
		return ""
	}
	return s
}

// sameDecode fails t when DecodeStripe and the reflection decoder disagree
// on body: one accepts what the other refuses, or they read different
// events.
func sameDecode(t *testing.T, body []byte, metadataKey string) {
	t.Helper()
	got, gotErr := DecodeStripe(body, metadataKey)
	want, wantErr := decodeStripeReflect(body, metadataKey)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("body %q: scanner error %v, reflection error %v", body, gotErr, wantErr)
	}
	if gotErr != nil {
		if !errors.Is(gotErr, ErrUnparsable) {
			t.Fatalf("body %q: error %v does not wrap ErrUnparsable", body, gotErr)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("body %q:\nscanner    %+v\nreflection %+v", body, got, want)
	}
}

// stripeDecodeCases are the shapes the scanner's rules speak of, each
// decoded both ways by TestScanStripeMatchesReflect and seeding
// FuzzScanStripe.
var stripeDecodeCases = []string{
	`{"id":"evt_1","type":"x"}`,
	`null`, `[]`, `"x"`, `1`, ``, ` `, `{`, `{"id":"evt_1","type":"x"} {}`, `{"id":"evt_1","type":"x"}  `,
	`{"id":"evt_1","type":"x","id":null}`,
	`{"ID":"evt_1","TYPE":"x","Created":5,"LiveMode":true}`,
	`{"id":"evt_1","type":"x","created":1.5}`,
	`{"id":"evt_1","type":"x","created":1e3}`,
	`{"id":"evt_1","type":"x","created":-0}`,
	`{"id":"evt_1","type":"x","created":-5}`,
	`{"id":"evt_1","type":"x","created":9223372036854775808}`,
	`{"id":"evt_1","type":"x","created":"5"}`,
	`{"id":"evt_1","type":"x","created":null}`,
	`{"id":"evt_1","type":"x","livemode":"true"}`,
	`{"id":"evt_1","type":"x","livemode":true,"livemode":null}`,
	`{"id":"evt_1","type":"x","api_version":5}`,
	`{"id":5,"type":"x"}`,
	`{"id":"evt_1","type":"x","unknown":{"a":[1,2,{"b":null}]}}`,
	`{"id":"evt_1","type":"x","unknown":[1,}`,
	`{"id":"evt_1","type":"x","request":"req_1"}`,
	`{"id":"evt_1","type":"x","request":{"id":"req_1","idempotency_key":"k"}}`,
	`{"id":"evt_1","type":"x","request":{"id":5,"idempotency_key":"k"}}`,
	`{"id":"evt_1","type":"x","request":{"idempotency_key":7}}`,
	`{"id":"evt_1","type":"x","request":{"idempotency_key":"k"},"request":null}`,
	`{"id":"evt_1","type":"x","request":{"idempotency_key":"k"},"request":{"id":"r"}}`,
	`{"id":"evt_1","type":"x","request":{"idempotency_key":"k","idempotency_key":null}}`,
	`{"id":"evt_1","type":"x","request":{"Idempotency_Key":"k","extra":{}}}`,
	`{"id":"evt_1","type":"x","reque\u017Ft":{"idempotency_\u212Aey":"k"}}`,
	`{"id":"evt_1","type":"x","request":{"idempotency_key":"\ud800"}}`,
	`{"id":"evt_1","type":"x","data":null}`,
	`{"id":"evt_1","type":"x","data":[]}`,
	`{"id":"evt_1","type":"x","data":{"object":null}}`,
	`{"id":"evt_1","type":"x","data":{"object":"pi_1"}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"id":"pi_1"},"previous_attributes":{}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"id":"pi_1","amount":5}},"data":{"object":{"currency":"USD"}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"amount":5,"amount":null,"amount_received":7}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"amount":null}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"amount":1.0}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"amount":"5"}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"amount_received":-9223372036854775808}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"object":"charge","payment_intent":"pi_2","id":"ch_1"}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"object":"charge","payment_intent":{"id":"pi_2"},"id":"ch_1"}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"object":"charge","payment_intent":"pi_2","payment_intent":null}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"charge":{"any":[true]},"object":5}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_id":"rl_1"}}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_id":5}}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"METADATA_LOCAL_ID":"rl_1"}}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_id":"rl_1"},"metadata":{"other":"x"}}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_id":"rl_1"},"metadata":null}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_id":"rl_1","metadata_local_id":null}}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":"x"}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_id":"rl_\u00e9\n"}}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_\u0069d":"rl_1"}}}}`,
	"{\"id\":\"evt_\xff\",\"type\":\"x\xc3\",\"data\":{\"object\":{\"metadata\":{\"metadata_local_id\":\"rl_\xfe\"}}}}",
	"{\"id\":\"evt_1\",\"type\":\"x\",\"data\":{\"object\":{\"metadata\":{\"metadata_local_id\xff\":\"rl_1\"}}}}",
	"{\"i\xc4\xb1d\":\"evt_1\",\"type\":\"x\"}",
	`{"id":"evt_1","type":"x","data":{"object":{"metadata":{"metadata_local_id":"a","metadata_local_id":"b"}}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"currency":"EUR","id":"pi_\"q\""}}}`,
	`{"id":"evt_1","type":"x","data":{"object":{"currency":"EUR"}},"data":{"object":{"currency":null}}}`,
}

func TestScanStripeMatchesReflect(t *testing.T) {
	for _, c := range stripeDecodeCases {
		sameDecode(t, []byte(c), "")
		sameDecode(t, []byte(c), "order")
	}
	// Nesting at and past the tokenizer's depth limit, in a member nobody
	// reads and in data.object.
	for _, depth := range []int{100, 9990, 10001} {
		deep := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		sameDecode(t, []byte(`{"id":"evt_1","type":"x","unknown":`+deep+`}`), "")
		sameDecode(t, []byte(`{"id":"evt_1","type":"x","data":{"object":{"charge":`+deep+`}}}`), "")
	}
	// Every Stripe fixture, with and without a metadata key of its own.
	files, err := filepath.Glob("../fixtures/stripe/*/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Stripe fixtures: %v", err)
	}
	for _, name := range files {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sameDecode(t, body, "")
		sameDecode(t, body, "order")
		if _, err := DecodeStripe(body, ""); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzScanStripe checks the scanner against the reflection decoder on
// any body.
func FuzzScanStripe(f *testing.F) {
	for _, c := range stripeDecodeCases {
		f.Add([]byte(c), "")
	}
	files, _ := filepath.Glob("../fixtures/stripe/*/*.json")
	for _, name := range files {
		if body, err := os.ReadFile(name); err == nil {
			f.Add(body, "")
			f.Add(body, "order")
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, metadataKey string) {
		sameDecode(t, body, metadataKey)
	})
}
