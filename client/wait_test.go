package client_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// startNATS runs an embedded NATS on a random port with acme's runtime as
// its one user, the RECON stream and the outbox relay over e's store, all
// stopped when the test ends, and returns the JetStream of acme's runtime,
// connected with its seed file as a runtime on another host would.
func startNATS(t *testing.T, e *env) jetstream.JetStream {
	t.Helper()
	return startBus(t, e).rjs
}

// bus is startNATS's server: the service's JetStream, and what another
// runtime connection of acme needs.
type bus struct {
	url, seedFile string
	js, rjs       jetstream.JetStream
}

// connect opens another connection of acme's runtime, closed when the
// test ends (or earlier by the test: a worker that dies).
func (b *bus) connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js, err := client.ConnectNATS(b.url, "acme", client.NATSCredentials{NKeyFile: b.seedFile})
	if err != nil {
		t.Fatalf("runtime connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

func startBus(t *testing.T, e *env) *bus {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "acme.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := natsserver.Start(ctx, natsserver.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(),
		Accounts: func(service string) (string, error) {
			return events.AccountLayout{Service: service, Tenants: map[string][]string{"acme": {pub}}}.ServerConfig()
		}})
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})
	nc, js, err := events.Connect(natsserver.ServiceURL, nil, srv.ServiceOptions()...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if _, err := events.EnsureWorkStream(ctx, js, events.WorkStreamConfig{}); err != nil {
		t.Fatalf("work stream: %v", err)
	}
	if err := events.EnsureWorkConsumers(ctx, js, events.WorkStreamConfig{}, time.Second, []string{"acme"}); err != nil {
		t.Fatalf("work consumer: %v", err)
	}
	relay, err := events.NewRelay(e.store, js, events.RelayOptions{})
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(rctx) }()
	t.Cleanup(func() { rcancel(); <-done })

	rnc, rjs, err := client.ConnectNATS(srv.ClientURL(), "acme", client.NATSCredentials{NKeyFile: seedFile})
	if err != nil {
		t.Fatalf("runtime connect: %v", err)
	}
	t.Cleanup(rnc.Close)
	return &bus{url: srv.ClientURL(), seedFile: seedFile, js: js, rjs: rjs}
}

func TestConnectNATS(t *testing.T) {
	cases := []struct {
		name, tenant string
		cred         client.NATSCredentials
		want         string
	}{
		{"a tenant that is no subject token", "a.b", client.NATSCredentials{}, "tenant is not a subject token"},
		{"a missing seed file", "acme", client.NATSCredentials{NKeyFile: "/nonexistent/acme.nk"}, "/nonexistent/acme.nk"},
		{"creds and an nkey", "acme", client.NATSCredentials{CredsFile: "a.creds", NKeyFile: "a.nk"}, "exclusive"},
		{"half a client certificate", "acme", client.NATSCredentials{CertFile: "c.pem"}, "both its certificate and its key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, _, err := client.ConnectNATS("nats://127.0.0.1:1", tc.tenant, tc.cred)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want %q", err, tc.want)
			}
		})
	}
}

// waitClaims polls the API's metrics until n claims answered wait.
func waitClaims(t *testing.T, reg *prometheus.Registry, n float64) {
	t.Helper()
	testkit.Eventually(t, "a claim answered wait", func() bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "reconciler_claims_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "decision" && l.GetValue() == "wait" && m.GetCounter().GetValue() >= n {
						return true
					}
				}
			}
		}
		return false
	})
}

