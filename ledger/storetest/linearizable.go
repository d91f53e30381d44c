package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/agentledger/reconciler/ledger"
)

// The linearizability check records concurrent Claim/Report/Get histories
// over a few keys and asks porcupine whether some sequential order of them,
// consistent with real time, explains every answer. The sequential model is
// the ledger's own pure rules (DecideClaim, Classify, Apply, and
// DecideApproval for the approval gate's grants, denials and expiries), so
// the check says: the store behaves as if each call ran alone, atomically,
// under the rules every store shares. Some claims and reports carry an
// Idempotency-Key: the model keeps each key's records beside its row and
// applies the ledger's own resend rules (ResendClaim, ClaimRecord), so a
// resend with the holder's value is the same operation and one with
// another value a new one.

const (
	linClients = 8
	linOps     = 30
	linRounds  = 3
	linKeys    = 4
)

type linKind int

const (
	linClaim linKind = iota
	linReport
	linGet
	linDecide
)

// linInput is one call. Claims carry the full validated claim, so the model
// can run DecideClaim on exactly what the store saw; decisions carry the
// approval decision.
type linInput struct {
	kind linKind
	key  string
	// idem is the claim's or report's Idempotency-Key, nil for none.
	idem     *ledger.Idempotency
	claim    ledger.Claim
	outcome  ledger.Outcome
	decision ledger.ApprovalDecision
}

// linOutput is the answer, reduced to comparable values: the row as JSON,
// the decision and the sentinel the error matched.
type linOutput struct {
	err      string
	decision ledger.Decision
	code     string
	changed  bool
	row      string
}

// linState is the per-key model state: the row as JSON ("" when absent)
// and the Idempotency-Key records sent for it (JSON of key hash → record,
// "" when none).
type linState struct {
	row  string
	recs string
}

func parseRecs(s string) map[string]ledger.IdempotencyRecord {
	recs := map[string]ledger.IdempotencyRecord{}
	if s != "" {
		if err := json.Unmarshal([]byte(s), &recs); err != nil {
			panic(fmt.Sprintf("model records: %v", err))
		}
	}
	return recs
}

func recsJSON(recs map[string]ledger.IdempotencyRecord) string {
	b, err := json.Marshal(recs) // map keys sorted: equal maps, equal text
	if err != nil {
		panic(err)
	}
	return string(b)
}

var linErrors = []struct {
	name string
	err  error
}{
	{"approval_not_found", ledger.ErrApprovalNotFound}, // before not_found, which it matches
	{"approval_decided", ledger.ErrApprovalDecided},
	{"approval_expired", ledger.ErrApprovalExpired},
	{"self_approval", ledger.ErrSelfApproval},
	{"invalid_transition", ledger.ErrInvalidTransition},
	{"not_queued", ledger.ErrNotQueued},
	{"not_found", ledger.ErrNotFound},
	{"fingerprint_mismatch", ledger.ErrFingerprintMismatch},
	{"invalid_outcome", ledger.ErrInvalidOutcome},
	{"idempotency_key_reused", ledger.ErrIdempotencyKeyReused},
}

func linErr(err error) string {
	if err == nil {
		return ""
	}
	for _, e := range linErrors {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return "other: " + err.Error()
}

func parseState(s string) *ledger.Row {
	if s == "" {
		return nil
	}
	var r ledger.Row
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		panic(fmt.Sprintf("model state: %v", err))
	}
	return &r
}

