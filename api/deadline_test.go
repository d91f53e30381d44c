package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

// TestDeadlines, over a real listener: a client that sends its headers and
// then trickles its body is cut at the body deadline, while a long poll
// whose wait outlasts both the body and the answer deadline still answers.
// Traced, otelhttp wraps the response writer: the deadlines must still
// reach the connection.
func TestDeadlines(t *testing.T) {
	t.Run("untraced", func(t *testing.T) { testDeadlines(t, nil) })
	t.Run("traced", func(t *testing.T) {
		tp := sdktrace.NewTracerProvider()
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		testDeadlines(t, tp)
	})
}

func testDeadlines(t *testing.T, tp trace.TracerProvider) {
	const (
		bodyTimeout   = 500 * time.Millisecond
		answerTimeout = 500 * time.Millisecond
		wait          = 3 * time.Second // > bodyTimeout + answerTimeout
	)
	f := newFixture(t, func(o *api.Options) {
		o.BodyTimeout, o.AnswerTimeout = bodyTimeout, answerTimeout
		o.PollInterval = time.Hour // nothing wakes the poll: it answers when its wait ends
		o.TracerProvider = tp
	})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	body, err := json.Marshal(newClaim("run_1"))
	if err != nil {
		t.Fatal(err)
	}
	post := func(target string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+target, strings.NewReader(string(body)))
		if err != nil {
			t.Error(err)
			return 0, nil
		}
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Errorf("POST %s: %v", target, err)
			return 0, nil
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Errorf("POST %s: decode: %v", target, err)
		}
		return resp.StatusCode, out
	}
	if code, out := post("/v1/claims"); code != http.StatusCreated {
		t.Fatalf("first claim = %d %v, want 201", code, out)
	}

	type answer struct {
		code    int
		out     map[string]any
		elapsed time.Duration
	}
	polled := make(chan answer, 1)
	go func() {
		start := time.Now()
		code, out := post(fmt.Sprintf("/v1/claims?wait=%s", wait))
		polled <- answer{code, out, time.Since(start)}
	}()
	testkit.Eventually(t, "the claim to long-poll", func() bool { return f.metricValue("reconciler_claim_waiters", nil) == 1 })

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/claims HTTP/1.1\r\nHost: reconciler\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tokenAcme, len(body))
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 100 ms: the body would take most of a minute
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for _, b := range body {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{b}); err != nil {
				return // cut
			}
		}
	}()
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil { // the test's own bound
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("trickling client: no answer before the long poll's wait ended: %v", err)
	}
	cut := time.Since(start)
	var got struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatalf("trickling client: decode the answer: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || got.Error.Code != "bad_body" {
		t.Errorf("trickling client: got %d %q, want 400 bad_body", resp.StatusCode, got.Error.Code)
	}
	if cut < bodyTimeout || cut > bodyTimeout+answerTimeout {
		t.Errorf("trickling client cut after %v, want at the body deadline (%v)", cut, bodyTimeout)
	}
	if n, err := io.Copy(io.Discard, br); err != nil || n != 0 {
		t.Errorf("trickling client: after the answer read %d bytes, %v; want the connection closed", n, err)
	}

	a := <-polled
	if a.code != http.StatusConflict || a.out["decision"] != "wait" {
		t.Fatalf("long poll = %d %v, want 409 wait", a.code, a.out)
	}
	if a.elapsed < wait {
		t.Errorf("long poll answered after %v, want after its whole wait (%v)", a.elapsed, wait)
	}
}

// slowRedrive is the fixture's store with a redrive slower than the body
// deadline.
type slowRedrive struct {
	*memstore.Store
	took time.Duration
}

func (s slowRedrive) RedriveOrphans(ctx context.Context) (ledger.RedriveResult, error) {
	select {
	case <-time.After(s.took):
		return s.Store.RedriveOrphans(ctx)
	case <-ctx.Done():
		return ledger.RedriveResult{}, ctx.Err()
	}
}

// TestDeadlinesLetSlowHandlersAnswer: the body deadline bounds the body,
// not the handler. A handler still at work when it passes, with its body
// read or with none to read, answers within the answer deadline: the
// connection's background read must not cancel its context there.
func TestDeadlinesLetSlowHandlersAnswer(t *testing.T) {
	const (
		bodyTimeout = 300 * time.Millisecond
		took        = 2 * bodyTimeout
	)
	slowCheck := api.ReadyCheck{Name: "store", Check: func(ctx context.Context) error {
		select {
		case <-time.After(took):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	f := newFixture(t, func(o *api.Options) {
		o.BodyTimeout, o.AnswerTimeout = bodyTimeout, 10*time.Second
		o.Store = slowRedrive{Store: o.Store.(*memstore.Store), took: took}
		o.Ready = []api.ReadyCheck{slowCheck}
	})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, method, target, token, body string
	}{
		{name: "a body read, then a slow redrive", method: http.MethodPost, target: "/v1/admin/redrive", token: tokenAdmin, body: "{}"},
		{name: "no body, a slow readiness check", method: http.MethodGet, target: "/readyz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequest(tc.method, srv.URL+tc.target, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			start := time.Now()
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("%s %s after %v: %v", tc.method, tc.target, time.Since(start), err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				data, _ := io.ReadAll(resp.Body)
				t.Fatalf("%s %s = %d %s, want 200", tc.method, tc.target, resp.StatusCode, data)
			}
			if elapsed := time.Since(start); elapsed < took {
				t.Errorf("answered after %v: the handler did not take its %v", elapsed, took)
			}
		})
	}
}
