package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// randomRun drives a store with random operations from one seed and keeps
// what the suite needs to check it afterwards.
type randomRun struct {
	e      *env
	rng    *rand.Rand
	now    time.Time
	known  map[rowID]bool
	lids   map[rowID]string // the local id of each known row
	order  []rowID          // known, in the order first seen by the suite
	events []string         // message ids of every transition, in commit order
}

type rowID struct{ tenant, key string }

func testRandomConsistency(t *testing.T, open Open) {
	for _, seed := range []uint64{1, 2} {
		t.Run("seed "+strconv.FormatUint(seed, 10), func(t *testing.T) {
			r := &randomRun{
				e:     newEnv(t, open),
				rng:   rand.New(rand.NewPCG(seed, 0x5eed)),
				now:   t0,
				known: map[rowID]bool{}, lids: map[rowID]string{},
			}
			for i := range 250 {
				r.now = r.now.Add(time.Duration(r.rng.IntN(240_000)) * time.Millisecond)
				r.step(i)
			}
			r.check()
		})
	}
}

func (r *randomRun) pick(n int) int { return r.rng.IntN(n) }

// request builds a claim request from a small pool, so claims collide.
func (r *randomRun) request() ledger.ClaimRequest {
	tenants := []string{tenantA, tenantB}
	classes := []ledger.ToolClass{ledger.ClassWriteIdempotent, ledger.ClassWriteIdempotent, ledger.ClassWriteLedger, ledger.ClassWriteIrreversible}
	windows := []time.Duration{24 * time.Hour, time.Hour, 0}
	ms := []reqMod{
		withTenant(tenants[r.pick(2)]),
		withRunID("run-" + strconv.Itoa(r.pick(2))),
		withIntent(`{"n":` + strconv.Itoa(r.pick(6)) + `}`),
		withClass(classes[r.pick(len(classes))]),
		withWindow(windows[r.pick(len(windows))]),
	}
	if r.pick(5) == 0 {
		ms = append(ms, withKey("order-"+strconv.Itoa(r.pick(3))))
	}
	if r.pick(4) == 0 {
		ms = append(ms, withExpect(100, "usd"))
	}
	if r.pick(10) == 0 {
		ms = append(ms, frozen())
	}
	switch r.pick(8) {
	case 0, 1:
		ms = append(ms, gated())
	case 2:
		ms = append(ms, outboxed())
	}
	return baseRequest(ms...)
}

// decideRandom grants, denies or expires the approval of a known row (one
// with no approval answers not found).
func (r *randomRun) decideRandom(i int) {
	id, ok := r.randomKnown()
	if !ok {
		return
	}
	d := ledger.ApprovalDecision{ID: ledger.ApprovalID(id.tenant, id.key), At: r.now, Actor: "ops", Note: "random", By: approver}
	d.Verdict = []ledger.Verdict{ledger.VerdictGrant, ledger.VerdictDeny, ledger.VerdictExpire}[r.pick(3)]
	_, ch, err := r.e.s.DecideApproval(r.e.ctx, d)
	switch {
	case err == nil:
		if ch.Event != nil {
			r.events = append(r.events, ch.Event.MsgID())
		}
	case errors.Is(err, ledger.ErrApprovalNotFound), errors.Is(err, ledger.ErrApprovalDecided),
		errors.Is(err, ledger.ErrApprovalExpired), errors.Is(err, ledger.ErrInvalidTransition):
	default:
		r.e.t.Fatalf("op %d DecideApproval: %v", i, err)
	}
}

func (r *randomRun) randomKnown() (rowID, bool) {
	if len(r.order) == 0 {
		return rowID{}, false
	}
	return r.order[r.pick(len(r.order))], true
}

func (r *randomRun) record(ch ledger.Change) {
	if ch.Changed {
		r.events = append(r.events, ch.Event.MsgID())
	}
}

func (r *randomRun) remember(row ledger.Row) {
	id := rowID{row.Tenant, row.Key}
	if row.Key != "" && !r.known[id] {
		r.known[id] = true
		r.lids[id] = row.MetadataLocalID
		r.order = append(r.order, id)
	}
}

