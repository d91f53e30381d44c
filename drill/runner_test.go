package drill

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// envTestRunner makes the test binary a runner (see TestMain): the Go
// runtime served over the runner protocol, as a process of its own, the
// way the Python and TypeScript runners are driven. Its value is the mode.
const envTestRunner = "RECONCILER_DRILL_TEST_RUNNER"

// The test runner's modes.
const (
	modeServe   = "serve"   // answer every op
	modeFuture  = "future"  // greet with a protocol version this harness does not speak
	modeGarbage = "garbage" // answer the first op with a line that is not JSON
	modeExit    = "exit"    // die on the first op, saying why on stderr
	modeBase    = "base"    // announce no capability: the base protocol only
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envTestRunner); mode != "" {
		os.Exit(serveTestRunner(mode))
	}
	os.Exit(m.Run())
}

// serveTestRunner speaks the runner protocol on stdin and stdout, as
// drill_runner.py and drill-runner.mjs do, with the Go runtime behind it:
// its agents wait by long poll, as the other runners' do.
func serveTestRunner(mode string) int {
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	write := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(v)
	}
	h := hello{Protocol: ProtocolVersion, Runtime: "go-runner", Client: "client (test binary)", Capabilities: capabilities}
	switch mode {
	case modeFuture:
		h.Protocol = ProtocolVersion + 1
	case modeBase:
		h.Capabilities = nil
	}
	write(h)
	rt := newGoRuntime(runtimeEnv{URL: os.Getenv(envURL), Token: os.Getenv(envToken), Log: slog.New(slog.DiscardHandler)})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		switch mode {
		case modeGarbage:
			fmt.Println("not json")
			continue
		case modeExit:
			fmt.Fprintln(os.Stderr, "runner: out of cheese")
			return 3
		}
		dec := json.NewDecoder(strings.NewReader(in.Text()))
		dec.UseNumber()
		var o op
		if err := dec.Decode(&o); err != nil {
			fmt.Fprintln(os.Stderr, "runner:", err)
			return 2
		}
		// Abandoned at the end of stdin, as the other runners abandon theirs.
		go func() {
			rep, err := rt.run(context.Background(), o)
			if err != nil {
				rep.Error = &wireError{Class: errOther, Message: err.Error()}
			}
			rep.ID = o.ID
			write(rep)
		}()
	}
	return 0
}

// testRunner is the launcher of the test binary as a runner in mode.
func testRunner(mode string) launcher {
	spec := runnerSpec{runtime: "go-runner", path: os.Args[0], env: []string{envTestRunner + "=" + mode}}
	return func(ctx context.Context, re runtimeEnv) (runtime, error) { return startRunner(ctx, spec, re) }
}

// TestDrillsThroughRunner runs every drill with the Go SDK behind the
// runner protocol, in a process of its own: the protocol carries all a
// drill needs, several ops at once included, on a machine without python3
// or node as well.
func TestDrillsThroughRunner(t *testing.T) {
	o := Options{Runtime: "go-runner", launch: testRunner(modeServe), Logger: testLogger(t), TempDir: t.TempDir()}
	results, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkAllPass(t, results)
}

// TestRunnerFailures: a runner that speaks another protocol is refused
// before any drill; one that breaks the protocol or dies fails the op in
// flight with a message naming why (its stderr included), never hangs.
func TestRunnerFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	re := runtimeEnv{URL: "http://127.0.0.1:1/agents", Token: "tok", Log: slog.New(slog.DiscardHandler)}
	t.Run("another protocol", func(t *testing.T) {
		rt, err := testRunner(modeFuture)(ctx, re)
		if err == nil {
			_ = rt.close()
			t.Fatal("a runner of protocol 2 was started")
		}
		if want := fmt.Sprintf("speaks protocol %d, this harness %d", ProtocolVersion+1, ProtocolVersion); !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want %q", err, want)
		}
	})
	for _, tt := range []struct{ mode, want string }{
		{modeGarbage, `runner wrote "not json\n", not an answer`},
		{modeExit, "the runner exited; its stderr: runner: out of cheese"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			rt, err := testRunner(tt.mode)(ctx, re)
			if err != nil {
				t.Fatal(err)
			}
			_, err = rt.run(ctx, op{Op: opScrub, Args: map[string]any{"a": 1}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error saying %q", err, tt.want)
			}
			// Gone for good: the next op fails at once too.
			if _, err := rt.run(ctx, op{Op: opScrub}); err == nil {
				t.Fatal("a dead runner answered")
			}
			_ = rt.close()
		})
	}
}

