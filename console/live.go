package console

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentledger/reconciler/ledger"
)

// Subscriber is the part of a NATS connection the live feed uses
// (*nats.Conn): a core subscription sees the events as the relay
// publishes them, without a consumer on the stream.
type Subscriber interface {
	Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
}

// liveEvent is what a browser receives: enough to say what changed and
// link to it, nothing a tenant's approver may not see of its own tenant.
type liveEvent struct {
	Tenant string    `json:"tenant"`
	Key    string    `json:"key"`
	RunID  string    `json:"run_id"`
	Tool   string    `json:"tool"`
	Status string    `json:"status"`
	Source string    `json:"source,omitempty"`
	At     time.Time `json:"at"`
}

// hub fans the events out to the open streams. A slow browser loses
// events (its buffer is full) rather than slowing the others; the page it
// shows is still right after a reload.
type hub struct {
	mu      sync.Mutex
	clients map[chan liveEvent]func(tenant string) bool
	sub     *nats.Subscription
	done    chan struct{}
}

func newHub() *hub {
	return &hub{clients: map[chan liveEvent]func(string) bool{}, done: make(chan struct{})}
}

func (h *hub) start(s Subscriber, prefix string, log *slog.Logger) error {
	sub, err := s.Subscribe(prefix+".>", func(m *nats.Msg) {
		var ev ledger.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			log.Warn("console: live feed: an event that is not JSON", "subject", m.Subject)
			return
		}
		h.publish(liveEvent{Tenant: ev.Tenant, Key: ev.Key, RunID: ev.RunID, Tool: ev.Tool, Status: ev.Status, Source: string(ev.Source), At: ev.At})
	})
	if err != nil {
		return fmt.Errorf("console: live feed: subscribe %s.>: %w", prefix, err)
	}
	h.mu.Lock()
	h.sub = sub
	h.mu.Unlock()
	return nil
}

func (h *hub) publish(ev liveEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch, allowed := range h.clients {
		if !allowed(ev.Tenant) {
			continue
		}
		select {
		case ch <- ev:
		default:
		}
	}
}

func (h *hub) add(allowed func(string) bool) (chan liveEvent, func()) {
	ch := make(chan liveEvent, 64)
	h.mu.Lock()
	h.clients[ch] = allowed
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.clients, ch)
		h.mu.Unlock()
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub != nil {
		_ = h.sub.Unsubscribe()
	}
	select {
	case <-h.done:
	default:
		close(h.done)
	}
}

// liveHeartbeat keeps proxies from closing a quiet stream.
const liveHeartbeat = 25 * time.Second

// events is GET /console/events: Server-Sent Events of the tenants the
// session may see, until the browser leaves, the session ends or the
// console closes.
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	rc := http.NewResponseController(w)
	// The server may bound writes (api.DefaultAnswerTimeout); a stream
	// sets its own deadline per write instead.
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	ch, remove := c.live.add(s.canSee)
	defer remove()
	beat := time.NewTicker(liveHeartbeat)
	defer beat.Stop()
	// The session's clock is the injected one; the timer runs on the real one.
	expires := time.NewTimer(s.expires.Sub(c.now()))
	defer expires.Stop()
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte("retry: 5000\n: live\n\n")) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.live.done:
			return
		case <-expires.C:
			write([]byte("event: signedout\ndata: {}\n\n"))
			return
		case <-beat.C:
			if !c.sessions.alive(r.Context(), s) {
				write([]byte("event: signedout\ndata: {}\n\n"))
				return
			}
			if !write([]byte(": beat\n\n")) {
				return
			}
		case ev := <-ch:
			if !c.sessions.alive(r.Context(), s) {
				write([]byte("event: signedout\ndata: {}\n\n"))
				return
			}
			data, _ := json.Marshal(ev)
			if !write([]byte("event: resolution\ndata: " + string(data) + "\n\n")) {
				return
			}
		}
	}
}
