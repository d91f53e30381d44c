package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// outboxed gives a claim the outbox autonomy.
func outboxed() reqMod {
	return func(r *ledger.ClaimRequest) { r.Gate = ledger.Gate{Autonomy: ledger.AutonomyOutbox} }
}

// workItems returns the outbox's work items, in commit order.
func (e *env) workItems() []ledger.Event {
	e.t.Helper()
	var out []ledger.Event
	for _, rec := range e.pending() {
		if rec.Event.Status == ledger.EventQueued {
			out = append(out, rec.Event)
		}
	}
	return out
}

// startWork is the worker's claim of tenant's key, read from the store.
func (e *env) startWork(tenant, key string, frozen bool, d time.Duration) (ledger.ClaimResult, error) {
	e.t.Helper()
	return e.s.Claim(e.ctx, ledger.WorkerClaim(e.get(tenant, key), frozen, at(d)))
}

// testOutboxAutonomy checks the queued decision in every store: one work
// item per key in the claim's transaction however often the agent
// retries, the worker's claim proceeding once, and the errors.
func testOutboxAutonomy(t *testing.T, open Open) {
	lease := ledger.DefaultPolicy().PendingTTL
	cases := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"a queued claim inserts the row and one work item; retries add none", func(t *testing.T, e *env) {
			res := e.claim(baseRequest(outboxed()), t0)
			row := res.Row
			if res.Decision != ledger.DecisionQueued || !res.Inserted || row.Attempt != 0 || row.Autonomy != ledger.AutonomyOutbox {
				t.Fatalf("queued claim: %s inserted=%v attempt %d autonomy %q", res.Decision, res.Inserted, row.Attempt, row.Autonomy)
			}
			sameRow(t, "stored", e.get(tenantA, row.Key), row)
			for _, d := range []time.Duration{time.Second, lease + time.Minute, 48 * time.Hour} {
				if r := e.claim(baseRequest(outboxed()), at(d)); r.Decision != ledger.DecisionQueued {
					t.Fatalf("retry at +%s: %s", d, r.Decision)
				}
			}
			items := e.workItems()
			if len(items) != 1 {
				t.Fatalf("%d work items, want exactly 1", len(items))
			}
			w := items[0]
			intent, err := ledger.Canonicalize(w.Work.Intent) // a store may keep its own spacing (jsonb)
			if err != nil || w.MsgID() != tenantA+":"+row.Key || w.Work == nil || w.Work.MetadataLocalID != row.MetadataLocalID ||
				string(intent) != `{"amount":1050,"currency":"usd","customer":"cus_1"}` || w.Work.Request == nil ||
				w.Work.Request.Body != "amount=1050&currency=usd" || w.Tool != row.Tool || w.RunID != row.RunID {
				t.Fatalf("work item: %+v %+v", w, w.Work)
			}
			e.consistent()
		}},
		{"the worker's claim proceeds once, the agent's stay queued", func(t *testing.T, e *env) {
			key := e.claim(baseRequest(outboxed()), t0).Row.Key
			res, err := e.startWork(tenantA, key, false, time.Minute)
			if err != nil || res.Decision != ledger.DecisionProceed || res.Row.Attempt != 1 || res.Inserted || !res.Row.PendingUntil.Equal(at(time.Minute+lease)) {
				t.Fatalf("worker: %s attempt %d %v", res.Decision, res.Row.Attempt, err)
			}
			if res, _ := e.startWork(tenantA, key, false, 2*time.Minute); res.Decision != ledger.DecisionWait {
				t.Fatalf("second worker: %s, want wait", res.Decision)
			}
			if r := e.claim(baseRequest(outboxed()), at(2*time.Minute)); r.Decision != ledger.DecisionQueued || r.Row.Attempt != 1 {
				t.Fatalf("agent while the worker calls: %s", r.Decision)
			}
			e.report(tenantA, key, response(200, "pi_1", 3*time.Minute))
			if r := e.claim(baseRequest(outboxed()), at(4*time.Minute)); r.Decision != ledger.DecisionReplay || r.Row.UpstreamReceiptID != "pi_1" {
				t.Fatalf("agent after success: %s", r.Decision)
			}
			if len(e.workItems()) != 1 {
				t.Fatal("the worker's claims wrote work items")
			}
			e.consistent()
		}},
		{"a worker that died mid-call leaves an ordinary row", func(t *testing.T, e *env) {
			key := e.claim(baseRequest(outboxed()), t0).Row.Key
			if _, err := e.startWork(tenantA, key, false, time.Minute); err != nil {
				t.Fatal(err)
			}
			// No report: the lease runs out; the row is due for the resolver,
			// and a redelivered item's worker retries with the same key.
			due, err := e.s.Due(e.ctx, at(time.Minute+lease+time.Hour), 10)
			if err != nil || len(due) != 1 || due[0].Key != key {
				t.Fatalf("Due: %d rows %v", len(due), err)
			}
			if res, _ := e.startWork(tenantA, key, false, time.Minute+lease); res.Decision != ledger.DecisionRetrySameKey || res.Row.Attempt != 2 {
				t.Fatalf("worker after the lease: %s attempt %d", res.Decision, res.Row.Attempt)
			}
		}},
		{"refusals", func(t *testing.T, e *env) {
			noRequest := baseRequest(outboxed())
			noRequest.Request = nil
			if _, err := e.s.Claim(e.ctx, newClaim(t, noRequest, t0)); !errors.Is(err, ledger.ErrRequestRequired) {
				t.Fatalf("no request envelope: %v", err)
			}
			e.mustNotExist(tenantA, newClaim(t, noRequest, t0).Row.Key)
			frozenRes := e.claim(baseRequest(outboxed(), frozen()), t0)
			if frozenRes.Code != ledger.CodeToolFrozen || len(e.workItems()) != 0 {
				t.Fatalf("frozen outbox claim: %s/%s", frozenRes.Decision, frozenRes.Code)
			}
			ghost := newClaim(t, baseRequest(withKey("never-claimed")), t0)
			if _, err := e.s.Claim(e.ctx, ledger.WorkerClaim(ghost.Row, false, t0)); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("worker claim of no row: %v", err)
			}
			e.mustNotExist(tenantA, "never-claimed")
			plain := e.claim(baseRequest(withKey("plain")), t0).Row
			if _, err := e.s.Claim(e.ctx, ledger.WorkerClaim(plain, false, at(time.Minute))); !errors.Is(err, ledger.ErrNotQueued) {
				t.Fatalf("worker claim of an autonomous row: %v", err)
			}
		}},
		{"concurrent workers: exactly one proceeds", func(t *testing.T, e *env) {
			key := e.claim(baseRequest(outboxed()), t0).Row.Key
			row := e.get(tenantA, key)
			const n = 16
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				proceeds int
			)
			for i := range n {
				wg.Go(func() {
					var c ledger.Claim
					if i%2 == 0 {
						c = ledger.WorkerClaim(row, false, at(time.Minute))
					} else {
						c = newClaim(t, baseRequest(outboxed()), at(time.Minute)) // an agent retrying meanwhile
					}
					res, err := e.s.Claim(e.ctx, c)
					if err != nil {
						t.Errorf("Claim: %v", err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					switch {
					case res.Decision == ledger.DecisionProceed && c.Worker:
						proceeds++
					case res.Decision == ledger.DecisionWait && c.Worker, res.Decision == ledger.DecisionQueued && !c.Worker:
					default:
						t.Errorf("worker=%v: %s", c.Worker, res.Decision)
					}
				})
			}
			wg.Wait()
			if proceeds != 1 {
				t.Fatalf("%d workers proceeded, want exactly 1", proceeds)
			}
			if len(e.workItems()) != 1 {
				t.Fatalf("%d work items, want 1", len(e.workItems()))
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newEnv(t, open)) })
	}
}
