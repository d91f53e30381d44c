package presets_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/resolver"
)

// fakeResend is Resend's email API as its docs describe it: POST /emails
// with Idempotency-Key (1-256 characters, kept 24 h): the same key and
// payload answer the first email's id without a second send; another
// payload is 409 invalid_idempotent_request; a key whose first request is
// still running is 409 concurrent_idempotent_requests. GET /emails/{id}
// answers the email with its last_event. No search by tag.
type fakeResend struct {
	srv   *httptest.Server
	now   func() time.Time
	mu    sync.Mutex
	keys  map[string]resendKey
	email map[string]string // id → last_event
	busy  map[string]bool   // keys whose first request is "still running"
	sends int               // emails actually sent: the side effect
	posts int
}

type resendKey struct {
	body string
	id   string
	at   time.Time
}

func newFakeResend(t *testing.T, now func() time.Time) *fakeResend {
	f := &fakeResend{now: now, keys: map[string]resendKey{}, email: map[string]string{}, busy: map[string]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeResend) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		writeJSON(w, 401, map[string]any{"statusCode": 401, "name": "missing_api_key", "message": "Missing API key in the authorization header."})
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/emails":
		f.posts++
		key := r.Header.Get("Idempotency-Key")
		if len(key) > 256 {
			writeJSON(w, 400, map[string]any{"statusCode": 400, "name": "invalid_idempotency_key", "message": "The key must be between 1-256 chars."})
			return
		}
		if key != "" {
			if f.busy[key] {
				writeJSON(w, 409, map[string]any{"statusCode": 409, "name": "concurrent_idempotent_requests", "message": "Same idempotency key used while original request is still in progress."})
				return
			}
			if k, ok := f.keys[key]; ok && f.now().Sub(k.at) < 24*time.Hour {
				if k.body != string(body) {
					writeJSON(w, 409, map[string]any{"statusCode": 409, "name": "invalid_idempotent_request", "message": "Same idempotency key used with a different request payload."})
					return
				}
				writeJSON(w, 200, map[string]any{"id": k.id})
				return
			}
		}
		f.sends++
		id := fmt.Sprintf("4ef9a417-02e9-4d39-ad75-9611e0fcc33%d", f.sends)
		f.email[id] = "sent"
		if key != "" {
			f.keys[key] = resendKey{body: string(body), id: id, at: f.now()}
		}
		writeJSON(w, 200, map[string]any{"id": id})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/emails/"):
		id := strings.TrimPrefix(r.URL.Path, "/emails/")
		ev, ok := f.email[id]
		if !ok {
			writeJSON(w, 404, map[string]any{"statusCode": 404, "name": "not_found", "message": "Email not found"})
			return
		}
		writeJSON(w, 200, map[string]any{"object": "email", "id": id, "to": []string{"a@example.com"}, "last_event": ev})
	default:
		writeJSON(w, 405, map[string]any{"statusCode": 405, "name": "method_not_allowed"})
	}
}

func (f *fakeResend) counts() (sends, posts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sends, f.posts
}

func resendRequest(subject string) *ledger.Request {
	return &ledger.Request{Method: "POST", Path: "/emails", ContentType: "application/json",
		Body: `{"from":"a@example.com","to":["b@example.com"],"subject":"` + subject + `","html":"<p>hi</p>","tags":[{"name":"metadata_local_id","value":"x"}]}`}
}

