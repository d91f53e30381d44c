package fakestripe_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	stripeclient "github.com/stripe/stripe-go/v79/client"

	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/internal/testkit"
)

const key = "sk_test_kit"

// call sends one request the way Stripe's clients do (form body, Bearer
// key) and decodes the JSON answer.
func call(t *testing.T, s *fakestripe.Stripe, hc *http.Client, method, path, idemKey, form string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL()+path, strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if hc == nil {
		hc = s.Client()
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s %s: answer %q: %v", method, path, b, err)
	}
	return resp.StatusCode, resp.Header, body
}

const piForm = "amount=1050&currency=usd&metadata[metadata_local_id]=rl_1"

func TestIdempotentReplay(t *testing.T) {
	s := fakestripe.New(t, fakestripe.Options{APIKey: key})
	code, h, obj := call(t, s, nil, http.MethodPost, "/v1/payment_intents", "k1", piForm)
	if code != 200 || obj["id"] != "pi_1" || obj["status"] != "succeeded" || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("create: %d %v %v", code, h, obj)
	}
	if md := obj["metadata"].(map[string]any); md["metadata_local_id"] != "rl_1" || obj["amount"] != 1050.0 {
		t.Errorf("object %v lost the request's amount or metadata", obj)
	}
	code, h, again := call(t, s, nil, http.MethodPost, "/v1/payment_intents", "k1", "metadata[metadata_local_id]=rl_1&currency=usd&amount=1050")
	if code != 200 || again["id"] != "pi_1" || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %v %v, want the stored pi_1, replayed", code, h, again)
	}
	code, _, other := call(t, s, nil, http.MethodPost, "/v1/payment_intents", "k1", "amount=999&currency=usd")
	if code != 400 || other["error"].(map[string]any)["type"] != "idempotency_error" {
		t.Errorf("other params under the key: %d %v, want 400 idempotency_error", code, other)
	}
	if n := s.ObjectCount(); n != 1 {
		t.Errorf("objects = %d, want 1", n)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[0].Replayed || !reqs[1].Replayed || reqs[2].Replayed || reqs[1].IdempotencyKey != "k1" ||
		reqs[0].Params.Get("metadata[metadata_local_id]") != "rl_1" || reqs[0].APIKey != key {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name       string
		fault      fakestripe.Fault
		wantStatus int // 0: no answer
		wantObj    int
		wantHeader string // "Name: value" on the answer
		// replay: what a retry with the key gets (0: a new write)
		replay int
	}{
		{name: "none", fault: fakestripe.FaultNone, wantStatus: 200, wantObj: 1, replay: 200},
		{name: "hang", fault: fakestripe.FaultHang, wantObj: 1, replay: 200},
		{name: "reset", fault: fakestripe.FaultReset, wantObj: 1, replay: 200},
		{name: "500 stored", fault: fakestripe.Fault500, wantStatus: 500, wantObj: 0, replay: 500},
		{name: "409 names the object", fault: fakestripe.Fault409, wantStatus: 409, wantObj: 1, replay: 409},
		{name: "declined", fault: fakestripe.FaultDecline, wantStatus: 402, wantObj: 1, wantHeader: "Stripe-Should-Retry: false", replay: 402},
		{name: "429 stores nothing", fault: fakestripe.Fault429, wantStatus: 429, wantObj: 0, wantHeader: "Retry-After: 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakestripe.New(t, fakestripe.Options{})
			s.Inject(tt.fault)
			hc := &http.Client{Timeout: 200 * time.Millisecond}
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/payment_intents", strings.NewReader(piForm))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Idempotency-Key", "k1")
			resp, err := hc.Do(req)
			switch {
			case tt.wantStatus == 0 && err == nil:
				resp.Body.Close()
				t.Fatalf("got %d, want no answer", resp.StatusCode)
			case tt.wantStatus == 0:
			case err != nil:
				t.Fatal(err)
			default:
				var body map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != tt.wantStatus {
					t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
				}
				if name, value, ok := strings.Cut(tt.wantHeader, ": "); ok && resp.Header.Get(name) != value {
					t.Errorf("%s = %q, want %q", name, resp.Header.Get(name), value)
				}
				if tt.wantObj == 1 && tt.wantStatus >= 400 {
					pi, _ := body["error"].(map[string]any)["payment_intent"].(map[string]any)
					if pi["id"] != "pi_1" {
						t.Errorf("error %v does not name pi_1", body)
					}
				}
			}
			if n := s.ObjectCount(); n != tt.wantObj {
				t.Errorf("objects = %d, want %d", n, tt.wantObj)
			}
			code, h, _ := call(t, s, nil, http.MethodPost, "/v1/payment_intents", "k1", piForm)
			if tt.replay == 0 {
				if code != 200 || h.Get("Idempotent-Replayed") != "" || s.ObjectCount() != tt.wantObj+1 {
					t.Errorf("retry: %d replayed %q, %d objects; want a new write", code, h.Get("Idempotent-Replayed"), s.ObjectCount())
				}
				return
			}
			if code != tt.replay || h.Get("Idempotent-Replayed") != "true" || s.ObjectCount() != tt.wantObj {
				t.Errorf("retry: %d replayed %q, %d objects; want %d replayed, %d objects", code, h.Get("Idempotent-Replayed"), s.ObjectCount(), tt.replay, tt.wantObj)
			}
		})
	}
}