// TestRunnersSpeakProtocol checks, for every runner that can run here,
// what the drills take for granted: the greeting, which announces every
// protocol step (each runtime runs every drill), scrub keeping numbers as
// numbers, an op it does not know answered unsupported, a vendor call that
// gets no answer answered transport, and several answers out of order.
func TestRunnersSpeakProtocol(t *testing.T) {
	launchers := map[string]launcher{"go-runner": testRunner(modeServe)}
	for _, name := range []string{RuntimePython, RuntimeTypeScript} {
		if l, err := launcherFor(name, ""); err == nil {
			launchers[name] = l
		} else {
			t.Logf("runtime %s cannot run here: %v", name, err)
		}
	}
	// A vendor that never answers in time, and one that is not there.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for name, launch := range launchers {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rt, err := launch(ctx, runtimeEnv{URL: gone.URL + "/agents", Token: "tok", Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := rt.close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}()
			for _, c := range capabilities {
				if !rt.has(c) {
					t.Errorf("the greeting does not announce %q: the drills that need it would be skipped", c)
				}
			}
			a := &agent{rt: rt, name: "a"}

			args, err := a.scrub(ctx, map[string]any{"amount": int64(1050), "nested": map[string]any{"Idempotency-Key": "k", "n": 2.5}, "request_id": "r"})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(args)
			if want := `{"amount":1050,"nested":{"n":2.5}}`; string(got) != want {
				t.Errorf("scrub: %s, want %s", got, want)
			}

			ans, err := a.run(ctx, op{Op: "approve"})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(ans.Error.err(), errOpUnsupported) {
				t.Errorf("an unknown op: %+v, want class unsupported", ans.Error)
			}

			// Two calls at once: the slow one answers after the quick one.
			timeout := vendorCall{URL: slow.URL + "/v1/x", Method: http.MethodPost, KeyHeader: keyHeader, TimeoutMS: 300}
			var wg sync.WaitGroup
			var slowErr error
			wg.Go(func() { _, slowErr = a.call(ctx, timeout, "k1", "rl_1") })
			_, err = a.call(ctx, vendorCall{URL: gone.URL + "/v1/x", Method: http.MethodPost, KeyHeader: keyHeader, TimeoutMS: 1000}, "k2", "rl_2")
			var rerr *runtimeError
			if !errors.As(err, &rerr) || rerr.w.Class != errTransport {
				t.Errorf("a call to a closed port: %v, want class transport", err)
			}
			wg.Wait()
			if !errors.As(slowErr, &rerr) || rerr.w.Class != errTransport {
				t.Errorf("a call past its timeout: %v, want class transport", slowErr)
			}

			// The API is not there either: the claim fails as no answer.
			_, err = a.claim(ctx, toolClaim(defaultTool(), "run_p", "call_1", 1050, chargeIntent(1050)))
			if err == nil || errors.Is(err, client.ErrUnsettled) {
				t.Errorf("a claim to a closed port: %v, want a failure of the claim itself", err)
			}
		})
	}
}

