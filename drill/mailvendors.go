package drill

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// mailResend is the profiled-vendor drills' Resend: POST /emails keeps
// Idempotency-Key for 24 h (a repeat with the same payload answers the
// first email's id, another payload 409 invalid_idempotent_request), and
// can commit an email and then hold the answer past the client's timeout.
// GET /emails/{id} answers last_event.
type mailResend struct {
	srv     *httptest.Server
	now     func() time.Time
	release chan struct{}

	mu     sync.Mutex
	keys   map[string]resendEntry
	emails []string
	posts  int
	hang   int // the next n first sends commit, then hang until release
}

type resendEntry struct {
	body, id string
	at       time.Time
}

func newMailResend(now func() time.Time) *mailResend {
	v := &mailResend{now: now, keys: map[string]resendEntry{}, release: make(chan struct{})}
	v.srv = httptest.NewServer(http.HandlerFunc(v.serve))
	return v
}

func (v *mailResend) close() {
	close(v.release)
	v.srv.CloseClientConnections()
	v.srv.Close()
}

func (v *mailResend) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	if r.Header.Get("Authorization") != "Bearer "+drillVendorKey {
		v.mu.Unlock()
		writeJSONAnswer(w, 401, `{"statusCode":401,"name":"missing_api_key"}`)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/emails":
		v.posts++
		key := r.Header.Get("Idempotency-Key")
		if e, ok := v.keys[key]; ok && key != "" && v.now().Sub(e.at) < 24*time.Hour {
			v.mu.Unlock()
			if e.body != string(body) {
				writeJSONAnswer(w, 409, `{"statusCode":409,"name":"invalid_idempotent_request","message":"Same idempotency key used with a different request payload."}`)
				return
			}
			writeJSONAnswer(w, 200, fmt.Sprintf(`{"id":%q}`, e.id))
			return
		}
		id := fmt.Sprintf("49a3999c-0ce1-4ea6-ab68-afcd6dc2e79%d", len(v.emails))
		v.emails = append(v.emails, id)
		if key != "" {
			v.keys[key] = resendEntry{body: string(body), id: id, at: v.now()}
		}
		hang := v.hang > 0
		if hang {
			v.hang--
		}
		v.mu.Unlock()
		if hang { // committed; the answer never comes in time
			select {
			case <-r.Context().Done():
			case <-v.release:
			}
			return
		}
		writeJSONAnswer(w, 200, fmt.Sprintf(`{"id":%q}`, id))
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/emails/"):
		id := strings.TrimPrefix(r.URL.Path, "/emails/")
		for _, e := range v.emails {
			if e == id {
				v.mu.Unlock()
				writeJSONAnswer(w, 200, fmt.Sprintf(`{"object":"email","id":%q,"last_event":"delivered"}`, id))
				return
			}
		}
		v.mu.Unlock()
		writeJSONAnswer(w, 404, `{"statusCode":404,"name":"not_found"}`)
	default:
		v.mu.Unlock()
		writeJSONAnswer(w, 405, `{"statusCode":405,"name":"method_not_allowed"}`)
	}
}

func (v *mailResend) sent() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.emails)
}

// mailPostmark is the drills' Postmark: POST /email sends every time (no
// key); GET /messages/outbound?count&offset&metadata_<k>=<v> finds sent
// messages by metadata once its index caught up (lag).
type mailPostmark struct {
	srv *httptest.Server
	now func() time.Time
	lag time.Duration

	mu   sync.Mutex
	msgs []pmMessage
}

type pmMessage struct {
	id, localID string
	at          time.Time
}

func newMailPostmark(now func() time.Time) *mailPostmark {
	v := &mailPostmark{now: now, lag: 2 * time.Minute}
	v.srv = httptest.NewServer(http.HandlerFunc(v.serve))
	return v
}

func (v *mailPostmark) close() { v.srv.Close() }

func (v *mailPostmark) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	defer v.mu.Unlock()
	if r.Header.Get("X-Postmark-Server-Token") != drillVendorKey {
		writeJSONAnswer(w, 401, `{"ErrorCode":10,"Message":"No Account or Server API tokens were supplied in the HTTP headers."}`)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/email":
		local := ""
		if i := strings.Index(string(body), `"local_id":"`); i >= 0 {
			rest := string(body)[i+len(`"local_id":"`):]
			local, _, _ = strings.Cut(rest, `"`)
		}
		id := fmt.Sprintf("0a129aee-e1cd-480d-b08d-4f48548ff%03d", len(v.msgs))
		v.msgs = append(v.msgs, pmMessage{id: id, localID: local, at: v.now()})
		writeJSONAnswer(w, 200, fmt.Sprintf(`{"To":"b@example.com","MessageID":%q,"ErrorCode":0,"Message":"OK"}`, id))
	case r.Method == http.MethodGet && r.URL.Path == "/messages/outbound":
		q := r.URL.Query()
		if n, err := strconv.Atoi(q.Get("count")); err != nil || n < 1 || n > 500 || q.Get("offset") == "" {
			writeJSONAnswer(w, 422, `{"ErrorCode":600,"Message":"The 'count' and 'offset' parameters are required."}`)
			return
		}
		var out []string
		for _, m := range v.msgs {
			if m.localID == q.Get("metadata_local_id") && !v.now().Before(m.at.Add(v.lag)) {
				out = append(out, fmt.Sprintf(`{"MessageID":%q,"Status":"Sent","Metadata":{"local_id":%q}}`, m.id, m.localID))
			}
		}
		writeJSONAnswer(w, 200, fmt.Sprintf(`{"TotalCount":%d,"Messages":[%s]}`, len(out), strings.Join(out, ",")))
	default:
		writeJSONAnswer(w, 404, `{"ErrorCode":404,"Message":"not found"}`)
	}
}

func (v *mailPostmark) sent() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.msgs)
}

func writeJSONAnswer(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}
