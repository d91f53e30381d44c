// Package fakemailgun is Mailgun's HTTP API as its documentation describes
// it, for tests: POST /v3/<domain>/messages queues a message (no
// idempotency key: every call sends) and records its accepted event; GET
// /v3/<domain>/events lists the domain's events (filters begin, ascending,
// limit up to 300, event as an OR expression; no filter on user variables)
// with paging.next URLs that end in an empty page. Both take basic auth
// api:<key>. An event becomes visible only after Lag.
//
// Test-only (scripts/importcheck.sh). Safe for concurrent use.
package fakemailgun

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is a fake Mailgun for one sending domain.
type Server struct {
	srv    *httptest.Server
	domain string
	key    string
	now    func() time.Time
	// Lag is how long an event takes to be listed (default 0).
	Lag time.Duration

	mu     sync.Mutex
	events []Event
	seq    int
	calls  int
}

// Event is one stored event, in the shape the Events API lists.
type Event struct {
	ID        string
	Event     string // accepted, rejected, delivered, failed, …
	Severity  string // failed only: temporary or permanent
	MessageID string
	LocalID   string // user-variables.metadata_local_id
	At        time.Time
}

// New starts a fake for domain, authenticated by key, reading now.
func New(domain, key string, now func() time.Time) *Server {
	s := &Server{domain: domain, key: key, now: now}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// APIBase is the base a profile's api_base names: https://…/v3/<domain>.
func (s *Server) APIBase() string { return s.srv.URL + "/v3/" + s.domain }

// EventCalls is how many events requests were answered.
func (s *Server) EventCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Add records an event of the message msgID carrying localID, now.
func (s *Server) Add(msgID, localID, event, severity string) Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addLocked(msgID, localID, event, severity)
}

func (s *Server) addLocked(msgID, localID, event, severity string) Event {
	s.seq++
	e := Event{ID: fmt.Sprintf("evt-%06d-Xq3lQc", s.seq), Event: event, Severity: severity, MessageID: msgID, LocalID: localID, At: s.now()}
	s.events = append(s.events, e)
	return e
}

// Noise adds n accepted events of other messages (no local id), so a
// lookup has to page.
func (s *Server) Noise(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.addLocked(fmt.Sprintf("noise%d@%s", s.seq, s.domain), "", "accepted", "")
	}
}

func (s *Server) authorized(r *http.Request) bool {
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("api:"+s.key))
	return r.Header.Get("Authorization") == want
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("Forbidden"))
		return
	}
	prefix := "/v3/" + s.domain
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Domain not found"})
		return
	}
	switch {
	case r.Method == http.MethodPost && rest == "/messages":
		s.send(w, r)
	case r.Method == http.MethodGet && (rest == "/events" || strings.HasPrefix(rest, "/events/")):
		s.list(w, r, strings.TrimPrefix(rest, "/events"))
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
	}
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(1 << 20); err != nil && r.ParseForm() != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "invalid form"})
		return
	}
	if r.PostForm.Get("from") == "" || r.PostForm.Get("to") == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "from parameter is missing"})
		return
	}
	s.mu.Lock()
	id := fmt.Sprintf("<%s.%d@%s>", s.now().UTC().Format("20060102150405"), s.seq+1, s.domain)
	s.addLocked(strings.Trim(id, "<>"), r.PostForm.Get("v:metadata_local_id"), "accepted", "")
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "message": "Queued. Thank you."})
}

// query is a listing's filters and position; the page token of a next URL
// carries it.
type query struct {
	Begin     float64  `json:"b"`
	Ascending bool     `json:"a"`
	Limit     int      `json:"l"`
	Events    []string `json:"e,omitempty"`
	Offset    int      `json:"o"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, token string) {
	var q query
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, "/"))
		if err != nil || json.Unmarshal(raw, &q) != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"message": "invalid page token"})
			return
		}
	} else {
		v := r.URL.Query()
		q.Limit = 100
		if l := v.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > 300 {
				writeJSON(w, http.StatusBadRequest, map[string]any{"message": "limit: must be an integer between 1 and 300"})
				return
			}
			q.Limit = n
		}
		switch v.Get("ascending") {
		case "yes":
			q.Ascending = true
		case "", "no":
		default:
			writeJSON(w, http.StatusBadRequest, map[string]any{"message": "ascending: must be yes or no"})
			return
		}
		q.Begin = float64(s.now().Unix())
		if b := v.Get("begin"); b != "" {
			f, err := strconv.ParseFloat(b, 64)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]any{"message": "begin: invalid timestamp"})
				return
			}
			q.Begin = f
		}
		if e := v.Get("event"); e != "" {
			for _, t := range strings.Split(e, " OR ") {
				q.Events = append(q.Events, strings.TrimSpace(t))
			}
		}
	}
	s.mu.Lock()
	s.calls++
	var sel []Event
	for _, e := range s.events {
		ts := float64(e.At.UnixNano()) / 1e9
		if s.now().Before(e.At.Add(s.Lag)) {
			continue
		}
		if q.Ascending && ts < q.Begin || !q.Ascending && ts > q.Begin {
			continue
		}
		if len(q.Events) > 0 && !contains(q.Events, e.Event) {
			continue
		}
		sel = append(sel, e)
	}
	s.mu.Unlock()
	if !q.Ascending {
		for i, j := 0, len(sel)-1; i < j; i, j = i+1, j-1 {
			sel[i], sel[j] = sel[j], sel[i]
		}
	}
	page := []map[string]any{}
	for i := q.Offset; i < len(sel) && len(page) < q.Limit; i++ {
		page = append(page, render(sel[i], s.domain))
	}
	next := q
	next.Offset = q.Offset + len(page)
	prev := q
	prev.Offset = max(0, q.Offset-q.Limit)
	base := s.srv.URL + "/v3/" + s.domain + "/events/"
	writeJSON(w, http.StatusOK, map[string]any{
		"items": page,
		"paging": map[string]any{
			"next": base + pageToken(next), "previous": base + pageToken(prev),
			"first": base + pageToken(query{Begin: q.Begin, Ascending: q.Ascending, Limit: q.Limit, Events: q.Events}),
			"last":  base + pageToken(query{Begin: q.Begin, Ascending: q.Ascending, Limit: q.Limit, Events: q.Events, Offset: max(0, len(sel)-q.Limit)}),
		},
	})
}

func pageToken(q query) string {
	b, _ := json.Marshal(q)
	return base64.RawURLEncoding.EncodeToString(b)
}

func render(e Event, domain string) map[string]any {
	uv := map[string]any{}
	if e.LocalID != "" {
		uv["metadata_local_id"] = e.LocalID
	}
	m := map[string]any{
		"id": e.ID, "event": e.Event, "timestamp": float64(e.At.UnixNano()) / 1e9, "log-level": "info",
		"recipient": "b@example.com", "user-variables": uv, "tags": []string{}, "campaigns": []string{},
		"flags":   map[string]any{"is-authenticated": true, "is-test-mode": false},
		"message": map[string]any{"headers": map[string]any{"message-id": e.MessageID, "to": "b@example.com", "from": "a@" + domain, "subject": "hi"}, "size": 420},
	}
	if e.Severity != "" {
		m["severity"] = e.Severity
	}
	if e.Event == "failed" || e.Event == "rejected" {
		m["log-level"] = "error"
	}
	return m
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