func TestFail(t *testing.T) {
	s := fakestripe.New(t, fakestripe.Options{})
	s.FailNext(429, 503)
	for _, want := range []int{429, 503, 404} {
		if code, _, _ := call(t, s, nil, http.MethodGet, "/v1/payment_intents/pi_none", "", ""); code != want {
			t.Errorf("status = %d, want %d", code, want)
		}
	}
	s.FailAll(500)
	if code, _, _ := call(t, s, nil, http.MethodPost, "/v1/payment_intents", "k", piForm); code != 500 || s.ObjectCount() != 0 {
		t.Errorf("FailAll: %d with %d objects", code, s.ObjectCount())
	}
	s.FailAll(0)
	if code, _, _ := call(t, s, nil, http.MethodPost, "/v1/payment_intents", "k", piForm); code != 200 {
		t.Errorf("after FailAll(0): %d", code)
	}
}

func TestAuth(t *testing.T) {
	for _, tc := range []struct {
		name, apiKey, sent string
		want               int
	}{
		{name: "the configured key", apiKey: "sk_test_a", sent: "Bearer sk_test_a", want: 404},
		{name: "another key", apiKey: "sk_test_a", sent: "Bearer sk_test_b", want: 401},
		{name: "any sk_ key", sent: "Bearer sk_test_b", want: 404},
		{name: "no key", sent: "", want: 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fakestripe.New(t, fakestripe.Options{APIKey: tc.apiKey})
			req, _ := http.NewRequest(http.MethodGet, s.URL()+"/v1/payment_intents/pi_x", nil)
			if tc.sent != "" {
				req.Header.Set("Authorization", tc.sent)
			}
			resp, err := s.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestSearchLagAndLookups(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := fakestripe.New(t, fakestripe.Options{Now: clock.Now, SearchLag: time.Minute})
	call(t, s, nil, http.MethodPost, "/v1/payment_intents", "k1", piForm)
	s.Put(map[string]any{"id": "cus_9", "object": "customer", "metadata": map[string]string{"metadata_local_id": "rl_1"}}, clock.Now().Add(-time.Hour))
	q := "?query=" + url.QueryEscape("metadata['metadata_local_id']:'rl_1'")
	ids := func(body map[string]any) []string {
		var out []string
		for _, o := range body["data"].([]any) {
			out = append(out, o.(map[string]any)["id"].(string))
		}
		return out
	}
	if _, _, body := call(t, s, nil, http.MethodGet, "/v1/payment_intents/search"+q, "", ""); len(ids(body)) != 0 {
		t.Errorf("search before the lag = %v, want nothing", ids(body))
	}
	clock.Advance(time.Minute)
	if _, _, body := call(t, s, nil, http.MethodGet, "/v1/payment_intents/search"+q, "", ""); strings.Join(ids(body), ",") != "pi_1" {
		t.Errorf("search after the lag = %v, want pi_1 (not the customer)", ids(body))
	}
	if _, _, body := call(t, s, nil, http.MethodGet, "/v1/customers/search"+q, "", ""); strings.Join(ids(body), ",") != "cus_9" {
		t.Errorf("customer search = %v, want cus_9", ids(body))
	}
	s.SetSearchUnavailable(true)
	if code, _, _ := call(t, s, nil, http.MethodGet, "/v1/payment_intents/search"+q, "", ""); code != 400 {
		t.Errorf("search unavailable: %d, want 400", code)
	}
	if code, _, obj := call(t, s, nil, http.MethodGet, "/v1/payment_intents/pi_1", "", ""); code != 200 || obj["id"] != "pi_1" {
		t.Errorf("retrieve: %d %v", code, obj)
	}
	if code, _, _ := call(t, s, nil, http.MethodGet, "/v1/payment_intents/cus_9", "", ""); code != 404 {
		t.Errorf("retrieve a customer as a payment intent: %d, want 404", code)
	}
	s.SetStatus("pi_1", "processing")
	if _, _, obj := call(t, s, nil, http.MethodGet, "/v1/payment_intents/pi_1", "", ""); obj["status"] != "processing" {
		t.Errorf("status after SetStatus = %v", obj["status"])
	}
	if n := s.Count("GET /v1/payment_intents/search"); n != 3 {
		t.Errorf("searches counted = %d, want 3", n)
	}
}

func TestRefundsEventsCancel(t *testing.T) {
	s := fakestripe.New(t, fakestripe.Options{})
	call(t, s, nil, http.MethodPost, "/v1/refunds", "r1", "payment_intent=pi_parent&metadata[metadata_local_id]=rl_a")
	call(t, s, nil, http.MethodPost, "/v1/refunds", "r2", "payment_intent=pi_other")
	_, _, list := call(t, s, nil, http.MethodGet, "/v1/refunds?payment_intent=pi_parent", "", "")
	if data := list["data"].([]any); len(data) != 1 || data[0].(map[string]any)["id"] != "re_1" {
		t.Errorf("refunds of pi_parent = %v, want re_1", data)
	}
	s.AddEvent(map[string]any{"id": "evt_1"})
	s.AddEvent(map[string]any{"id": "evt_2"})
	_, _, evs := call(t, s, nil, http.MethodGet, "/v1/events", "", "")
	if data := evs["data"].([]any); len(data) != 2 || data[0].(map[string]any)["id"] != "evt_2" {
		t.Errorf("events = %v, want newest first", data)
	}
	if code, _, _ := call(t, s, nil, http.MethodPost, "/v1/payment_intents/pi_none/cancel", "c0", ""); code != 404 {
		t.Errorf("cancel of a missing intent: %d, want 404", code)
	}
	s.Put(map[string]any{"id": "pi_9", "object": "payment_intent", "status": "requires_capture"}, time.Now())
	if code, _, obj := call(t, s, nil, http.MethodPost, "/v1/payment_intents/pi_9/cancel", "c1", "cancellation_reason=duplicate"); code != 200 || obj["status"] != "canceled" {
		t.Errorf("cancel: %d %v", code, obj)
	}
}

// TestStripeGo: stripe-go v79, which the resolver and client.StripeBackend
// use, reads the fake's answers: objects, the replay header, and errors
// naming the PaymentIntent.
func TestStripeGo(t *testing.T) {
	s := fakestripe.New(t, fakestripe.Options{APIKey: key})
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(s.URL()), HTTPClient: s.Client(),
		MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	sc := &stripeclient.API{}
	sc.Init(key, &stripe.Backends{API: b, Connect: b, Uploads: b})
	params := func(k string) *stripe.PaymentIntentParams {
		p := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}
		p.IdempotencyKey = stripe.String(k)
		p.AddMetadata("metadata_local_id", "rl_go")
		return p
	}
	pi, err := sc.PaymentIntents.New(params("k1"))
	if err != nil || pi.ID != "pi_1" || pi.Amount != 1050 || pi.Metadata["metadata_local_id"] != "rl_go" {
		t.Fatalf("create: %+v, %v", pi, err)
	}
	pi, err = sc.PaymentIntents.New(params("k1"))
	if err != nil || pi.ID != "pi_1" || pi.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %+v, %v", pi, err)
	}
	s.Inject(fakestripe.FaultDecline)
	_, err = sc.PaymentIntents.New(params("k2"))
	var se *stripe.Error
	if !errors.As(err, &se) || se.Code != stripe.ErrorCodeCardDeclined || se.PaymentIntent == nil || se.PaymentIntent.ID != "pi_2" {
		t.Fatalf("decline: %v, want card_declined naming pi_2", err)
	}
	got, err := sc.PaymentIntents.Get("pi_2", nil)
	if err != nil || got.Status != stripe.PaymentIntentStatusRequiresPaymentMethod {
		t.Errorf("declined intent: %+v, %v", got, err)
	}
}
