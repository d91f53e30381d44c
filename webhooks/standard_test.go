package webhooks_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/webhooks"
)

func signStandard(t testing.TB, id string, body []byte, at time.Time, secrets ...string) http.Header {
	t.Helper()
	h, err := fixtures.SignStandard(id, body, at, secrets...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestVerifyStandard(t *testing.T) {
	body := fixtures.Load("resend/email.sent")
	key, err := webhooks.ParseStandardSecret(resendSecret)
	if err != nil {
		t.Fatal(err)
	}
	other := "whsec_" + "c2Vjb25kLXNlY3JldC1mb3ItdGhlLXJvdGF0aW9u"
	otherKey, err := webhooks.ParseStandardSecret(other)
	if err != nil {
		t.Fatal(err)
	}
	tol := 5 * time.Minute
	mod := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
		return h
	}
	good := signStandard(t, "msg_1", body, t0, resendSecret)
	tests := []struct {
		name    string
		h       http.Header
		body    []byte
		keys    [][]byte
		wantErr error
	}{
		{"valid", good, body, [][]byte{key}, nil},
		{"second key of two", good, body, [][]byte{otherKey, key}, nil},
		{"second entry of two", signStandard(t, "msg_1", body, t0, other, resendSecret), body, [][]byte{key}, nil},
		{"v1a entry ignored", mod(good, "webhook-signature", "v1a,AAAA "+good.Get("webhook-signature")), body, [][]byte{key}, nil},
		{"svix headers", http.Header{"Svix-Id": {"msg_1"}, "Svix-Timestamp": good["Webhook-Timestamp"], "Svix-Signature": good["Webhook-Signature"]}, body, [][]byte{key}, nil},
		{"wrong key", good, body, [][]byte{otherKey}, webhooks.ErrBadSignature},
		{"tampered body", good, append(body, ' '), [][]byte{key}, webhooks.ErrBadSignature},
		{"id changed", mod(good, "webhook-id", "msg_2"), body, [][]byte{key}, webhooks.ErrBadSignature},
		{"no signature", mod(good, "webhook-signature", ""), body, [][]byte{key}, webhooks.ErrBadSignature},
		{"no id", mod(good, "webhook-id", ""), body, [][]byte{key}, webhooks.ErrUnparsable},
		{"timestamp not a number", mod(good, "webhook-timestamp", "soon"), body, [][]byte{key}, webhooks.ErrUnparsable},
		{"stale", signStandard(t, "msg_1", body, t0.Add(-tol-time.Second), resendSecret), body, [][]byte{key}, webhooks.ErrStale},
		{"future", signStandard(t, "msg_1", body, t0.Add(tol+time.Second), resendSecret), body, [][]byte{key}, webhooks.ErrStale},
		{"forged and stale", signStandard(t, "msg_1", body, t0.Add(-time.Hour), other), body, [][]byte{key}, webhooks.ErrBadSignature},
		{"timestamp swapped", mod(good, "webhook-timestamp", strconv.FormatInt(t0.Unix()-1, 10)), body, [][]byte{key}, webhooks.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh, err := webhooks.VerifyStandard(tt.h, tt.body, tt.keys, tol, t0)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && sh.ID != "msg_1" {
				t.Errorf("id = %q", sh.ID)
			}
		})
	}
}

func TestParseStandardSecret(t *testing.T) {
	tests := []struct {
		secret string
		ok     bool
	}{
		{resendSecret, true},
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true},
		{"whsec_", false},
		{"whsec_not base64!", false},
	}
	for _, tt := range tests {
		t.Run(tt.secret, func(t *testing.T) {
			if _, err := webhooks.ParseStandardSecret(tt.secret); (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestDecodeStandard(t *testing.T) {
	const lid = "rl_0123456789abcdef0123456789abcdef"
	tests := []struct {
		fixture, path, wantType string
	}{
		{"resend/email.sent", "", "email.sent"},
		{"resend/email.sent.tags-array", "", "email.sent"},
		{"resend/email.delivered", "data.tags.metadata_local_id", "email.delivered"},
		{"resend/email.bounced", "", "email.bounced"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			body, err := fixtures.Set(fixtures.Load(tt.fixture), "metadata_local_id", lid)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := webhooks.DecodeStandard(body, "msg_9", "resend", tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != "msg_9" || ev.Vendor != "resend" || ev.Type != tt.wantType || ev.LocalID != lid ||
				ev.ObjectID != "56761188-7520-42d8-8898-ff6fc54ce618" || ev.Created.IsZero() {
				t.Errorf("event = %+v", ev)
			}
		})
	}
	t.Run("object id falls back to data.id", func(t *testing.T) {
		ev, err := webhooks.DecodeStandard([]byte(`{"type":"x.y","data":{"id":"obj_1"}}`), "m", "acme", "data.ref")
		if err != nil || ev.ObjectID != "obj_1" || ev.LocalID != "" {
			t.Fatalf("got %+v, %v", ev, err)
		}
	})
	// Event times in the shapes senders use; an unexpected shape is no time,
	// never a refusal of the event.
	for _, tc := range []struct{ name, body, want string }{
		{"RFC 3339 created_at", `{"type":"email.sent","created_at":"2026-11-30T12:00:00.5Z","data":{}}`, "2026-11-30T12:00:00.5Z"},
		{"Unix milliseconds timestamp", `{"type":"user.created","timestamp":1654012591835,"data":{"id":"user_1"}}`, "2022-05-31T15:56:31.835Z"},
		{"Unix seconds created_at", `{"type":"email.sent","created_at":1654012591,"data":{}}`, "2022-05-31T15:56:31Z"},
		{"an object is no time", `{"type":"email.sent","created_at":{"at":1},"data":{}}`, ""},
		{"a malformed string is no time", `{"type":"email.sent","created_at":"yesterday","data":{}}`, ""},
	} {
		t.Run("time: "+tc.name, func(t *testing.T) {
			ev, err := webhooks.DecodeStandard([]byte(tc.body), "m", "resend", "")
			if err != nil {
				t.Fatalf("DecodeStandard: %v", err)
			}
			got := ""
			if !ev.Created.IsZero() {
				got = ev.Created.Format(time.RFC3339Nano)
			}
			if got != tc.want {
				t.Fatalf("Created = %q, want %q", got, tc.want)
			}
		})
	}
	for _, bad := range []string{``, `{`, `[]`, `{"data":{}}`, `{"type":7}`} {
		t.Run("unparsable "+bad, func(t *testing.T) {
			if _, err := webhooks.DecodeStandard([]byte(bad), "m", "resend", ""); !errors.Is(err, webhooks.ErrUnparsable) {
				t.Fatalf("err = %v, want ErrUnparsable", err)
			}
		})
	}
}

func TestLookupPath(t *testing.T) {
	var doc any
	if err := json.Unmarshal([]byte(`{"data":{"tags":{"a":"1","n":2},"list":[{"name":"a","value":"2"},{"name":"b","value":{"c":"3"}}],"arr":["x","y"]}}`), &doc); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{"data.tags.a", "1"},
		{"data.tags.n", ""},
		{"data.tags.missing", ""},
		{"data.list.a", "2"},
		{"data.list.b.c", "3"},
		{"data.arr.1", "y"},
		{"data.arr.2", ""},
		{"data.arr.-1", ""},
		{"data.tags.a.deeper", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := webhooks.LookupPath(doc, tt.path); got != tt.want {
				t.Errorf("LookupPath(%q) = %q, want %q", tt.path, got, tt.want)
			}
		})
	}
}
