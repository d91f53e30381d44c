package presets_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// fakeZendesk is Zendesk's tickets API: POST /api/v2/tickets takes
// Idempotency-Key (kept 2 h; x-idempotency-lookup: miss on first use, hit
// on a replay; another payload under the key is 400
// IdempotentRequestError); GET /api/v2/tickets?external_id= lists the
// tickets with that external id (not unique: it may list several);
// GET /api/v2/tickets/{id}. Ticket ids are 64-bit integers. Basic auth.
type fakeZendesk struct {
	srv     *httptest.Server
	now     func() time.Time
	mu      sync.Mutex
	keys    map[string]zdKey
	tickets []map[string]any
}

type zdKey struct {
	body string
	resp map[string]any
	at   time.Time
}

func newFakeZendesk(t *testing.T, now func() time.Time) *fakeZendesk {
	f := &fakeZendesk{now: now, keys: map[string]zdKey{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeZendesk) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Basic "+apiKey {
		writeJSON(w, 401, map[string]any{"error": "Couldn't authenticate you"})
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v2/tickets":
		key := r.Header.Get("Idempotency-Key")
		if k, ok := f.keys[key]; ok && key != "" && f.now().Sub(k.at) < 2*time.Hour {
			if k.body != string(body) {
				writeJSON(w, 400, map[string]any{"error": "IdempotentRequestError", "description": "Request parameters don't match the given idempotency key"})
				return
			}
			w.Header().Set("x-idempotency-lookup", "hit")
			writeJSON(w, 201, k.resp)
			return
		}
		var in struct {
			Ticket map[string]any `json:"ticket"`
		}
		_ = json.Unmarshal(body, &in)
		t := map[string]any{"id": int64(35436) + int64(len(f.tickets)), "status": "new", "external_id": in.Ticket["external_id"], "subject": in.Ticket["subject"]}
		f.tickets = append(f.tickets, t)
		resp := map[string]any{"ticket": t}
		if key != "" {
			f.keys[key] = zdKey{body: string(body), resp: resp, at: f.now()}
			w.Header().Set("x-idempotency-lookup", "miss")
		}
		writeJSON(w, 201, resp)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v2/tickets":
		ext := r.URL.Query().Get("external_id")
		out := []map[string]any{}
		for _, t := range f.tickets {
			if t["external_id"] == ext {
				out = append(out, t)
			}
		}
		writeJSON(w, 200, map[string]any{"tickets": out, "count": len(out), "next_page": nil, "previous_page": nil})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v2/tickets/"):
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/api/v2/tickets/"), 10, 64)
		for _, t := range f.tickets {
			if t["id"] == id {
				writeJSON(w, 200, map[string]any{"ticket": t})
				return
			}
		}
		writeJSON(w, 404, map[string]any{"error": "RecordNotFound", "description": "Not found"})
	default:
		writeJSON(w, 404, map[string]any{"error": "InvalidEndpoint"})
	}
}

func (f *fakeZendesk) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tickets)
}

func zdRequest(localID, subject string) *ledger.Request {
	return &ledger.Request{Method: "POST", Path: "/api/v2/tickets", ContentType: "application/json",
		Body: `{"ticket":{"subject":"` + subject + `","comment":{"body":"x"},"external_id":"` + localID + `"}}`}
}

func TestZendesk(t *testing.T) {
	setup := func(t *testing.T) (*env, *fakeZendesk) {
		c := newClock()
		f := newFakeZendesk(t, c.Now)
		return newEnv(t, c, "zendesk", f.srv.URL, ""), f
	}
	t.Run("a committed ticket is found by external_id", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"subject":"refund"}`, nil)
		req := zdRequest(row.MetadataLocalID, "refund")
		if code, _ := e.send(row, f.srv.URL, req); code != 201 {
			t.Fatalf("create: %d", code)
		}
		e.timedOut(row)
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if got.UpstreamReceiptID != "35436" || f.count() != 1 {
			t.Errorf("receipt %q (want the 64-bit id as written), tickets %d", got.UpstreamReceiptID, f.count())
		}
	})
	t.Run("absent inside the window: one replay, x-idempotency-lookup miss then one ticket", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"subject":"lost"}`, zdRequest("rl_placeholder", "lost"))
		e.timedOut(row) // the runtime's call never reached Zendesk
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		e.pass(time.Hour)
		if f.count() != 1 || e.pager.count() != 0 {
			t.Errorf("tickets %d pages %d, want one ticket", f.count(), e.pager.count())
		}
	})
	t.Run("two tickets carry the external id: page, never replay", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"subject":"dup"}`, nil)
		req := zdRequest(row.MetadataLocalID, "dup")
		e.send(row, f.srv.URL, req)
		f.mu.Lock()
		f.tickets = append(f.tickets, map[string]any{"id": int64(99), "status": "open", "external_id": row.MetadataLocalID})
		f.mu.Unlock()
		e.timedOut(row)
		e.pass(2 * time.Minute)
		e.pass(time.Hour)
		if e.pager.count() != 1 || f.count() != 2 {
			t.Errorf("pages %d tickets %d, want one page and no new ticket", e.pager.count(), f.count())
		}
	})
}