// TestDoWaits: a second runtime claims a key in flight elsewhere, waits
// (long polls, or NATS with the API as the fallback), and acts on how the
// first runtime's attempt ended.
func TestDoWaits(t *testing.T) {
	tests := []struct {
		name string
		nats bool
		// poll is the waiting client's poll interval; long for NATS cases
		// where the event alone must wake it.
		poll         time.Duration
		report       client.OutcomeReport
		wantDecision ledger.Decision
		wantErr      error
		wantCalled   bool
	}{
		{name: "long poll, then succeeded: replay", poll: 20 * time.Millisecond,
			report:       client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_7"},
			wantDecision: ledger.DecisionReplay},
		{name: "long poll, then failed: stop", poll: 20 * time.Millisecond,
			report:       client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 400},
			wantDecision: ledger.DecisionStop, wantErr: client.ErrStopped},
		{name: "long poll, then unknown: retry with the same key", poll: 20 * time.Millisecond,
			report:       client.OutcomeReport{Kind: ledger.OutcomeTimeout},
			wantDecision: ledger.DecisionRetrySameKey, wantCalled: true},
		{name: "nats, then succeeded: replay", nats: true, poll: time.Hour,
			report:       client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 201, ReceiptID: "pi_7"},
			wantDecision: ledger.DecisionReplay},
		{name: "nats, then failed: stop", nats: true, poll: time.Hour,
			report:       client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 402, Headers: map[string]string{"Stripe-Should-Retry": "false"}},
			wantDecision: ledger.DecisionStop, wantErr: client.ErrStopped},
		{name: "nats, then unknown: the ledger check grants the retry", nats: true, poll: 20 * time.Millisecond,
			report:       client.OutcomeReport{Kind: ledger.OutcomeNetworkError},
			wantDecision: ledger.DecisionRetrySameKey, wantCalled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := newEnv(t, func(o *api.Options) { o.Registerer = reg })
			rec := &recorder{}
			opts := []client.Option{client.WithPollInterval(tt.poll), client.WithWait(5 * time.Second),
				client.WithHTTPClient(&http.Client{Transport: rec})}
			if tt.nats {
				opts = append(opts, client.WithNATS(startNATS(t, e)))
			}
			first := e.client(t)
			second := e.client(t, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()

			claimed, err := first.Claim(ctx, chargeClaim(1050))
			if err != nil || claimed.Decision != ledger.DecisionProceed || claimed.HTTPStatus != http.StatusCreated {
				t.Fatalf("first claim = %+v, %v; want 201 proceed", claimed, err)
			}
			type result struct {
				out client.Outcome
				err error
			}
			done := make(chan result, 1)
			var calledWith string
			go func() {
				out, err := second.Do(ctx, chargeClaim(1050), func(_ context.Context, key, _ string) (client.Result, error) {
					calledWith = key
					return client.Result{HTTPStatus: 200, ReceiptID: "pi_7", Headers: map[string]string{"Idempotent-Replayed": "true"}}, nil
				})
				done <- result{out, err}
			}()
			waitClaims(t, reg, 1)
			if _, err := first.ReportOutcome(ctx, claimed.Key(), tt.report); err != nil {
				t.Fatalf("report: %v", err)
			}
			r := <-done
			if tt.wantErr == nil && r.err != nil {
				t.Fatalf("Do: %v", r.err)
			}
			if tt.wantErr != nil && !errors.Is(r.err, tt.wantErr) {
				t.Fatalf("Do error = %v, want %v", r.err, tt.wantErr)
			}
			if !r.out.Waited || r.out.Decision != tt.wantDecision || r.out.Called != tt.wantCalled {
				t.Errorf("outcome: waited %v decision %s called %v; want waited, %s, called %v",
					r.out.Waited, r.out.Decision, r.out.Called, tt.wantDecision, tt.wantCalled)
			}
			if tt.wantCalled && calledWith != claimed.Key() {
				t.Errorf("called with key %q, want %q", calledWith, claimed.Key())
			}
			if got := rec.longPolls(); (got > 0) == tt.nats {
				t.Errorf("long polls = %d with nats=%v: the wait took the wrong path", got, tt.nats)
			}
			if tt.wantDecision == ledger.DecisionReplay && r.out.ReceiptID() != "pi_7" {
				t.Errorf("receipt = %q, want pi_7", r.out.ReceiptID())
			}
		})
	}
}

// recorder counts the long-polling claims a client sends.
type recorder struct {
	mu    sync.Mutex
	polls int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Has("wait") {
		r.mu.Lock()
		r.polls++
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) longPolls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.polls
}

// TestDoWaitEndsWithContext: a key in flight elsewhere that never settles
// ends the wait when ctx ends, as an unsettled error, without a call.
func TestDoWaitEndsWithContext(t *testing.T) {
	for _, useNATS := range []bool{false, true} {
		name := "long poll"
		if useNATS {
			name = "nats"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			var opts []client.Option
			if useNATS {
				opts = append(opts, client.WithNATS(startNATS(t, e)))
			}
			c := e.client(t, append(opts, client.WithWait(50*time.Millisecond))...)
			if _, err := c.Claim(context.Background(), chargeClaim(1050)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			out, err := c.Do(ctx, chargeClaim(1050), func(context.Context, string, string) (client.Result, error) {
				t.Error("called while the key was in flight")
				return client.Result{}, nil
			})
			if !errors.Is(err, client.ErrUnsettled) || !errors.Is(err, context.DeadlineExceeded) || out.Called {
				t.Errorf("Do = %+v, %v; want unsettled by the deadline, no call", out, err)
			}
		})
	}
}

