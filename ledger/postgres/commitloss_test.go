package postgres

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// The end of the text of the COMMIT a write transaction ends with (the
// simple query "INSERT …marker…; COMMIT", or a pipeline's "COMMIT"), and
// the server's CommandComplete for it: 'C', a length of 11, "COMMIT\0".
var (
	commitQuery = []byte("COMMIT\x00")
	commitDone  = []byte("C\x00\x00\x00\x0bCOMMIT\x00")
)

// A new key's claim is one statement in an implicit transaction
// (fastclaim.go): a call of recon_claim_new, which inserts the marker once
// the row is in, and its answer ("SELECT 1") is flushed with the
// ReadyForQuery that follows the implicit COMMIT.
var (
	fastQuery = []byte("SELECT recon_claim_new(")
	fastDone  = []byte("C\x00\x00\x00\x0dSELECT 1\x00")
)

// proxied returns u with its host replaced by the proxy's address.
func proxied(t *testing.T, u, addr string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = addr
	return p.String()
}

// TestCommitAnswerLost cuts the store's connection to PostgreSQL around
// the COMMIT of every write flow, both ways: after the server committed
// (its answer never arrives: the store must read the outcome back and
// answer as committed, never run the flow again) and before the COMMIT
// reached the server (nothing committed: the flow runs again). Either way
// the caller gets the answer of one run.
func TestCommitAnswerLost(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	target, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	// Each mode opens its own store behind its own proxy (below).
	var (
		proxy *testkit.CutProxy
		s     *Store
	)
	ctx := t.Context()
	n := 0
	newClaim := func(t *testing.T, gate ledger.Gate) ledger.Claim {
		n++
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
			Intent: json.RawMessage(`{"n":` + itoa(int64(n)) + `}`), ReplayWindow: 24 * time.Hour,
			Request: &ledger.Request{Method: "POST", Path: "/v1/charges", Body: "amount=1"},
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			t.Fatal(err)
		}
		c.Gate = gate
		return c
	}
	claim := func(t *testing.T, gate ledger.Gate) ledger.Row {
		res, err := s.Claim(ctx, newClaim(t, gate))
		if err != nil {
			t.Fatal(err)
		}
		return res.Row
	}
	flows := []struct {
		name string
		// prepare runs before the cut; run is the flow whose COMMIT is cut
		// and checks its answer is one run's.
		prepare func(t *testing.T) ledger.Row
		run     func(t *testing.T, row ledger.Row)
		// fast: the flow is a new key's claim, one statement.
		fast bool
	}{
		{"claim", func(t *testing.T) ledger.Row { return ledger.Row{} }, func(t *testing.T, _ ledger.Row) {
			res, err := s.Claim(ctx, newClaim(t, ledger.Gate{}))
			if err != nil || res.Decision != ledger.DecisionProceed || !res.Inserted || res.Row.Attempt != 1 {
				t.Fatalf("claim: %s inserted=%v attempt %d %v; want the first run's proceed", res.Decision, res.Inserted, res.Row.Attempt, err)
			}
		}, true},
		{"claim with an Idempotency-Key", func(t *testing.T) ledger.Row { return ledger.Row{} }, func(t *testing.T, _ ledger.Row) {
			i := ledger.Idempotency{Scope: "acme", KeyHash: ledger.IdempotencyKeyHash("commit-loss-" + randHex(8)), Request: "r", At: t0}
			res, err := s.Claim(ledger.WithIdempotency(ctx, i), newClaim(t, ledger.Gate{}))
			if err != nil || res.Decision != ledger.DecisionProceed || !res.Inserted {
				t.Fatalf("claim: %s inserted=%v %v", res.Decision, res.Inserted, err)
			}
		}, true},
		{"start", func(t *testing.T) ledger.Row { return claim(t, ledger.Gate{Autonomy: ledger.AutonomyOutbox}) }, func(t *testing.T, row ledger.Row) {
			res, err := s.Claim(ctx, ledger.WorkerClaim(row, false, t0.Add(time.Second)))
			if err != nil || res.Decision != ledger.DecisionProceed || res.Row.Attempt != 1 {
				t.Fatalf("start: %s attempt %d %v; want the first run's proceed", res.Decision, res.Row.Attempt, err)
			}
		}, false},
		{"outcome", func(t *testing.T) ledger.Row { return claim(t, ledger.Gate{}) }, func(t *testing.T, row ledger.Row) {
			got, ch, err := s.Report(ctx, "acme", row.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "ch_1", At: t0.Add(time.Second)})
			if err != nil || !ch.Changed || got.Status != ledger.StatusSucceeded {
				t.Fatalf("report: %s changed=%v %v; want the first run's transition", got.Status, ch.Changed, err)
			}
		}, false},
		{"webhook ingest", func(t *testing.T) ledger.Row { return claim(t, ledger.Gate{}) }, func(t *testing.T, row ledger.Row) {
			res, err := s.Ingest(ctx, ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_" + row.Key, LocalID: row.MetadataLocalID,
				Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", At: t0.Add(time.Second)},
				At:       t0.Add(time.Second)})
			if err != nil || res.Outcome != ledger.IngestAccepted || !res.Change.Changed {
				t.Fatalf("ingest: %s changed=%v %v; want accepted (a re-run answers duplicate)", res.Outcome, res.Change.Changed, err)
			}
		}, false},
		{"approval decision", func(t *testing.T) ledger.Row {
			return claim(t, ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "policy", ApprovalTTL: time.Hour, RequestedBy: "tok_a"})
		}, func(t *testing.T, row ledger.Row) {
			got, ch, err := s.DecideApproval(ctx, ledger.ApprovalDecision{ID: row.Approval.ID, Verdict: ledger.VerdictGrant,
				Actor: "alice", Note: "ok", By: "tok_b", At: t0.Add(time.Minute)})
			if err != nil || got.Approval.State != ledger.ApprovalGranted || ch.Event == nil {
				t.Fatalf("grant: changed=%v %v; want the first run's grant (a re-run answers approval_decided)", ch.Changed, err)
			}
		}, false},
		{"resolver apply", func(t *testing.T) ledger.Row { return claim(t, ledger.Gate{}) }, func(t *testing.T, row ledger.Row) {
			got, ch, err := s.Apply(ctx, "acme", row.Key, ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", At: t0.Add(time.Minute)})
			if err != nil || !ch.Changed || got.Status != ledger.StatusSucceeded {
				t.Fatalf("apply: changed=%v %v", ch.Changed, err)
			}
		}, false},
		{"resolver escalate", func(t *testing.T) ledger.Row { return claim(t, ledger.Gate{}) }, func(t *testing.T, row ledger.Row) {
			_, ok, err := s.Escalate(ctx, "acme", row.Key, t0.Add(time.Hour))
			if err != nil || !ok {
				t.Fatalf("escalate: %v %v; want the first run's true (a re-run answers false)", ok, err)
			}
		}, false},
		{"resolver claim due", func(t *testing.T) ledger.Row { return claim(t, ledger.Gate{}) }, func(t *testing.T, row ledger.Row) {
			rows, err := s.ClaimDue(ctx, t0.Add(48*time.Hour), 1000, time.Minute)
			if err != nil || len(rows) == 0 {
				t.Fatalf("claim due: %d rows %v; want the first run's rows (a re-run finds them leased)", len(rows), err)
			}
		}, false},
	}
	for _, mode := range []struct {
		name    string
		trigger testkit.Trigger
		// fastTrigger cuts a fast flow's one statement.
		fastTrigger testkit.Trigger
		rerun       bool   // the read-back finds the transaction aborted
		params      string // added to the store's URL
	}{
		{"answer lost after the commit", testkit.ContainsTrigger(false, commitDone), testkit.ContainsTrigger(false, fastDone), false, ""},
		// pgx sends a statement's text only when it prepares it, once per
		// connection; without its cache, the COMMIT's text goes every time
		// (a simple query "…; COMMIT", or a pipeline's Parse of "COMMIT").
		{"connection lost before the commit", testkit.ContainsTrigger(true, commitQuery), testkit.ContainsTrigger(true, fastQuery), true, "&default_query_exec_mode=exec"},
	} {
		proxy = testkit.StartCutProxy(t, target.Host)
		s = openStore(t, proxied(t, u, proxy.Addr())+mode.params, Options{Policy: ledger.DefaultPolicy()})
		for _, f := range flows {
			t.Run(mode.name+"/"+f.name, func(t *testing.T) {
				row := f.prepare(t)
				settled, retries, cuts := s.commitsSettled.Load(), s.Retries(), proxy.Cuts()
				trigger := mode.trigger
				if f.fast {
					trigger = mode.fastTrigger
				}
				fast := s.fastInserts.Load() + s.fastMisses.Load()
				proxy.Arm(trigger)
				start := time.Now()
				f.run(t, row)
				proxy.Arm(nil)
				if proxy.Cuts() != cuts+1 {
					t.Fatalf("the proxy cut %d connections, want 1", proxy.Cuts()-cuts)
				}
				// Sent or not, the store cannot tell: it reads the outcome back.
				if got := s.commitsSettled.Load() - settled; got != 1 {
					t.Fatalf("commits read back: %d, want 1", got)
				}
				if got := s.Retries() - retries; mode.rerun != (got > 0) {
					t.Fatalf("the flow ran again %d times; want a re-run only when nothing committed", got)
				}
				if got := s.fastInserts.Load() + s.fastMisses.Load() - fast; f.fast != (got > 0) {
					t.Fatalf("one-statement attempts: %d; want one for a new key's claim only", got)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("the flow took %s", d)
				}
			})
		}
	}
}
