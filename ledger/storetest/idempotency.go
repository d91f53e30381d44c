package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// idempotencyPruner is what a store offers to forget Idempotency-Key
// records (every store of the repo).
type idempotencyPruner interface {
	PruneIdempotency(ctx context.Context, cutoff time.Time) (int, error)
}

// idem is an Idempotency-Key of the suite: value v sent by scope with a
// request fingerprinted req, arriving at d.
func idem(scope, v, req string, d time.Duration) ledger.Idempotency {
	return ledger.Idempotency{Scope: scope, KeyHash: ledger.IdempotencyKeyHash(v), Request: req, At: at(d)}
}

// claimWith claims req at d with the Idempotency-Key i.
func (e *env) claimWith(i ledger.Idempotency, req ledger.ClaimRequest, d time.Duration) (ledger.ClaimResult, error) {
	e.t.Helper()
	return e.s.Claim(ledger.WithIdempotency(e.ctx, i), newClaim(e.t, req, at(d)))
}

func (e *env) mustClaimWith(i ledger.Idempotency, req ledger.ClaimRequest, d time.Duration) ledger.ClaimResult {
	e.t.Helper()
	res, err := e.claimWith(i, req, d)
	if err != nil {
		e.t.Fatalf("Claim with Idempotency-Key at +%s: %v", d, err)
	}
	return res
}

// sameLease fails unless res is the first send's proceed again: decision,
// attempt and pending_until.
func sameLease(t *testing.T, name string, res, first ledger.ClaimResult) {
	t.Helper()
	if res.Decision != first.Decision || res.Inserted != first.Inserted || res.Row.Attempt != first.Row.Attempt ||
		!res.Row.PendingUntil.Equal(first.Row.PendingUntil) {
		t.Fatalf("%s: %s inserted=%v attempt %d until %s; want the first answer %s inserted=%v attempt %d until %s", name,
			res.Decision, res.Inserted, res.Row.Attempt, res.Row.PendingUntil, first.Decision, first.Inserted, first.Row.Attempt, first.Row.PendingUntil)
	}
}