func (r *randomRun) outcome() ledger.Outcome {
	at := r.now
	switch r.pick(11) {
	case 0:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_" + strconv.Itoa(r.pick(100)), At: at}
	case 1:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_r", Headers: map[string]string{"Idempotent-Replayed": "true"}, At: at}
	case 2:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 409, ReceiptID: "pi_409", At: at}
	case 3:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 409, At: at}
	case 4:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 429, At: at}
	case 5:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 429, Headers: map[string]string{"Stripe-Should-Retry": "false"}, At: at}
	case 6:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 400, At: at}
	case 7:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 500, At: at}
	case 8:
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 503, At: at}
	case 9:
		return ledger.Outcome{Kind: ledger.OutcomeTimeout, At: at}
	}
	return ledger.Outcome{Kind: ledger.OutcomeNetworkError, At: at}
}

func (r *randomRun) evidence(src ledger.Source) ledger.Evidence {
	statuses := []ledger.Status{ledger.StatusSucceeded, ledger.StatusFailedPoison, "", ledger.StatusUnknown}
	if src == ledger.SourceHuman {
		statuses = statuses[:2]
	}
	ev := ledger.Evidence{Source: src, Status: statuses[r.pick(len(statuses))], At: r.now}
	if r.pick(2) == 0 {
		ev.ReceiptID = "pi_" + strconv.Itoa(r.pick(100))
	}
	if r.pick(3) == 0 {
		ev.Amount, ev.Currency = amount(int64(100*(1+r.pick(2)))), "usd"
	}
	if src == ledger.SourceHuman {
		ev.Actor, ev.Note = "ops", "random"
	}
	return ev
}