// linModel is the sequential specification, partitioned by key.
func linModel() porcupine.Model {
	p := ledger.DefaultPolicy()
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range history {
				k := op.Input.(linInput).key
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, k := range order {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() any { return linState{} },
		Step: func(state, input, output any) (bool, any) {
			st, in, out := state.(linState), input.(linInput), output.(linOutput)
			row := parseState(st.row)
			var (
				recs  map[string]ledger.IdempotencyRecord
				rec   ledger.IdempotencyRecord
				found bool
			)
			if in.idem != nil {
				recs = parseRecs(st.recs)
				if rec, found = recs[in.idem.KeyHash]; found && rec.Request != in.idem.Request {
					return out.err == "idempotency_key_reused", st
				}
			}
			switch in.kind {
			case linGet:
				if row == nil {
					return out.err == "not_found", st
				}
				return out.err == "" && out.row == st.row, st
			case linClaim:
				if found {
					if res, ok := ledger.ResendClaim(rec, row, in.claim.At); ok {
						return out.err == "" && out.decision == res.Decision && out.code == res.Code && out.row == rowJSON(res.Row), st
					}
				}
				res, write, err := ledger.DecideClaim(row, in.claim, p)
				if err != nil {
					return out.err == linErr(err), st
				}
				ok := out.err == "" && out.decision == res.Decision && out.code == res.Code && out.row == rowJSON(res.Row)
				next := st
				if write != nil {
					next.row = rowJSON(*write)
				}
				if in.idem != nil && ledger.UpdatesClaimRecord(found, res) {
					recs[in.idem.KeyHash] = ledger.ClaimRecord(*in.idem, res, in.claim.Row.Tenant, in.claim.Row.Key)
					next.recs = recsJSON(recs)
				}
				return ok, next
			case linReport:
				if row == nil {
					return out.err == "not_found", st
				}
				if found {
					return out.err == "" && !out.changed && out.row == st.row, st
				}
				ch, err := ledger.Apply(row, ledger.Classify(in.outcome), p)
				if err != nil {
					return out.err == linErr(err), st
				}
				next := linState{row: rowJSON(*row), recs: st.recs}
				if in.idem != nil {
					recs[in.idem.KeyHash] = ledger.IdempotencyRecord{Request: in.idem.Request, At: in.idem.At.UTC(), Tenant: row.Tenant, Key: row.Key}
					next.recs = recsJSON(recs)
				}
				return out.err == "" && out.changed == ch.Changed && out.row == rowJSON(*row), next
			case linDecide:
				if row == nil {
					return out.err == "approval_not_found", st
				}
				before := row.Clone()
				ch, err := ledger.DecideApproval(row, in.decision)
				if err != nil {
					return out.err == linErr(err), st
				}
				if row.Approval.State == before.Approval.State {
					return out.err == "" && !out.changed && out.row == st.row, st
				}
				return out.err == "" && out.changed == ch.Changed && out.row == rowJSON(*row), linState{row: rowJSON(*row), recs: st.recs}
			}
			return false, st
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(linInput), output.(linOutput)
			var call string
			switch in.kind {
			case linGet:
				call = "get"
			case linClaim:
				call = fmt.Sprintf("claim@%s", in.claim.At.Format("15:04:05.000"))
			case linReport:
				call = fmt.Sprintf("report %s %d@%s", in.outcome.Kind, in.outcome.HTTPStatus, in.outcome.At.Format("15:04:05.000"))
			case linDecide:
				call = fmt.Sprintf("%s@%s", in.decision.Verdict, in.decision.At.Format("15:04:05.000"))
			}
			switch {
			case in.kind == linClaim && in.claim.Worker:
				call = "worker " + call
			case in.kind == linClaim && in.claim.Gate.Autonomy != "":
				call = string(in.claim.Gate.Autonomy) + " " + call
			}
			if in.idem != nil {
				call += " key=" + in.idem.KeyHash[:8]
			}
			return fmt.Sprintf("%s(%s) → %s %s %s", call, in.key, out.err, out.decision, summary(out.row))
		},
		DescribeState: func(state any) string { return summary(state.(linState).row) },
	}
}

// summary shortens a row for the visualization.
func summary(s string) string {
	if s == "" {
		return "∅"
	}
	r := parseState(s)
	sum := fmt.Sprintf("%s attempt=%d receipt=%s http=%d", r.Status, r.Attempt, r.UpstreamReceiptID, r.LastHTTPStatus)
	if r.Approval != nil {
		sum += " approval=" + string(r.Approval.State)
	}
	return sum
}

func testLinearizable(t *testing.T, open Open) {
	for round := range linRounds {
		t.Run("round "+strconv.Itoa(round), func(t *testing.T) {
			e := newEnv(t, open)
			checkLinearizable(t, "linearizability", round, linHistory(t, e, round, linKeys, "lin", linRandomInput))
		})
	}
}

// checkLinearizable fails the test when porcupine finds no sequential order
// of history that the model explains, and writes the visualization.
func checkLinearizable(t *testing.T, name string, round int, history []porcupine.Operation) {
	t.Helper()
	model := linModel()
	res, info := porcupine.CheckOperationsVerbose(model, history, 0)
	if res == porcupine.Ok {
		return
	}
	dir := os.Getenv("STORETEST_VIZ_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-round-%d.html", name, round))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Fatalf("history of %d operations is not linearizable (%s); writing the visualization failed: %v", len(history), res, err)
	}
	t.Fatalf("history of %d operations is not linearizable (%s); visualization: %s (set STORETEST_VIZ_DIR to keep it)", len(history), res, path)
}