// TestWireErrors: every failure the drills tell apart reads the same after
// the wire as the Go SDK's own error did (errors.Is and errors.As).
func TestWireErrors(t *testing.T) {
	sentinels := []error{
		client.ErrStopped, client.ErrUnsettled, client.ErrEscalated, client.ErrReportFailed,
		client.ErrFingerprintMismatch, client.ErrCompensationPending, client.ErrNotFound, client.ErrUnavailable,
		client.ErrQueued, client.ErrAwaitingApproval,
	}
	tests := []struct {
		name string
		err  error
	}{
		{"stopped", &client.StopError{Code: ledger.CodeFailedPoison, Key: "k", Err: errors.New("vendor answered 402")}},
		{"unsettled", &client.UnsettledError{Key: "k", Status: ledger.StatusUnknown, Err: context.DeadlineExceeded}},
		{"escalated", &client.UnsettledError{Key: "k", Status: ledger.StatusUnknown, Err: client.ErrEscalated}},
		{"report failed", &client.UnsettledError{Key: "k", Err: fmt.Errorf("%w: 503", client.ErrReportFailed)}},
		{"approval denied", &client.StopError{Code: ledger.CodeApprovalDenied, Key: "k"}},
		{"queued", &client.QueuedError{Key: "k", RunID: "run_1"}},
		{"queued, wait ended", &client.QueuedError{Key: "k", RunID: "run_1", Err: context.DeadlineExceeded}},
		{"awaiting approval", &client.AwaitingApprovalError{Key: "k", ApprovalID: "ap_1", Err: context.DeadlineExceeded}},
		{"fingerprint mismatch", &client.Error{Status: 422, Code: "fingerprint_mismatch", Message: "another intent"}},
		{"compensation pending", &client.Error{Status: 409, Code: "compensation_pending", Message: "pending"}},
		{"proxy 502", &client.Error{Status: 502, Code: "bad_gateway", Message: "<html>"}},
		{"other", errors.New("connection refused")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, err := json.Marshal(reply{Error: wireErrorOf(tt.err)})
			if err != nil {
				t.Fatal(err)
			}
			var back reply
			if err := json.Unmarshal(line, &back); err != nil {
				t.Fatal(err)
			}
			got := back.Error.err()
			if got.Error() != tt.err.Error() {
				t.Errorf("message %q, want %q", got.Error(), tt.err.Error())
			}
			for _, s := range sentinels {
				if g, w := errors.Is(got, s), errors.Is(tt.err, s); g != w {
					t.Errorf("errors.Is(%v) = %v after the wire, %v before", s, g, w)
				}
			}
			var (
				apiGot, apiWant     *client.Error
				stopGot, stopWant   *client.StopError
				unsetGot, unsetWant *client.UnsettledError
				queueGot, queueWant *client.QueuedError
				awaitGot, awaitWant *client.AwaitingApprovalError
			)
			if errors.As(got, &apiGot) != errors.As(tt.err, &apiWant) || (apiWant != nil && *apiGot != *apiWant) {
				t.Errorf("as *client.Error: %+v, want %+v", apiGot, apiWant)
			}
			if errors.As(got, &stopGot) != errors.As(tt.err, &stopWant) || (stopWant != nil && (stopGot.Code != stopWant.Code || stopGot.Key != stopWant.Key)) {
				t.Errorf("as *client.StopError: %+v, want %+v", stopGot, stopWant)
			}
			if errors.As(got, &unsetGot) != errors.As(tt.err, &unsetWant) || (unsetWant != nil && (unsetGot.Key != unsetWant.Key || unsetGot.Status != unsetWant.Status)) {
				t.Errorf("as *client.UnsettledError: %+v, want %+v", unsetGot, unsetWant)
			}
			if errors.As(got, &queueGot) != errors.As(tt.err, &queueWant) || (queueWant != nil && queueGot.Key != queueWant.Key) {
				t.Errorf("as *client.QueuedError: %+v, want %+v", queueGot, queueWant)
			}
			if errors.As(got, &awaitGot) != errors.As(tt.err, &awaitWant) || (awaitWant != nil && awaitGot.Key != awaitWant.Key) {
				t.Errorf("as *client.AwaitingApprovalError: %+v, want %+v", awaitGot, awaitWant)
			}
		})
	}
	if (*wireError)(nil).err() != nil {
		t.Error("no wire error must be no error")
	}
}

// TestWatchSeesClaims: the watch passes each agent's requests to the API
// untouched and tells which agent was answered what.
func TestWatchSeesClaims(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/v1/claims" || r.URL.Query().Get("wait") != "2s" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = fmt.Fprintf(w, `{"error":{"code":"not_found","message":%q}}`, r.URL.RequestURI())
			return
		}
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"decision":"wait","row":{"key":"k1"}}`))
	}))
	defer api.Close()
	w, err := newAPIWatch(api.URL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	select {
	case <-w.answered("b", ledger.DecisionWait):
		t.Fatal("answered before any claim")
	default:
	}
	c, err := client.New(w.agentsURL()+"/b", "tok")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.ClaimWait(context.Background(), toolClaim(defaultTool(), "run_w", "call_1", 1050, chargeIntent(1050)), 2*time.Second)
	if err != nil || resp.Decision != ledger.DecisionWait || resp.Key() != "k1" {
		t.Fatalf("claim through the watch: %+v %v", resp, err)
	}
	select {
	case <-w.answered("b", ledger.DecisionWait):
	default:
		t.Fatal("the watch did not see b told to wait")
	}
	if got := w.key("b", ledger.DecisionWait); got != "k1" {
		t.Errorf("key %q, want k1", got)
	}
	select {
	case <-w.answered("a", ledger.DecisionWait):
		t.Fatal("a was never asked but is seen answered")
	default:
	}
	if _, err := c.Get(context.Background(), "a/b"); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "/v1/claims/a%2Fb") {
		t.Errorf("an escaped key through the watch: %v, want the API's 404 naming /v1/claims/a%%2Fb", err)
	}
}
