package drill

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
)

// PagerDuty is a fake PagerDuty Events API v2: it counts every trigger it
// receives (not only distinct alerts, so a page sent twice is seen twice,
// even though the real PagerDuty would fold it into one alert by dedup key)
// and answers 202 like the real one. Safe for concurrent use.
type PagerDuty struct {
	srv *httptest.Server

	mu       sync.Mutex
	triggers []string // dedup keys, in order
}

// NewPagerDuty starts the fake on a loopback port.
func NewPagerDuty() *PagerDuty {
	p := &PagerDuty{}
	p.srv = httptest.NewServer(http.HandlerFunc(p.enqueue))
	return p
}

// URL is the Events API v2 enqueue URL.
func (p *PagerDuty) URL() string { return p.srv.URL + "/v2/enqueue" }

// Close stops the server.
func (p *PagerDuty) Close() { p.srv.Close() }

// Triggers returns the dedup key of every trigger received.
func (p *PagerDuty) Triggers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.triggers...)
}

func (p *PagerDuty) enqueue(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		RoutingKey  string `json:"routing_key"`
		EventAction string `json:"event_action"`
		DedupKey    string `json:"dedup_key"`
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v2/enqueue" || json.NewDecoder(r.Body).Decode(&ev) != nil ||
		ev.RoutingKey == "" || ev.DedupKey == "" {
		http.Error(w, `{"status":"invalid event"}`, http.StatusBadRequest)
		return
	}
	if ev.EventAction == "trigger" {
		p.mu.Lock()
		p.triggers = append(p.triggers, ev.DedupKey)
		p.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"success","message":"Event processed","dedup_key":` + quote(ev.DedupKey) + `}`))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
