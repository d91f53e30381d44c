package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"github.com/agentledger/reconciler/ledger"
)

// agentsPath is where apiWatch serves the API: an agent named a finds it
// under /agents/a.
const agentsPath = "/agents/"

// apiWatch is a loopback reverse proxy in front of the API through which
// every agent of a drill talks to the ledger, each under a path of its own
// (/agents/<name>/v1/claims…). It sees each claim answer an agent gets, so
// a drill can order two agents' steps (hold the vendor until the second
// agent has been told to wait) whatever language the runtime is written
// in: a runner process needs no hooks, only a base URL.
type apiWatch struct {
	srv *httptest.Server
	tr  *http.Transport

	mu   sync.Mutex
	seen map[watchKey]*watched
}

// watchKey names one kind of answer to one agent.
type watchKey struct {
	agent    string
	decision ledger.Decision
}

// watched is the first answer of its kind; done is closed once key is set.
type watched struct {
	done chan struct{}
	key  string
}

type agentCtxKey struct{}

func newAPIWatch(api string, log *slog.Logger) (*apiWatch, error) {
	target, err := url.Parse(api)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", api, err)
	}
	w := &apiWatch{tr: http.DefaultTransport.(*http.Transport).Clone(), seen: map[watchKey]*watched{}}
	rp := &httputil.ReverseProxy{
		Rewrite:        func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:      w.tr,
		ModifyResponse: w.record,
		// A long poll the agent gave up on is a canceled request, not news.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	mux := http.NewServeMux()
	mux.HandleFunc(agentsPath+"{agent}/", func(rw http.ResponseWriter, r *http.Request) {
		agent := r.PathValue("agent")
		r = r.WithContext(context.WithValue(r.Context(), agentCtxKey{}, agent))
		http.StripPrefix(agentsPath+agent, rp).ServeHTTP(rw, r)
	})
	w.srv = httptest.NewServer(mux)
	return w, nil
}

// agentsURL is where the agents find the API: agent a's base URL is
// agentsURL() + "/a".
func (w *apiWatch) agentsURL() string { return w.srv.URL + strings.TrimSuffix(agentsPath, "/") }

// record notes the decision and key of every claim answer (POST
// /v1/claims) and hands the body on untouched.
func (w *apiWatch) record(resp *http.Response) error {
	req := resp.Request
	if req.Method != http.MethodPost || req.URL.Path != "/v1/claims" {
		return nil
	}
	agent, _ := req.Context().Value(agentCtxKey{}).(string)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("watch: read claim answer: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var ans struct {
		Decision ledger.Decision `json:"decision"`
		Row      *struct {
			Key string `json:"key"`
		} `json:"row"`
	}
	if json.Unmarshal(body, &ans) != nil || ans.Decision == "" {
		return nil // an error answer: no decision to see
	}
	key := ""
	if ans.Row != nil {
		key = ans.Row.Key
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.entry(watchKey{agent, ans.Decision})
	select {
	case <-s.done:
	default:
		s.key = key
		close(s.done)
	}
	return nil
}

// entry returns the watched answer of k, making it; w.mu is held.
func (w *apiWatch) entry(k watchKey) *watched {
	s, ok := w.seen[k]
	if !ok {
		s = &watched{done: make(chan struct{})}
		w.seen[k] = s
	}
	return s
}

// answered returns a channel that is closed once agent has been answered
// decision (already closed when it was).
func (w *apiWatch) answered(agent string, decision ledger.Decision) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.entry(watchKey{agent, decision}).done
}

// key is the row key of the first answer decision to agent ("" before it).
func (w *apiWatch) key(agent string, decision ledger.Decision) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.entry(watchKey{agent, decision}).key
}

func (w *apiWatch) close() {
	w.srv.CloseClientConnections()
	w.srv.Close()
	w.tr.CloseIdleConnections()
}