// linHistory runs linClients goroutines of linOps random calls each (drawn
// by gen) against nkeys business keys named <prefix>-<round>-<i> and
// records every call with a logical clock that respects real-time order.
func linHistory(t *testing.T, e *env, round, nkeys int, prefix string, gen func(*rand.Rand, []string) (linInput, error)) []porcupine.Operation {
	t.Helper()
	var (
		clock   atomic.Int64
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		start   = make(chan struct{})
		failed  atomic.Value
	)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d-%d", prefix, round, i)
	}
	for client := range linClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(round), uint64(client)))
			<-start
			for range linOps {
				in, err := gen(rng, keys)
				if err != nil {
					failed.Store(err)
					return
				}
				call := clock.Add(1)
				out := linRun(e, in)
				ret := clock.Add(1)
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatalf("building inputs: %v", err)
	}
	for _, op := range history {
		if out := op.Output.(linOutput); len(out.err) > 6 && out.err[:6] == "other:" {
			t.Fatalf("unexpected error from the store: %s", out.err)
		}
	}
	sort.Slice(history, func(i, j int) bool { return history[i].Call < history[j].Call })
	// What the history exercised, for -v: a check over histories that never
	// retry or never collide would prove little.
	seen := map[string]int{}
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		switch {
		case out.err != "":
			seen[out.err]++
		case in.kind == linClaim:
			seen[string(out.decision)]++
		case in.kind == linReport && out.changed:
			seen["transition"]++
		case in.kind == linDecide:
			seen[string(in.decision.Verdict)]++
		}
	}
	t.Logf("history: %d operations, %v", len(history), seen)
	return history
}

// linRandomInput draws a call. Times spread over 40 minutes, so leases
// expire and claims retry; one claim in twenty names a different intent.
func linRandomInput(rng *rand.Rand, keys []string) (linInput, error) {
	key := keys[rng.IntN(len(keys))]
	now := t0.Add(time.Duration(rng.IntN(40*60*1000)) * time.Millisecond)
	switch p := rng.IntN(10); {
	case p < 4:
		intent := `{"amount":1050,"currency":"usd"}`
		if rng.IntN(20) == 0 {
			intent = `{"amount":2000,"currency":"usd"}`
		}
		req := baseRequest(withKey(key), withIntent(intent))
		if rng.IntN(10) == 0 {
			req.Frozen = true
		}
		c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), now)
		return linInput{kind: linClaim, key: key, claim: c, idem: linIdem(rng, "claim", key, intent, now)}, err
	case p < 8:
		// Settling outcomes are rare, so keys stay open long enough for
		// leases, retries and reports to interleave.
		outcomes := []ledger.Outcome{
			{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_" + strconv.Itoa(rng.IntN(5))},
			{Kind: ledger.OutcomeResponse, HTTPStatus: 400},
			{Kind: ledger.OutcomeResponse, HTTPStatus: 429},
			{Kind: ledger.OutcomeResponse, HTTPStatus: 429},
			{Kind: ledger.OutcomeResponse, HTTPStatus: 409},
			{Kind: ledger.OutcomeResponse, HTTPStatus: 503},
			{Kind: ledger.OutcomeTimeout},
			{Kind: ledger.OutcomeTimeout},
			{Kind: ledger.OutcomeNetworkError},
		}
		n := len(outcomes)
		if rng.IntN(4) != 0 {
			n, outcomes = n-2, outcomes[2:] // three in four draws never settle
		}
		o := outcomes[rng.IntN(n)]
		o.At = now
		return linInput{kind: linReport, key: key, outcome: o, idem: linIdem(rng, "report", key, fmt.Sprintf("%s-%d", o.Kind, o.HTTPStatus), now)}, nil
	}
	return linInput{kind: linGet, key: key}, nil
}

// linIdem gives half the calls an Idempotency-Key, one of two values per
// key and kind of call, so resends (same value, same request), reuses with
// another request and fresh values all occur; req stands for the body.
func linIdem(rng *rand.Rand, kind, key, req string, now time.Time) *ledger.Idempotency {
	if rng.IntN(2) == 0 {
		return nil
	}
	v := fmt.Sprintf("lin-%s-%s-%d", kind, key, rng.IntN(2))
	i := ledger.Idempotency{Scope: tenantA, KeyHash: ledger.IdempotencyKeyHash(v), Request: req, At: now}
	return &i
}

func linRun(e *env, in linInput) linOutput {
	ctx := e.ctx
	if in.idem != nil {
		ctx = ledger.WithIdempotency(ctx, *in.idem)
	}
	switch in.kind {
	case linClaim:
		res, err := e.s.Claim(ctx, in.claim)
		if err != nil {
			return linOutput{err: linErr(err)}
		}
		return linOutput{decision: res.Decision, code: res.Code, row: rowJSON(res.Row)}
	case linReport:
		row, ch, err := e.s.Report(ctx, tenantA, in.key, in.outcome)
		if err != nil {
			return linOutput{err: linErr(err)}
		}
		return linOutput{changed: ch.Changed, row: rowJSON(row)}
	case linDecide:
		row, ch, err := e.s.DecideApproval(e.ctx, in.decision)
		if err != nil {
			return linOutput{err: linErr(err)}
		}
		return linOutput{changed: ch.Changed, row: rowJSON(row)}
	}
	row, err := e.s.Get(e.ctx, tenantA, in.key)
	if err != nil {
		return linOutput{err: linErr(err)}
	}
	return linOutput{row: rowJSON(row)}
}