func TestResend(t *testing.T) {
	t.Run("a lost answer settles through one replay, one email", func(t *testing.T) {
		c := newClock()
		f := newFakeResend(t, c.Now)
		e := newEnv(t, c, "resend", f.srv.URL, "")
		req := resendRequest("invoice 42")
		row := e.claim(`{"to":"b@example.com","subject":"invoice 42"}`, req)
		if row.VendorKey != row.Key {
			t.Fatalf("a 64-hex key fits Resend's 256: vendor key %q, want the key", row.VendorKey)
		}
		if code, _ := e.send(row, f.srv.URL, req); code != 200 {
			t.Fatalf("first send: %d", code)
		}
		e.timedOut(row) // the answer was lost
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if sends, posts := f.counts(); sends != 1 || posts != 2 {
			t.Errorf("sends %d posts %d, want one email from two posts", sends, posts)
		}
		if got.UpstreamReceiptID == "" || e.pager.count() != 0 {
			t.Errorf("receipt %q, pages %d", got.UpstreamReceiptID, e.pager.count())
		}
	})
	t.Run("the key reused with another payload pages once, no second replay", func(t *testing.T) {
		c := newClock()
		f := newFakeResend(t, c.Now)
		e := newEnv(t, c, "resend", f.srv.URL, "")
		row := e.claim(`{"subject":"a"}`, resendRequest("stored"))
		e.send(row, f.srv.URL, resendRequest("what the runtime really sent"))
		e.timedOut(row)
		e.pass(2 * time.Minute)
		e.pass(2 * time.Hour)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusUnknown)
		if _, posts := f.counts(); posts != 2 {
			t.Errorf("posts %d, want the send and one replay", posts)
		}
		if e.pager.count() != 1 || !strings.Contains(e.pager.last(), "409") {
			t.Errorf("pages %d (%q), want one naming the 409", e.pager.count(), e.pager.last())
		}
	})
	t.Run("a request still in progress is replayed again later", func(t *testing.T) {
		c := newClock()
		f := newFakeResend(t, c.Now)
		e := newEnv(t, c, "resend", f.srv.URL, "")
		req := resendRequest("b")
		row := e.claim(`{"subject":"b"}`, req)
		e.send(row, f.srv.URL, req)
		f.mu.Lock()
		f.busy[row.VendorKey] = true
		f.mu.Unlock()
		e.timedOut(row)
		e.pass(2 * time.Minute)
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
		f.mu.Lock()
		delete(f.busy, row.VendorKey)
		f.mu.Unlock()
		e.pass(time.Hour)
		wantStatus(t, e.row(row.Key), ledger.StatusSucceeded)
		if sends, _ := f.counts(); sends != 1 || e.pager.count() != 0 {
			t.Errorf("sends %d pages %d", sends, e.pager.count())
		}
	})
	t.Run("never a replay after a 5xx, a page once the window closed", func(t *testing.T) {
		c := newClock()
		f := newFakeResend(t, c.Now)
		e := newEnv(t, c, "resend", f.srv.URL, "")
		row := e.claim(`{"subject":"c"}`, resendRequest("c"))
		if _, _, err := e.store.Report(context.Background(), "acme", row.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 503, Attempt: 1, At: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		e.pass(2 * time.Minute)
		e.pass(23 * time.Hour)
		if _, posts := f.counts(); posts != 0 || e.pager.count() != 0 {
			t.Fatalf("posts %d pages %d inside the window: want none", posts, e.pager.count())
		}
		e.pass(2 * time.Hour)
		e.pass(2 * time.Hour)
		if _, posts := f.counts(); posts != 0 || e.pager.count() != 1 {
			t.Errorf("posts %d pages %d after the window: want one page, no replay", posts, e.pager.count())
		}
	})
	t.Run("retrieve reads last_event", func(t *testing.T) {
		c := newClock()
		f := newFakeResend(t, c.Now)
		e := newEnv(t, c, "resend", f.srv.URL, "")
		f.email["em_delivered"], f.email["em_bounced"] = "delivered", "bounced"
		lk, _ := resolver.NewProfiled(e.profile, nil)
		for id, want := range map[string]ledger.Status{"em_delivered": ledger.StatusSucceeded, "em_bounced": ledger.StatusFailedPoison, "em_gone": ""} {
			fd, err := lk.Retrieve(context.Background(), ledger.Row{UpstreamReceiptID: id})
			if err != nil {
				t.Fatal(err)
			}
			if fd.Status != want || fd.Found != (want != "") {
				t.Errorf("%s: %+v, want status %q", id, fd, want)
			}
		}
	})
}
