package client_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/postgres"
	"github.com/agentledger/reconciler/registry"
)

// afterRequest cuts the connection that carries the answer to the next
// request whose start line holds route: the service has run the request
// and written its answer, which never arrives.
func afterRequest(route string) testkit.Trigger {
	var seen atomic.Bool
	return func(toServer bool, window []byte, fresh int) bool {
		if toServer {
			if bytes.Contains(window[max(0, fresh-len(route)):], []byte(route)) {
				seen.Store(true)
			}
			return false
		}
		return seen.Load()
	}
}

// TestLostAnswer puts a TCP proxy between the client and the service, on
// the embedded store and on PostgreSQL, and drops the connection after
// the service wrote its answer to a claim, an outcome report or a
// worker's start. The client resends with the call's Idempotency-Key and
// gets that answer: the vendor is called once, at attempt 1, and nothing
// waits out the lease.
func TestLostAnswer(t *testing.T) {
	stores := map[string]func(t *testing.T) ledger.Store{
		"bolt": func(t *testing.T) ledger.Store {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{Policy: ledger.DefaultPolicy()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"postgres": func(t *testing.T) ledger.Store {
			s, err := postgres.Open(context.Background(), pgtest.Database(t), postgres.Options{Policy: ledger.DefaultPolicy()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			srv, err := api.New(api.Options{
				Store: st, Tokens: map[string]string{tokenAcme: "acme"}, Policy: ledger.DefaultPolicy(),
				Registry:     registry.New(st, registry.Options{}),
				ReplayWindow: func(string, *ledger.Request) time.Duration { return 24 * time.Hour },
			})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv.Handler())
			t.Cleanup(hs.Close)
			proxy := testkit.StartCutProxy(t, hs.Listener.Addr().String())
			// The client's defaults: 1+4 sends, 100 ms doubling backoff.
			c, err := client.New("http://"+proxy.Addr(), tokenAcme)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			registerCharge(t, c, ledger.AutonomyAutonomous)

			for _, route := range []string{"POST /v1/claims HTTP/1.1", "/outcome HTTP/1.1"} {
				t.Run("Do, the answer to "+route, func(t *testing.T) {
					var calls atomic.Int32
					cuts := proxy.Cuts()
					req := chargeClaim(1050)
					req.RunID = "run_" + name + "_" + itoa(len(route))
					proxy.Arm(afterRequest(route))
					start := time.Now()
					out, err := c.Do(ctx, req, countingCall(&calls, "pi_1"))
					took := time.Since(start)
					proxy.Arm(nil)
					if err != nil {
						t.Fatalf("Do: %v", err)
					}
					if proxy.Cuts() != cuts+1 {
						t.Fatalf("the proxy cut %d answers, want 1", proxy.Cuts()-cuts)
					}
					row, err := st.Get(ctx, "acme", out.Key)
					if err != nil || calls.Load() != 1 || row.Attempt != 1 || row.Status != ledger.StatusSucceeded {
						t.Fatalf("%d vendor calls, row %s at attempt %d (%v); want 1 call, succeeded at attempt 1", calls.Load(), row.Status, row.Attempt, err)
					}
					if took > time.Second {
						t.Fatalf("Do took %s; a lost answer must cost a resend, not the lease", took)
					}
				})
			}

			t.Run("a worker's start", func(t *testing.T) {
				registerCharge(t, c, ledger.AutonomyOutbox)
				q, err := c.Claim(ctx, outboxClaim())
				if err != nil || q.Decision != ledger.DecisionQueued {
					t.Fatalf("queued claim: %+v %v", q, err)
				}
				cuts := proxy.Cuts()
				proxy.Arm(afterRequest("/start HTTP/1.1"))
				start := time.Now()
				res, err := c.Start(ctx, q.Row.Key)
				took := time.Since(start)
				proxy.Arm(nil)
				if err != nil || res.Decision != ledger.DecisionProceed || res.Row.Attempt != 1 || proxy.Cuts() != cuts+1 {
					t.Fatalf("start: %s attempt %d %v (cuts %d); want the lost proceed at attempt 1", res.Decision, res.Row.Attempt, err, proxy.Cuts()-cuts)
				}
				if took > time.Second {
					t.Fatalf("Start took %s", took)
				}
				// Another start, a new call: the lease is the first one's.
				if again, err := c.Start(ctx, q.Row.Key); err != nil || again.Decision != ledger.DecisionWait {
					t.Fatalf("a second start: %s %v, want wait", again.Decision, err)
				}
			})
		})
	}
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}
