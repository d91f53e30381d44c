package storetest

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/agentledger/reconciler/ledger"
)

// The approval gate and outbox autonomy under concurrency: claims of gated
// and queued keys, and workers' claims, race grants, denials, expiries,
// reports and reads. Two checks run on each history: it must be
// linearizable under the ledger's rules (linModel), and no key may reach
// proceed without a grant recorded before that proceed returned — at most
// once — nor a queued key for anyone but a worker, or twice.

// gateTTL is the rounds' approval lifetime. Times spread over 1.3 of them,
// so most decisions come in time and some requests expire under the claims
// and decisions.
const gateTTL = 20 * time.Minute

// gateRounds histories are checked, each over gateKeys keys: every key
// has one approval for life, so many keys make many approvals.
const (
	gateRounds = 4
	gateKeys   = 12
)

func testLinearizableApprovals(t *testing.T, open Open) {
	for round := range gateRounds {
		t.Run("round "+strconv.Itoa(round), func(t *testing.T) {
			e := newEnv(t, open)
			history := linHistory(t, e, round, gateKeys, "gate", linGatedInput)
			checkLinearizable(t, "approvals", round, history)
			checkGrantedBeforeProceed(t, history)
		})
	}
}

// linGatedInput draws a call for the approval rounds: nine claims in ten
// gated (by one of two tokens), and grants, denials and expiries by id.
func linGatedInput(rng *rand.Rand, keys []string) (linInput, error) {
	key := keys[rng.IntN(len(keys))]
	now := t0.Add(time.Duration(rng.IntN(int(13*gateTTL/10/time.Millisecond))) * time.Millisecond)
	id := ledger.ApprovalID(tenantA, key)
	by := []string{claimant, approver}[rng.IntN(2)] // the claimant's own grants are refused
	switch p := rng.IntN(20); {
	case p < 9:
		req := baseRequest(withKey(key), withIntent(`{"amount":1050,"currency":"usd"}`))
		switch g := rng.IntN(10); {
		case g < 6:
			req.Gate = ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "policy: false", ApprovalTTL: gateTTL, RequestedBy: claimant}
		case g < 9:
			req.Gate = ledger.Gate{Autonomy: ledger.AutonomyOutbox}
		}
		if rng.IntN(12) == 0 {
			req.Frozen = true
		}
		c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), now)
		if err == nil && rng.IntN(4) == 0 {
			// The outbox worker's claim of the key (it never inserts).
			c = ledger.WorkerClaim(c.Row, req.Frozen, now)
		}
		return linInput{kind: linClaim, key: key, claim: c}, err
	case p < 13:
		return linInput{kind: linDecide, key: key, decision: ledger.ApprovalDecision{
			ID: id, Verdict: ledger.VerdictGrant, Actor: "alice", By: by, At: now}}, nil
	case p < 14:
		return linInput{kind: linDecide, key: key, decision: ledger.ApprovalDecision{
			ID: id, Verdict: ledger.VerdictDeny, Actor: "bob", Note: "no", By: by, At: now}}, nil
	case p < 16:
		return linInput{kind: linDecide, key: key, decision: ledger.ApprovalDecision{ID: id, Verdict: ledger.VerdictExpire, At: now}}, nil
	case p < 18:
		// Mostly outcomes that leave the row open, so a proceeded row is
		// claimed again and must not proceed twice.
		outcomes := []ledger.Outcome{
			{Kind: ledger.OutcomeTimeout}, {Kind: ledger.OutcomeResponse, HTTPStatus: 429},
			{Kind: ledger.OutcomeTimeout}, {Kind: ledger.OutcomeResponse, HTTPStatus: 429},
			{Kind: ledger.OutcomeResponse, HTTPStatus: 503}, {Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1"},
		}
		o := outcomes[rng.IntN(len(outcomes))]
		o.At = now
		return linInput{kind: linReport, key: key, outcome: o}, nil
	}
	return linInput{kind: linGet, key: key}, nil
}

// checkGrantedBeforeProceed fails when a claim proceeded on a row with an
// approval that no successful grant of that key precedes (the grant's call
// before the proceed's return), when one gated key proceeded twice, or when
// a queued key proceeded for anyone but a worker, or twice.
func checkGrantedBeforeProceed(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	firstGrant := map[string]int64{} // key → earliest call of a successful grant
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		if in.kind != linDecide || in.decision.Verdict != ledger.VerdictGrant || out.err != "" {
			continue
		}
		row := parseState(out.row)
		if row == nil || row.Approval == nil || row.Approval.State != ledger.ApprovalGranted {
			continue
		}
		if c, ok := firstGrant[in.key]; !ok || op.Call < c {
			firstGrant[in.key] = op.Call
		}
	}
	proceeds := map[string]int{}
	gatedProceeds, queuedProceeds := 0, 0
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		if in.kind != linClaim || out.decision != ledger.DecisionProceed {
			continue
		}
		row := parseState(out.row)
		if row.Autonomy == ledger.AutonomyOutbox {
			if !in.claim.Worker {
				t.Fatalf("queued key %s proceeded for an agent's claim", in.key)
			}
			if proceeds[in.key]++; proceeds[in.key] > 1 {
				t.Fatalf("queued key %s proceeded %d times", in.key, proceeds[in.key])
			}
			queuedProceeds++
			continue
		}
		if row.Approval == nil {
			continue // a key first claimed without a gate: no approval applies
		}
		gatedProceeds++
		if row.Approval.State != ledger.ApprovalGranted {
			t.Fatalf("key %s proceeded with its approval %s", in.key, row.Approval.State)
		}
		grant, ok := firstGrant[in.key]
		if !ok || grant > op.Return {
			t.Fatalf("key %s proceeded (returned at %d) with no grant before it (first grant called at %d, found %v)", in.key, op.Return, grant, ok)
		}
		if proceeds[in.key]++; proceeds[in.key] > 1 {
			t.Fatalf("gated key %s proceeded %d times", in.key, proceeds[in.key])
		}
	}
	t.Logf("%d gated proceeds, each after a grant; %d queued keys proceeded for a worker, once each", gatedProceeds, queuedProceeds)
}