// countingHandler counts the claims that reach the API.
type countingHandler struct {
	next   http.Handler
	mu     sync.Mutex
	claims int
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/claims" {
		h.mu.Lock()
		h.claims++
		h.mu.Unlock()
	}
	h.next.ServeHTTP(w, r)
}

// TestDoWaitEnds: Do's wait for a key in flight elsewhere ends with the
// right error instead of running until ctx ends — a revoked token is
// ErrUnauthorized, a row a human was paged for is ErrEscalated (by long
// polls and by NATS) — and a wait the API answers at once does not spin.
func TestDoWaitEnds(t *testing.T) {
	t.Run("revoked token", func(t *testing.T) {
		e := newEnv(t)
		first := e.client(t)
		resp, err := first.Claim(context.Background(), chargeClaim(1050))
		if err != nil || resp.Decision != ledger.DecisionProceed {
			t.Fatalf("first claim: %v %v", resp.Decision, err)
		}
		var revoked sync.Once
		h := e.srv.Config.Handler
		e.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("wait") != "" {
				// The token is revoked while the run waits.
				revoked.Do(func() {})
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"unknown token"}}`))
				return
			}
			h.ServeHTTP(w, r)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = e.client(t).Do(ctx, chargeClaim(1050), func(context.Context, string, string) (client.Result, error) {
			t.Fatal("the vendor was called")
			return client.Result{}, nil
		})
		if !errors.Is(err, client.ErrUnauthorized) || ctx.Err() != nil {
			t.Fatalf("Do: %v (ctx %v), want ErrUnauthorized before the deadline", err, ctx.Err())
		}
	})
	for _, viaNATS := range []bool{false, true} {
		name := "escalated, by long polls"
		if viaNATS {
			name = "escalated, by NATS"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			var opts []client.Option
			if viaNATS {
				opts = append(opts, client.WithNATS(startNATS(t, e)))
			}
			first := e.client(t)
			resp, err := first.Claim(context.Background(), chargeClaim(1050))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := first.ReportOutcome(context.Background(), resp.Row.Key, client.OutcomeReport{Kind: ledger.OutcomeTimeout}); err != nil {
				t.Fatal(err)
			}
			// A second attempt holds the lease, then a human is paged.
			if r2, err := first.Claim(context.Background(), chargeClaim(1050)); err != nil || r2.Decision != ledger.DecisionRetrySameKey {
				t.Fatalf("retry: %v %v", r2.Decision, err)
			}
			// The page comes while the second runtime waits.
			go func() {
				time.Sleep(300 * time.Millisecond)
				if _, _, err := e.store.Escalate(context.Background(), "acme", resp.Row.Key, time.Now()); err != nil {
					t.Error(err)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err = e.client(t, opts...).Do(ctx, chargeClaim(1050), func(context.Context, string, string) (client.Result, error) {
				t.Fatal("the vendor was called")
				return client.Result{}, nil
			})
			if !errors.Is(err, client.ErrEscalated) || !errors.Is(err, client.ErrUnsettled) || ctx.Err() != nil {
				t.Fatalf("Do: %v (ctx %v), want ErrEscalated (and ErrUnsettled) before the deadline", err, ctx.Err())
			}
		})
	}
	t.Run("a wait answered at once does not spin", func(t *testing.T) {
		e := newEnv(t)
		counter := &countingHandler{next: e.srv.Config.Handler}
		e.srv.Config.Handler = counter
		first := e.client(t)
		if _, err := first.Claim(context.Background(), chargeClaim(1050)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := e.client(t, client.WithWait(time.Nanosecond), client.WithPollInterval(100*time.Millisecond)).Do(ctx, chargeClaim(1050),
			func(context.Context, string, string) (client.Result, error) { return client.Result{}, nil })
		if !errors.Is(err, client.ErrUnsettled) {
			t.Fatalf("Do: %v, want ErrUnsettled at the deadline", err)
		}
		counter.mu.Lock()
		defer counter.mu.Unlock()
		if counter.claims > 30 { // about 10 at one per 100 ms
			t.Fatalf("%d claims in one second: the wait loop spins", counter.claims)
		}
	})
}
