package drill

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/webhooks"
)

// post sends a PaymentIntent create with key, bounded by timeout.
func post(t *testing.T, v *Vendor, key string, timeout time.Duration) (*http.Response, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	form := url.Values{"amount": {"1050"}, "currency": {"usd"}, "metadata[metadata_local_id]": {"rl_" + key}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.URL()+"/v1/payment_intents", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", formType)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// TestVendorFaults checks that each fault does what the drills rely on:
// what the first POST sees, how many objects exist after it, and what a
// second POST with the same key gets (the stored answer, nothing new).
func TestVendorFaults(t *testing.T) {
	tests := []struct {
		name        string
		fault       Fault
		wantErr     bool // no answer at all
		wantStatus  int
		wantObjects int
		// replayStatus is what the same key answers next (0: like
		// wantStatus); replayed says whether that is the stored answer
		// (Idempotent-Replayed), and objectsAfter counts objects then.
		replayStatus int
		replayed     bool
		objectsAfter int
	}{
		{name: "none", fault: FaultNone, wantStatus: 200, wantObjects: 1, replayed: true, objectsAfter: 1},
		{name: "hang commits then times out", fault: FaultHang, wantErr: true, wantObjects: 1,
			replayStatus: 200, replayed: true, objectsAfter: 1},
		{name: "500 after commit is stored", fault: Fault500, wantStatus: 500, wantObjects: 1, replayed: true, objectsAfter: 1},
		{name: "409 names the object", fault: Fault409, wantStatus: 409, wantObjects: 1, replayed: true, objectsAfter: 1},
		// Stripe stores a refusal under its key as well.
		{name: "400 creates nothing", fault: Fault400, wantStatus: 400, replayed: true},
		{name: "402 declines", fault: Fault402, wantStatus: 402, replayed: true},
		// A request the vendor never read leaves the key free.
		{name: "drop creates nothing", fault: FaultDrop, wantErr: true, replayStatus: 200, objectsAfter: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := NewVendor(time.Now)
			t.Cleanup(v.Close)
			v.Plan(1, tt.fault)
			resp, body, err := post(t, v, "key_1", 300*time.Millisecond)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got an answer %d, want none", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tt.wantStatus {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
				}
			}
			if got := len(v.Objects()); got != tt.wantObjects {
				t.Fatalf("objects %d, want %d", got, tt.wantObjects)
			}
			if tt.fault == Fault409 {
				var se stripeErrorBody
				if err := json.Unmarshal(body, &se); err != nil || se.Error.ResourceID != v.Objects()[0].ID {
					t.Errorf("409 body %s does not name %s", body, v.Objects()[0].ID)
				}
			}

			resp, body, err = post(t, v, "key_1", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.replayStatus
			if want == 0 {
				want = tt.wantStatus
			}
			if resp.StatusCode != want {
				t.Errorf("same key again: status %d, want %d: %s", resp.StatusCode, want, body)
			}
			if got := len(v.Objects()); got != tt.objectsAfter {
				t.Errorf("objects after the same key again: %d, want %d", got, tt.objectsAfter)
			}
			if got := resp.Header.Get("Idempotent-Replayed") == "true"; got != tt.replayed {
				t.Errorf("Idempotent-Replayed %v, want %v", got, tt.replayed)
			}
			if v.Posts() != 2 {
				t.Errorf("posts %d, want 2", v.Posts())
			}
		})
	}
}

func TestVendorHoldAndRelease(t *testing.T) {
	v := NewVendor(time.Now)
	t.Cleanup(v.Close)
	v.Plan(1, FaultHold)
	done := make(chan int, 1)
	go func() {
		resp, _, err := post(t, v, "key_hold", 10*time.Second)
		if err != nil {
			done <- 0
			return
		}
		done <- resp.StatusCode
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := v.WaitPosts(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, func() (bool, error) { return len(v.Objects()) == 1, nil }); err != nil {
		t.Fatalf("held post never committed: %v", err)
	}
	select {
	case code := <-done:
		t.Fatalf("held answer arrived before Release: %d", code)
	default:
	}
	v.Release()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("after Release: %d, want 200", code)
	}
}

// TestVendorSearchAndWebhook checks the resolver's and the webhook's view
// of an object: Search by metadata_local_id finds exactly it, and the
// webhook it signs is accepted by the real Stripe verifier.
func TestVendorSearchAndWebhook(t *testing.T) {
	v := NewVendor(time.Now)
	t.Cleanup(v.Close)
	if _, _, err := post(t, v, "key_s", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	id := v.Objects()[0].ID
	tests := []struct {
		name, query string
		want        int
	}{
		{"hit", "metadata['metadata_local_id']:'rl_key_s'", 1},
		{"miss", "metadata['metadata_local_id']:'rl_other'", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(v.URL() + "/v1/payment_intents/search?query=" + url.QueryEscape(tt.query))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var list struct{ Data []Object }
			if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
				t.Fatal(err)
			}
			if len(list.Data) != tt.want || (tt.want == 1 && list.Data[0].ID != id) {
				t.Errorf("search found %+v, want %d", list.Data, tt.want)
			}
		})
	}
	body, sig, err := v.Webhook(id, webhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := webhooks.VerifyStripe(sig, body, []string{webhookSecret}, webhooks.DefaultTolerance, time.Now()); err != nil {
		t.Fatalf("the vendor's webhook does not verify: %v", err)
	}
	ev, err := webhooks.DecodeStripe(body, webhooks.DefaultMetadataKey)
	if err != nil {
		t.Fatal(err)
	}
	if ev.LocalID != "rl_key_s" {
		t.Errorf("decoded local id %q, want rl_key_s", ev.LocalID)
	}
	if !strings.Contains(string(body), `"rl_key_s"`) || !strings.Contains(string(body), id) {
		t.Errorf("webhook body lacks the local id or the object id:\n%s", body)
	}
}

func TestTransportRefusesUnkeyedWrite(t *testing.T) {
	v := NewVendor(time.Now)
	t.Cleanup(v.Close)
	_, err := goCall(chargeCall(v.URL(), 1050, true))(context.Background(), "", "")
	if !errors.Is(err, client.ErrNoKey) {
		t.Fatalf("got %v, want ErrNoKey", err)
	}
	if v.Posts() != 0 {
		t.Fatalf("an unkeyed write reached the vendor")
	}
}

// TestVendorOnCommit: the hook runs after the commit and before the
// answer leaves, with the POST's key and the new object, and not for a
// replay of the key, which creates nothing.
func TestVendorOnCommit(t *testing.T) {
	v := NewVendor(time.Now)
	t.Cleanup(v.Close)
	type seen struct {
		key     string
		obj     Object
		objects int
	}
	hooked := make(chan seen, 2)
	hook := func(_ context.Context, key string, obj Object) { hooked <- seen{key, obj, len(v.Objects())} }
	v.OnCommit(1, hook)
	v.OnCommit(2, hook)
	if _, _, err := post(t, v, "key_h", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-hooked:
		if s.key != "key_h" || s.obj.ID != v.Objects()[0].ID || s.objects != 1 {
			t.Fatalf("hook saw %+v, want key_h, the new object, committed", s)
		}
	default:
		t.Fatal("the hook had not run when the answer arrived")
	}
	if _, _, err := post(t, v, "key_h", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-hooked:
		t.Fatalf("a replay ran the hook: %+v", s)
	default:
	}
}
