package presets_test

import (
	"encoding/json"
	"fmt"
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

// fakePostmark is Postmark's API as its docs describe it: POST /email
// sends every time (no idempotency key); GET /messages/outbound filters by
// metadata_<key>=<value> (count 1-500 required, offset), answering
// {TotalCount, Messages:[{MessageID, Status, Metadata, …}]}; a sent
// message becomes searchable only after an index lag, and is forgotten
// after the retention period (45 days). Auth: X-Postmark-Server-Token.
type fakePostmark struct {
	srv       *httptest.Server
	now       func() time.Time
	lag       time.Duration
	retention time.Duration
	mu        sync.Mutex
	msgs      []postmarkMsg
	searches  int
}

type postmarkMsg struct {
	id       string
	metadata map[string]string
	at       time.Time
}

func newFakePostmark(t *testing.T, now func() time.Time) *fakePostmark {
	f := &fakePostmark{now: now, lag: 2 * time.Minute, retention: 45 * 24 * time.Hour}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakePostmark) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("X-Postmark-Server-Token") != apiKey {
		writeJSON(w, 401, map[string]any{"ErrorCode": 10, "Message": "No Account or Server API tokens were supplied in the HTTP headers."})
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/email":
		var m struct{ Metadata map[string]string }
		if err := json.Unmarshal(body, &m); err != nil {
			writeJSON(w, 422, map[string]any{"ErrorCode": 402, "Message": "Invalid JSON"})
			return
		}
		id := fmt.Sprintf("b7bc2f4a-e38e-4336-af7d-e6c39%07d", len(f.msgs)+1)
		f.msgs = append(f.msgs, postmarkMsg{id: id, metadata: m.Metadata, at: f.now()})
		writeJSON(w, 200, map[string]any{"To": "b@example.com", "SubmittedAt": f.now().Format(time.RFC3339), "MessageID": id, "ErrorCode": 0, "Message": "OK"})
	case r.Method == http.MethodGet && r.URL.Path == "/messages/outbound":
		f.searches++
		q := r.URL.Query()
		count, err := strconv.Atoi(q.Get("count"))
		if err != nil || count < 1 || count > 500 || q.Get("offset") == "" {
			writeJSON(w, 422, map[string]any{"ErrorCode": 600, "Message": "The 'count' and 'offset' parameters are required."})
			return
		}
		var out []map[string]any
		for _, m := range f.msgs {
			if f.now().Before(m.at.Add(f.lag)) || f.now().After(m.at.Add(f.retention)) {
				continue
			}
			match := true
			for k, v := range q {
				if name, ok := strings.CutPrefix(k, "metadata_"); ok && m.metadata[name] != v[0] {
					match = false
				}
			}
			if match {
				out = append(out, map[string]any{"MessageID": m.id, "Status": "Sent", "Metadata": m.metadata, "Subject": "hi", "ReceivedAt": m.at.Format(time.RFC3339)})
			}
		}
		total := len(out)
		if len(out) > count {
			out = out[:count]
		}
		if out == nil {
			out = []map[string]any{}
		}
		writeJSON(w, 200, map[string]any{"TotalCount": total, "Messages": out})
	default:
		writeJSON(w, 404, map[string]any{"ErrorCode": 404, "Message": "not found"})
	}
}

func (f *fakePostmark) sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.msgs)
}

func postmarkRequest(localID string) *ledger.Request {
	return &ledger.Request{Method: "POST", Path: "/email", ContentType: "application/json",
		Body: `{"From":"a@example.com","To":"b@example.com","Subject":"hi","TextBody":"hi","Metadata":{"local_id":"` + localID + `"}}`}
}

func TestPostmark(t *testing.T) {
	setup := func(t *testing.T) (*env, *fakePostmark) {
		c := newClock()
		f := newFakePostmark(t, c.Now)
		return newEnv(t, c, "postmark", f.srv.URL, ""), f
	}
	t.Run("a committed email is found by its local id, not sent again", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"b@example.com"}`, nil)
		e.send(row, f.srv.URL, postmarkRequest(row.MetadataLocalID))
		e.timedOut(row)
		e.pass(time.Minute) // not searchable yet, and younger than min_age: proves nothing
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
		if e.pager.count() != 0 {
			t.Fatal("paged on a miss younger than min_age")
		}
		e.pass(5 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if !strings.HasPrefix(got.UpstreamReceiptID, "b7bc2f4a") || f.sent() != 1 || e.pager.count() != 0 {
			t.Errorf("receipt %q, sent %d, pages %d", got.UpstreamReceiptID, f.sent(), e.pager.count())
		}
	})
	t.Run("absent after min_age pages once and never resends", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"c@example.com"}`, postmarkRequest("x"))
		e.timedOut(row)
		e.pass(time.Minute)
		if e.pager.count() != 0 {
			t.Fatal("paged before min_age")
		}
		e.pass(10 * time.Minute)
		e.pass(2 * time.Hour)
		if e.pager.count() != 1 || f.sent() != 0 {
			t.Errorf("pages %d sent %d, want one page and nothing sent", e.pager.count(), f.sent())
		}
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
	})
	t.Run("two emails with one local id page at once", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"d@example.com"}`, nil)
		e.send(row, f.srv.URL, postmarkRequest(row.MetadataLocalID))
		e.send(row, f.srv.URL, postmarkRequest(row.MetadataLocalID)) // a retry layer resent it
		e.timedOut(row)
		e.pass(3 * time.Minute) // both searchable, still younger than min_age
		if e.pager.count() != 1 || !strings.Contains(e.pager.last(), "duplicate") {
			t.Fatalf("pages %d (%q), want one naming the duplicate", e.pager.count(), e.pager.last())
		}
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
	})
	t.Run("past the retention a miss proves nothing", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"e@example.com"}`, nil)
		e.send(row, f.srv.URL, postmarkRequest(row.MetadataLocalID))
		e.timedOut(row)
		e.clock.advance(46 * 24 * time.Hour)
		e.pass(0)
		if e.pager.count() != 1 || !strings.Contains(e.pager.last(), "retention") {
			t.Errorf("pages %d (%q), want one naming the retention", e.pager.count(), e.pager.last())
		}
	})
}