// testIdempotency checks the Idempotency-Key records in every store: a
// resend of a claim gets its lease back while it runs, and the claim table
// afterwards; another request under the key is refused; scopes are apart;
// a resent outcome or decision applies nothing; concurrent resends are one
// claim; pruning forgets.
func testIdempotency(t *testing.T, open Open) {
	lease := ledger.DefaultPolicy().PendingTTL
	const v = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	cases := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"a resend during the lease proceeds again with the same attempt and lease", func(t *testing.T, e *env) {
			first := e.mustClaimWith(idem(tenantA, v, "r1", 0), baseRequest(), 0)
			if first.Decision != ledger.DecisionProceed || !first.Inserted {
				t.Fatalf("first: %s inserted=%v", first.Decision, first.Inserted)
			}
			for _, d := range []time.Duration{time.Second, lease - time.Second} {
				sameLease(t, "resend at +"+d.String(), e.mustClaimWith(idem(tenantA, v, "r1", d), baseRequest(), d), first)
			}
			// Without the header, today's rules: the lease is someone's.
			if res := e.claim(baseRequest(), at(time.Minute)); res.Decision != ledger.DecisionWait {
				t.Fatalf("claim without the header: %s, want wait", res.Decision)
			}
			// Another value is another call: it waits too.
			if res := e.mustClaimWith(idem(tenantA, v+"-2", "r1", time.Minute), baseRequest(), time.Minute); res.Decision != ledger.DecisionWait {
				t.Fatalf("claim with another value: %s, want wait", res.Decision)
			}
			sameRow(t, "stored", e.get(tenantA, first.Row.Key), first.Row)
			e.consistent()
		}},
		{"after the lease a resend follows the claim table, and its new lease holds", func(t *testing.T, e *env) {
			first := e.mustClaimWith(idem(tenantA, v, "r1", 0), baseRequest(), 0)
			later := lease + time.Minute
			retry := e.mustClaimWith(idem(tenantA, v, "r1", later), baseRequest(), later)
			if retry.Decision != ledger.DecisionRetrySameKey || retry.Row.Attempt != first.Row.Attempt+1 {
				t.Fatalf("resend after the lease: %s attempt %d, want retry_same_key attempt %d", retry.Decision, retry.Row.Attempt, first.Row.Attempt+1)
			}
			sameLease(t, "resend of the retry", e.mustClaimWith(idem(tenantA, v, "r1", later+time.Second), baseRequest(), later+time.Second), retry)
		}},
		{"after an outcome a resend never proceeds again", func(t *testing.T, e *env) {
			first := e.mustClaimWith(idem(tenantA, v, "r1", 0), baseRequest(), 0)
			e.report(tenantA, first.Row.Key, response(200, "pi_1", time.Second))
			if res := e.mustClaimWith(idem(tenantA, v, "r1", 2*time.Second), baseRequest(), 2*time.Second); res.Decision != ledger.DecisionReplay {
				t.Fatalf("resend after success: %s, want replay", res.Decision)
			}
			second := e.mustClaimWith(idem(tenantA, v+"-x", "r2", 0), baseRequest(withKey("biz-2")), 0)
			e.report(tenantA, second.Row.Key, timeout(time.Second))
			stored := e.get(tenantA, second.Row.Key)
			c := newClaim(t, baseRequest(withKey("biz-2")), at(2*time.Second))
			want, _, _ := ledger.DecideClaim(&stored, c, ledger.DefaultPolicy())
			res := e.mustClaimWith(idem(tenantA, v+"-x", "r2", 2*time.Second), baseRequest(withKey("biz-2")), 2*time.Second)
			if res.Decision != want.Decision || res.Decision == ledger.DecisionProceed {
				t.Fatalf("resend after a timeout: %s attempt %d, want the claim table's %s", res.Decision, res.Row.Attempt, want.Decision)
			}
		}},
		{"a resent retry of an unknown row gets the same retry", func(t *testing.T, e *env) {
			first := e.claim(baseRequest(), t0)
			e.report(tenantA, first.Row.Key, timeout(time.Second))
			retry := e.mustClaimWith(idem(tenantA, v, "r1", time.Minute), baseRequest(), time.Minute)
			if retry.Decision != ledger.DecisionRetrySameKey || retry.Row.Attempt != 2 || retry.Row.Status != ledger.StatusUnknown {
				t.Fatalf("retry of the unknown row: %s attempt %d %s", retry.Decision, retry.Row.Attempt, retry.Row.Status)
			}
			sameLease(t, "resent retry", e.mustClaimWith(idem(tenantA, v, "r1", 2*time.Minute), baseRequest(), 2*time.Minute), retry)
			// Its outcome ends the lease: a resend then follows the table.
			e.report(tenantA, first.Row.Key, timeout(3*time.Minute))
			if res := e.mustClaimWith(idem(tenantA, v, "r1", 4*time.Minute), baseRequest(), 4*time.Minute); res.Row.Attempt == retry.Row.Attempt && res.Decision == ledger.DecisionRetrySameKey {
				t.Fatalf("resend after the retry's outcome: %s at the same attempt %d", res.Decision, res.Row.Attempt)
			}
		}},
		{"another request under the key is refused, another scope is apart", func(t *testing.T, e *env) {
			first := e.mustClaimWith(idem(tenantA, v, "r1", 0), baseRequest(), 0)
			if _, err := e.claimWith(idem(tenantA, v, "r-other", time.Second), baseRequest(withKey("biz-other")), time.Second); !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
				t.Fatalf("same value, other request: %v, want ErrIdempotencyKeyReused", err)
			}
			e.mustNotExist(tenantA, "biz-other")
			b := e.mustClaimWith(idem(tenantB, v, "r1", time.Second), baseRequest(withTenant(tenantB)), time.Second)
			if b.Decision != ledger.DecisionProceed || !b.Inserted || b.Row.Tenant != tenantB {
				t.Fatalf("same value in another tenant: %s inserted=%v tenant %s", b.Decision, b.Inserted, b.Row.Tenant)
			}
			sameLease(t, "tenant A's resend", e.mustClaimWith(idem(tenantA, v, "r1", 2*time.Second), baseRequest(), 2*time.Second), first)
		}},
		{"concurrent resends are one claim", func(t *testing.T, e *env) {
			const n = 8
			results := make([]ledger.ClaimResult, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					results[i], errs[i] = e.s.Claim(ledger.WithIdempotency(e.ctx, idem(tenantA, v, "r1", 0)), newClaim(t, baseRequest(), at(time.Duration(i)*time.Millisecond)))
				})
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("send %d: %v", i, errs[i])
				}
				sameLease(t, "concurrent send", results[i], results[0])
			}
			if results[0].Decision != ledger.DecisionProceed || results[0].Row.Attempt != 1 {
				t.Fatalf("concurrent sends: %s attempt %d", results[0].Decision, results[0].Row.Attempt)
			}
			e.consistent()
		}},
		{"a resent worker start gets its lease back", func(t *testing.T, e *env) {
			key := e.claim(baseRequest(outboxed()), t0).Row.Key
			start := func(d time.Duration) ledger.ClaimResult {
				res, err := e.s.Claim(ledger.WithIdempotency(e.ctx, idem(tenantA, v, "start", d)), ledger.WorkerClaim(e.get(tenantA, key), false, at(d)))
				if err != nil {
					t.Fatalf("start at +%s: %v", d, err)
				}
				return res
			}
			first := start(time.Minute)
			if first.Decision != ledger.DecisionProceed || first.Row.Attempt != 1 {
				t.Fatalf("first start: %s attempt %d", first.Decision, first.Row.Attempt)
			}
			sameLease(t, "resent start", start(2*time.Minute), first)
			if res, _ := e.startWork(tenantA, key, false, 3*time.Minute); res.Decision != ledger.DecisionWait {
				t.Fatalf("another worker's start: %s, want wait", res.Decision)
			}
		}},
		{"a resent outcome applies nothing", func(t *testing.T, e *env) {
			key := e.claim(baseRequest(), t0).Row.Key
			ctx := ledger.WithIdempotency(e.ctx, idem(tenantA, v, "outcome", time.Second))
			row, ch, err := e.s.Report(ctx, tenantA, key, timeout(time.Second))
			if err != nil || !ch.Changed || row.Status != ledger.StatusUnknown {
				t.Fatalf("first report: %s changed=%v %v", row.Status, ch.Changed, err)
			}
			events := len(e.pending())
			again, ch, err := e.s.Report(ctx, tenantA, key, timeout(time.Second))
			if err != nil || ch.Changed {
				t.Fatalf("resent report: changed=%v %v", ch.Changed, err)
			}
			sameRow(t, "resent report's row", again, row)
			if got := len(e.pending()); got != events {
				t.Fatalf("outbox: %d records after the resend, want %d", got, events)
			}
			if _, _, err := e.s.Report(ledger.WithIdempotency(e.ctx, idem(tenantA, v, "other-outcome", time.Second)), tenantA, key, timeout(time.Second)); !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
				t.Fatalf("same value, other outcome: %v, want ErrIdempotencyKeyReused", err)
			}
		}},
		{"a resent approval decision answers the decided row", func(t *testing.T, e *env) {
			row := e.awaiting()
			ctx := ledger.WithIdempotency(e.ctx, idem(tenantA, v, "grant", time.Minute))
			first, _, err := e.s.DecideApproval(ctx, grant(row.Approval.ID, time.Minute))
			if err != nil || first.Approval.State != ledger.ApprovalGranted {
				t.Fatalf("grant: %v", err)
			}
			again, ch, err := e.s.DecideApproval(ctx, grant(row.Approval.ID, time.Minute))
			if err != nil || ch.Changed {
				t.Fatalf("resent grant: changed=%v %v (without the header it is approval_decided)", ch.Changed, err)
			}
			sameRow(t, "resent grant's row", again, first)
		}},
		{"pruned records are forgotten", func(t *testing.T, e *env) {
			p, ok := e.s.(idempotencyPruner)
			if !ok {
				t.Fatal("the store has no PruneIdempotency")
			}
			e.mustClaimWith(idem(tenantA, v, "r1", 0), baseRequest(), 0)
			if n, err := p.PruneIdempotency(e.ctx, at(-time.Second)); err != nil || n != 0 {
				t.Fatalf("prune before the record: %d %v", n, err)
			}
			if n, err := p.PruneIdempotency(e.ctx, at(time.Second)); err != nil || n != 1 {
				t.Fatalf("prune after the record: %d %v, want 1", n, err)
			}
			if res := e.mustClaimWith(idem(tenantA, v, "r1", 2*time.Second), baseRequest(), 2*time.Second); res.Decision != ledger.DecisionWait {
				t.Fatalf("resend after pruning: %s, want wait (the record is gone)", res.Decision)
			}
			e.consistent()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newEnv(t, open)) })
	}
}
