package presets_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// fakeHubSpot is HubSpot's CRM objects API: GET
// /crm/v3/objects/deals/{value}?idProperty=reconciler_local_id reads an
// object by a unique property (a consistent read, not the search index):
// 200 {id, properties, …} or 404 OBJECT_NOT_FOUND; rate limits answer 429
// with Retry-After. Bearer auth.
type fakeHubSpot struct {
	srv      *httptest.Server
	mu       sync.Mutex
	byLocal  map[string]string // reconciler_local_id → object id
	throttle bool
	reads    int
}

func newFakeHubSpot(t *testing.T) *fakeHubSpot {
	f := &fakeHubSpot{byLocal: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeHubSpot) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		writeJSON(w, 401, map[string]any{"status": "error", "message": "Authentication credentials not found.", "category": "INVALID_AUTHENTICATION"})
		return
	}
	if f.throttle {
		w.Header().Set("Retry-After", "10")
		writeJSON(w, 429, map[string]any{"status": "error", "message": "You have reached your ten_secondly_rolling limit.", "errorType": "RATE_LIMIT", "policyName": "TEN_SECONDLY_ROLLING"})
		return
	}
	v, ok := strings.CutPrefix(r.URL.Path, "/crm/v3/objects/deals/")
	if r.Method != http.MethodGet || !ok {
		writeJSON(w, 404, map[string]any{"status": "error", "category": "OBJECT_NOT_FOUND"})
		return
	}
	id := v
	if r.URL.Query().Get("idProperty") == "reconciler_local_id" {
		id = f.byLocal[v]
	}
	if id == "" {
		writeJSON(w, 404, map[string]any{"status": "error", "message": "Object not found.  objectId are usually numeric.", "category": "OBJECT_NOT_FOUND"})
		return
	}
	writeJSON(w, 200, map[string]any{"id": id, "properties": map[string]any{"reconciler_local_id": v, "dealname": "x"}, "archived": false})
}

func TestHubSpot(t *testing.T) {
	setup := func(t *testing.T) (*env, *fakeHubSpot) {
		f := newFakeHubSpot(t)
		return newEnv(t, newClock(), "hubspot", f.srv.URL, ""), f
	}
	t.Run("an object carrying the local id settles the row", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"deal":"a"}`, nil)
		f.byLocal[row.MetadataLocalID] = "18340223891"
		e.timedOut(row)
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if got.UpstreamReceiptID != "18340223891" {
			t.Errorf("receipt %q", got.UpstreamReceiptID)
		}
	})
	t.Run("404 is absence: a page, no replay (no key)", func(t *testing.T) {
		e, _ := setup(t)
		row := e.claim(`{"deal":"b"}`, &ledger.Request{Method: "POST", Path: "/crm/v3/objects/deals", ContentType: "application/json", Body: `{}`})
		e.timedOut(row)
		e.pass(2 * time.Minute)
		if e.pager.count() != 1 {
			t.Errorf("pages %d, want 1", e.pager.count())
		}
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
	})
	t.Run("429 backs the vendor off: no decision, no page", func(t *testing.T) {
		e, f := setup(t)
		f.throttle = true
		row := e.claim(`{"deal":"c"}`, nil)
		e.timedOut(row)
		e.pass(2 * time.Minute)
		e.pass(time.Second) // paused: the row is not even looked at
		f.mu.Lock()
		reads := f.reads
		f.mu.Unlock()
		if reads != 1 || e.pager.count() != 0 {
			t.Errorf("reads %d pages %d, want one read and a pause", reads, e.pager.count())
		}
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
	})
}