func (r *randomRun) step(i int) {
	e := r.e
	t := e.t
	if r.pick(12) == 0 {
		r.decideRandom(i)
		return
	}
	switch p := r.pick(100); {
	case p < 30:
		req := r.request()
		res, err := e.s.Claim(e.ctx, newClaim(t, req, r.now))
		if err != nil {
			if !errors.Is(err, ledger.ErrFingerprintMismatch) {
				t.Fatalf("op %d Claim: %v", i, err)
			}
			return
		}
		r.remember(res.Row)
		for _, ev := range res.Events {
			r.events = append(r.events, ev.MsgID())
		}
		for _, ch := range res.Changes {
			r.record(ch)
		}
	case p < 48:
		id, ok := r.randomKnown()
		if !ok {
			return
		}
		_, ch, err := e.s.Report(e.ctx, id.tenant, id.key, r.outcome())
		if errors.Is(err, ledger.ErrInvalidTransition) {
			// Refused only for an open row never granted a call.
			if row, gerr := e.s.Get(e.ctx, id.tenant, id.key); gerr != nil || row.Attempt != 0 || !row.Status.Open() {
				t.Fatalf("op %d Report refused on a row at attempt %d %s: %v", i, row.Attempt, row.Status, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("op %d Report: %v", i, err)
		}
		r.record(ch)
	case p < 58:
		id, ok := r.randomKnown()
		if !ok {
			return
		}
		src := []ledger.Source{ledger.SourceResolver, ledger.SourceHuman}[r.pick(2)]
		_, ch, err := e.s.Apply(e.ctx, id.tenant, id.key, r.evidence(src))
		if err != nil {
			if src == ledger.SourceHuman && errors.Is(err, ledger.ErrInvalidTransition) {
				return
			}
			t.Fatalf("op %d Apply: %v", i, err)
		}
		r.record(ch)
	case p < 76:
		d := r.delivery()
		res, err := e.s.Ingest(e.ctx, d)
		if err != nil {
			t.Fatalf("op %d Ingest: %v", i, err)
		}
		r.record(res.Change)
	case p < 83:
		id, ok := r.randomKnown()
		if !ok {
			return
		}
		_, paged, err := e.s.Escalate(e.ctx, id.tenant, id.key, r.now)
		if err != nil {
			t.Fatalf("op %d Escalate: %v", i, err)
		}
		if paged {
			r.events = append(r.events, id.tenant+":"+id.key+":"+ledger.EventEscalated)
		}
	case p < 91:
		id, ok := r.randomKnown()
		if !ok {
			return
		}
		next := r.now.Add(time.Duration(r.pick(7200)-600) * time.Second)
		if err := e.s.Reschedule(e.ctx, id.tenant, id.key, next); err != nil {
			t.Fatalf("op %d Reschedule: %v", i, err)
		}
	case p < 96:
		if _, err := e.s.PruneInbox(e.ctx, r.now.Add(-time.Duration(r.pick(180))*time.Minute)); err != nil {
			t.Fatalf("op %d PruneInbox: %v", i, err)
		}
	default:
		e.consistent()
	}
}

// delivery builds a webhook from a small pool of event ids, so duplicates,
// orphans of rows claimed later, foreign tenants and joins by key all occur.
func (r *randomRun) delivery() ledger.Delivery {
	tenant := []string{tenantA, tenantB}[r.pick(2)]
	d := ledger.Delivery{
		Tenant:   tenant,
		Vendor:   []string{"stripe", "paypal"}[r.pick(2)],
		EventID:  "evt_" + strconv.Itoa(r.pick(60)),
		Evidence: r.evidence(ledger.SourceWebhook),
		At:       r.now,
	}
	d.Evidence.VendorEventID = d.EventID
	switch k := r.pick(10); {
	case k < 5:
		if id, ok := r.randomKnown(); ok {
			d.LocalID = r.lids[id]
		}
	case k < 7:
		// A row that may be claimed later: the event parks as an orphan.
		c, err := ledger.NewClaim(r.request(), ledger.DefaultPolicy(), r.now)
		if err != nil {
			r.e.t.Fatalf("NewClaim: %v", err)
		}
		d.LocalID = c.Row.MetadataLocalID
	case k < 9:
		if id, ok := r.randomKnown(); ok {
			d.IdempotencyKey = id.key
		}
	}
	if r.pick(10) == 0 {
		d.Ignore, d.Evidence = true, ledger.Evidence{}
	}
	return d
}

// check compares the store with what the suite saw: every row reachable by
// key, by local id and by List; the due index holding exactly the open
// rows; one outbox record per transition.
func (r *randomRun) check() {
	e, t := r.e, r.e.t
	e.consistent()
	rowsByID := map[rowID]ledger.Row{}
	open := map[string]bool{}
	for _, id := range r.order {
		row := e.get(id.tenant, id.key)
		rowsByID[id] = row
		if row.Status.Open() {
			open[id.tenant+"/"+id.key] = true
		}
	}
	due, err := e.s.Due(e.ctx, at(100*365*24*time.Hour), len(r.order)+10)
	if err != nil {
		t.Fatalf("Due: %v", err)
	}
	for i, row := range due {
		if !open[row.Tenant+"/"+row.Key] {
			t.Fatalf("Due: %s/%s (status %s) is due but not open, or not a row the suite made", row.Tenant, row.Key, row.Status)
		}
		if i > 0 && row.NextCheckAt.Before(due[i-1].NextCheckAt) {
			t.Fatalf("Due: not in next_check_at order at %d", i)
		}
		sameRow(t, "due row vs stored row", row, rowsByID[rowID{row.Tenant, row.Key}])
	}
	if len(due) != len(open) {
		t.Fatalf("Due: %d rows, want the %d open rows", len(due), len(open))
	}
	for _, tenant := range []string{tenantA, tenantB} {
		var want []string
		for _, id := range r.order {
			if id.tenant == tenant {
				want = append(want, id.key)
			}
		}
		got := keys(listAll(t, e, ledger.ListQuery{Tenant: tenant, Limit: 7}))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("List %s: got %d rows, want %d", tenant, len(got), len(want))
		}
	}
	if got := eventKeys(e.pending()); !slices.Equal(got, r.events) {
		t.Fatalf("outbox: %d records for %d transitions\n got %v\nwant %v", len(got), len(r.events), got, r.events)
	}
	// Every row is reachable by its local id: a progress event without a
	// receipt joins it and changes nothing. The probes are independent, so
	// they run concurrently (a store with group commit batches them).
	var (
		wg     sync.WaitGroup
		probes = make(chan int)
		errs   = make([]error, len(r.order))
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range probes {
				id := r.order[i]
				res, err := e.s.Ingest(e.ctx, ledger.Delivery{
					Tenant: id.tenant, Vendor: "probe", EventID: fmt.Sprintf("probe_%d", i), LocalID: rowsByID[id].MetadataLocalID,
					Evidence: ledger.Evidence{Source: ledger.SourceWebhook, At: r.now}, At: r.now,
				})
				if err != nil || res.Outcome != ledger.IngestAccepted || res.Row == nil || res.Row.Key != id.key || res.Row.Tenant != id.tenant {
					errs[i] = fmt.Errorf("join by local id of %s/%s: outcome %q err %v", id.tenant, id.key, res.Outcome, err)
				}
			}
		}()
	}
	for i := range r.order {
		probes <- i
	}
	close(probes)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, id := range r.order {
		sameRow(t, "row after a probe", e.get(id.tenant, id.key), rowsByID[id])
	}
	e.consistent()
}
