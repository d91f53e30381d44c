package drill

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/paging"
	"github.com/agentledger/reconciler/resolver"
)

// The sabotages: each switches off the protection one drill tests, by
// running an unsafe agent runtime (or resolver store) in its place. Tests
// run each drill with its sabotage and require a FAIL.
const (
	SabotageFreshKeyPerRetry    = "fresh-key-per-retry"  // the retry layer mints a new key
	SabotageIgnoreWait          = "ignore-wait"          // a resumed harness calls although the ledger said wait
	SabotageNoScrub             = "no-scrub"             // model-made request ids reach the intent
	SabotageDrop409Receipt      = "drop-409-receipt"     // a 409 "already exists" is read as a failure
	SabotageFreshKeyAfter5xx    = "fresh-key-after-5xx"  // a 500 is read as "did not happen"
	SabotageSkipClaim           = "skip-claim"           // the runtime calls the vendor without claiming
	SabotageCompensateUnclaimed = "compensate-unclaimed" // refunds without the compensation claim
	SabotageNoLocalID           = "no-local-id"          // the call omits metadata_local_id
	SabotageForgetPaged         = "forget-paged"         // the resolver does not see paged_at
	SabotageCallBeforeApproval  = "call-before-approval" // the runtime calls while the approval is requested
	SabotageIgnoreDenial        = "ignore-denial"        // a denied call is made anew under a fresh key
	SabotageIgnoreChecklist     = "ignore-checklist"     // the registry grants autonomy despite an open box
	SabotageQueuedAsFailure     = "queued-as-failure"    // each queued retry calls the vendor itself
)

// callTimeout is the runtime's vendor-call timeout in drill 1: short, so
// the drill is quick, and only the hanging call ever reaches it.
const callTimeout = time.Second

var drills = []drill{
	{"slow-success-timeout", "vendor commits, then hangs past the client timeout; the agent re-runs the intent",
		SabotageFreshKeyPerRetry, slowSuccess, nil, stripeAutonomous},
	{"double-harness-resume", "crash after the call, before the report; two resumes at once",
		SabotageIgnoreWait, doubleResume, nil, stripeAutonomous},
	{"model-reemits-new-ephemeral-args", "the model re-emits the call with a fresh request_id and idempotency_key",
		SabotageNoScrub, modelReemits, nil, stripeAutonomous},
	{"upstream-409-with-receipt", "the vendor answers 409 already exists, naming the object",
		SabotageDrop409Receipt, conflictWithReceipt, nil, stripeAutonomous},
	{"vendor-500-then-webhook", "the vendor commits and answers 500; its signed webhook closes the row",
		SabotageFreshKeyAfter5xx, serverErrorThenWebhook, nil, stripeAutonomous},
	{"same-key-different-amount", "a business key reused for a different amount",
		SabotageSkipClaim, sameKeyDifferentAmount, nil, stripeAutonomous},
	{"compensation-once", "a refund is refused while the charge is pending and made once after",
		SabotageCompensateUnclaimed, compensationOnce, nil, stripeAutonomous},
	{"webhook-before-report", "the vendor's webhook arrives before the runtime's own report",
		SabotageNoLocalID, webhookBeforeReport, nil, stripeAutonomous},
	{"replay-window-expiry-pages-once", "an unknown row outlives its replay window; the resolver passes several times",
		SabotageForgetPaged, pageOnce, nil, stripeAutonomous},
	{"irreversible-waits-for-approval", "a write_irreversible call waits for a human, then calls the vendor exactly once",
		SabotageCallBeforeApproval, approvalWaits, []string{capAwaitApproval}, gated},
	{"denied-never-calls", "a denied approval stops the call with approval_denied; the vendor is never called",
		SabotageIgnoreDenial, deniedNeverCalls, []string{capAwaitApproval}, gated},
	{"open-checklist-stays-gated", "a tool registered autonomous with a checklist box open waits for approval",
		SabotageIgnoreChecklist, openChecklistGated, []string{capAwaitApproval}, nil},
	{"outbox-three-retries-execute-once", "three concurrent agent retries of an outbox tool; the worker calls once",
		SabotageQueuedAsFailure, outboxOnce, []string{capQueued}, outboxed},
}

// stripeAutonomous: the drills built on the fake Stripe's replay of a
// repeated Idempotency-Key and on retry_same_key apply to a Stripe tool,
// write_idempotent, keyed in Idempotency-Key, that claims autonomously.
func stripeAutonomous(t ledger.Tool) (bool, string) {
	eff, _ := t.EffectiveAutonomy()
	switch {
	case t.Vendor != "stripe" || t.Class != ledger.ClassWriteIdempotent || !strings.EqualFold(t.KeyPlacement.Header, keyHeader):
		return false, "drills a Stripe write_idempotent tool keyed in Idempotency-Key"
	case eff != ledger.AutonomyAutonomous:
		return false, "drills an autonomous tool; this one's effective autonomy is " + string(eff)
	}
	return true, ""
}

// gated: the approval drills apply to a tool whose calls wait for a human.
func gated(t ledger.Tool) (bool, string) {
	if eff, _ := t.EffectiveAutonomy(); eff != ledger.AutonomyApproval {
		return false, "drills a tool gated by approval; this one's effective autonomy is " + string(eff)
	}
	return true, ""
}

// outboxed: the outbox drill applies to a tool the worker calls.
func outboxed(t ledger.Tool) (bool, string) {
	if eff, _ := t.EffectiveAutonomy(); eff != ledger.AutonomyOutbox {
		return false, "drills an outbox tool; this one's effective autonomy is " + string(eff)
	}
	return true, ""
}

// gatedEntry is the entry the approval drills claim under: the drilled
// tool as registered, or the charge made write_irreversible (never
// autonomous).
func (e *env) gatedEntry() ledger.Tool {
	if e.custom {
		return e.tool
	}
	t := e.tool.Clone()
	t.Class = ledger.ClassWriteIrreversible
	return t
}

// openApproval waits for the one open approval request of key.
func (e *env) openApproval(ctx context.Context, key string) (client.ApprovalView, error) {
	var view client.ApprovalView
	err := poll(ctx, func() (bool, error) {
		page, err := e.approver.ListApprovals(ctx, client.ApprovalQuery{})
		for _, v := range page.Approvals {
			if v.Row.Key == key {
				view = v
				return true, nil
			}
		}
		return false, err
	})
	return view, err
}

// awaitingKey waits until the watch saw agent told await_approval and
// returns the key, or "" when the agent's run ended first.
func (e *env) awaitingKey(ctx context.Context, a *agent, r *run) string {
	if !waitEither(ctx, e.watch.answered(a.name, ledger.DecisionAwaitApproval), r) {
		return ""
	}
	return e.watch.key(a.name, ledger.DecisionAwaitApproval)
}

// 10. A write_irreversible tool's call (or the drilled tool's, gated by
// approval) waits for a human: the agent's do is told await_approval and
// calls nothing; the approver grants it; the call is made once, with the
// ledger's key; the same intent again replays.
func approvalWaits(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	entry := e.gatedEntry()
	if err := e.register(ctx, entry); err != nil {
		return c.abort(r, err)
	}
	a := e.agent("a")
	call := chargeCall(e.vendor.URL(), 1050, true)
	claim := toolClaim(entry, "run_a1", "call_1", 1050, chargeIntent(1050))
	run := goRun(func() (client.Outcome, error) { return a.do(ctx, claim, call) })
	key := e.awaitingKey(ctx, a, run)
	if c.expect(key != "", "the agent was never told await_approval") {
		if e.sabotage == SabotageCallBeforeApproval {
			// The unsafe runtime reads await_approval as proceed.
			row, _ := e.ledger.Get(ctx, key)
			_, _ = a.call(ctx, call, key, row.MetadataLocalID)
		}
		c.expect(e.vendor.Posts() == 0, "the vendor saw %d posts before the approval, want none", e.vendor.Posts())
		view, err := e.openApproval(ctx, key)
		if c.expect(err == nil, "no approval request for %s: %v", key, err) {
			_, err = e.approver.Approve(ctx, view.Approval.ID, client.ApprovalDecision{Actor: "drill approver", Note: "drill"})
			c.expect(err == nil, "approve: %v", err)
		}
	}
	<-run.done
	c.expect(run.err == nil && run.out.Called && run.out.AwaitedApproval && run.out.Key == key,
		"do after the grant: called=%v awaited=%v err=%v, want one call with the waiting key", run.out.Called, run.out.AwaitedApproval, run.err)
	c.expect(run.out.Row.Status == ledger.StatusSucceeded, "row after the call is %q, want succeeded", run.out.Row.Status)
	claim.ToolCallID = "call_2"
	again, err := a.do(ctx, claim, call)
	c.expect(err == nil && again.Decision == ledger.DecisionReplay && !again.Called,
		"the same intent again: %s called=%v err=%v, want a replay", again.Decision, again.Called, err)
	keys := e.vendor.Keys()
	c.expect(len(keys) == 1 && keys[0] == key, "vendor saw keys %v, want the ledger key once", keys)
	sideEffects(e, &r, c)
	return c.result(r)
}

// 11. The approver denies the call: the waiting do stops with
// approval_denied, the row is failed_poison, the same intent again stops,
// and the vendor is never called.
func deniedNeverCalls(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 0}, &checker{}
	entry := e.gatedEntry()
	if err := e.register(ctx, entry); err != nil {
		return c.abort(r, err)
	}
	a := e.agent("a")
	call := chargeCall(e.vendor.URL(), 1050, true)
	claim := toolClaim(entry, "run_a2", "call_1", 1050, chargeIntent(1050))
	run := goRun(func() (client.Outcome, error) { return a.do(ctx, claim, call) })
	key := e.awaitingKey(ctx, a, run)
	if c.expect(key != "", "the agent was never told await_approval") {
		view, err := e.openApproval(ctx, key)
		if c.expect(err == nil, "no approval request for %s: %v", key, err) {
			_, err = e.approver.Deny(ctx, view.Approval.ID, client.ApprovalDecision{Actor: "drill approver", Note: "not this charge"})
			c.expect(err == nil, "deny: %v", err)
		}
	}
	<-run.done
	var se *client.StopError
	c.expect(errors.As(run.err, &se) && se.Code == ledger.CodeApprovalDenied && !run.out.Called,
		"do after the denial: called=%v err=%v, want stop approval_denied", run.out.Called, run.err)
	if e.sabotage == SabotageIgnoreDenial {
		// "It failed": the unsafe runtime tries anew.
		_, _ = callUnclaimed(ctx, a, call)
	}
	claim.ToolCallID = "call_2"
	_, err := a.do(ctx, claim, call)
	c.expect(errors.As(err, &se) && se.Code == ledger.CodeApprovalDenied, "the same intent again: %v, want stop approval_denied", err)
	if key != "" {
		row, err := e.ledger.Get(ctx, key)
		c.expect(err == nil && row.Status == ledger.StatusFailedPoison, "row %s (%v), want failed_poison", row.Status, err)
	}
	c.expect(e.vendor.Posts() == 0, "vendor saw %d posts, want none", e.vendor.Posts())
	sideEffects(e, &r, c)
	return c.result(r)
}

// 12. A tool registered autonomous, but with one checklist box open
// (error_classes_mapped), is gated: its call waits for approval, the
// request names the open box, nothing is called until the grant, and the
// grant allows one call.
func openChecklistGated(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	entry := e.tool.Clone()
	entry.Autonomy, entry.Checklist.ErrorClassesMapped = ledger.AutonomyAutonomous, false
	if err := e.register(ctx, entry); err != nil {
		return c.abort(r, err)
	}
	a := e.agent("a")
	call := chargeCall(e.vendor.URL(), 1050, true)
	claim := toolClaim(entry, "run_a3", "call_1", 1050, chargeIntent(1050))
	run := goRun(func() (client.Outcome, error) { return a.do(ctx, claim, call) })
	key := e.awaitingKey(ctx, a, run)
	if c.expect(key != "", "the agent was never told await_approval") {
		c.expect(e.vendor.Posts() == 0, "the vendor saw %d posts before the approval, want none", e.vendor.Posts())
		view, err := e.openApproval(ctx, key)
		if c.expect(err == nil, "no approval request for %s: %v", key, err) {
			c.expect(strings.Contains(view.Approval.Reason, "error_classes_mapped"), "approval reason %q does not name the open box", view.Approval.Reason)
			_, err = e.approver.Approve(ctx, view.Approval.ID, client.ApprovalDecision{Actor: "drill approver", Note: "drill"})
			c.expect(err == nil, "approve: %v", err)
		}
	}
	<-run.done
	c.expect(run.err == nil && run.out.Called && run.out.AwaitedApproval,
		"do: called=%v awaited=%v err=%v, want one call after the grant", run.out.Called, run.out.AwaitedApproval, run.err)
	c.expect(e.vendor.Posts() == 1, "vendor saw %d posts, want 1", e.vendor.Posts())
	sideEffects(e, &r, c)
	return c.result(r)
}

// outboxEntry is the entry the outbox drill claims under: the drilled
// tool as registered, or the charge with autonomy outbox.
func (e *env) outboxEntry() ledger.Tool {
	if e.custom {
		return e.tool
	}
	t := e.tool.Clone()
	t.Autonomy = ledger.AutonomyOutbox
	return t
}

// 13. Three agent retries of an outbox tool's call arrive at once: each
// is told queued and calls nothing; one work item reaches RECON_WORK; the
// runtime's worker (the Go SDK's client.Worker, with the tenant's NATS
// credential) starts the key, calls once and reports; every retry gets
// the receipt.
func outboxOnce(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	entry := e.outboxEntry()
	if err := e.register(ctx, entry); err != nil {
		return c.abort(r, err)
	}
	call := chargeCall(e.vendor.URL(), 1050, true)
	names := []string{"a", "b", "c"}
	runs := make([]*run, len(names))
	for i, name := range names {
		a := e.agent(name)
		claim := toolClaim(entry, "run_o1", fmt.Sprintf("call_%d", i+1), 1050, chargeIntent(1050))
		runs[i] = goRun(func() (client.Outcome, error) {
			if e.sabotage != SabotageQueuedAsFailure {
				return a.doWaitQueued(ctx, claim, call)
			}
			// The unsafe runtime takes queued for "not done" and calls.
			out, err := a.do(ctx, claim, call)
			if errors.Is(err, client.ErrQueued) {
				res, cerr := callUnclaimed(ctx, a, call)
				return client.Outcome{Decision: out.Decision, Key: out.Key, Called: true, Result: res}, cerr
			}
			return out, err
		})
	}
	// Every retry is told queued before the worker starts: one item for all.
	for i, name := range names {
		c.expect(waitEither(ctx, e.watch.answered(name, ledger.DecisionQueued), runs[i]), "agent %s was never told queued", name)
	}
	stop, err := e.startWorker(ctx, entry, call)
	if err != nil {
		return c.abort(r, err)
	}
	var key, receipt string
	for i, rr := range runs {
		<-rr.done
		c.expect(rr.err == nil && !rr.out.Called, "retry %d: called=%v err=%v, want the worker's receipt without a call", i+1, rr.out.Called, rr.err)
		if i == 0 {
			key, receipt = rr.out.Key, rr.out.ReceiptID()
		}
		c.expect(rr.out.Key == key && rr.out.ReceiptID() == receipt && receipt != "",
			"retry %d got key %q receipt %q, want %q %q", i+1, rr.out.Key, rr.out.ReceiptID(), key, receipt)
	}
	stop()
	if key != "" {
		row, err := e.ledger.Get(ctx, key)
		c.expect(err == nil && row.Status == ledger.StatusSucceeded && row.Autonomy == ledger.AutonomyOutbox && row.Attempt == 1,
			"row %s autonomy %s attempt %d (%v), want succeeded by the worker's one attempt", row.Status, row.Autonomy, row.Attempt, err)
	}
	items, err := e.workItems(ctx)
	c.expect(err == nil && items == 0, "RECON_WORK holds %d items (%v), want none", items, err)
	c.expect(e.vendor.Posts() == 1, "vendor saw %d posts, want 1", e.vendor.Posts())
	sideEffects(e, &r, c)
	return c.result(r)
}

// startWorker runs the tenant's outbox worker (client.Worker, through the
// watch as agent "worker", on the runtime's NATS connection) with call as
// the handler of entry; stop ends it and waits.
func (e *env) startWorker(ctx context.Context, entry ledger.Tool, call vendorCall) (stop func(), _ error) {
	wc, err := client.New(e.watch.agentsURL()+"/worker", tenantToken, client.WithLogger(e.log),
		client.WithRetries(agentRetries, agentBackoffMS*time.Millisecond))
	if err != nil {
		return nil, err
	}
	h := func(ctx context.Context, _ client.WorkItem, key, localID string) (client.Result, error) {
		return goCall(call)(ctx, key, localID)
	}
	w, err := client.NewWorker(wc, e.rjs, tenant, map[string]client.WorkHandler{entry.Name: h},
		client.WithConcurrency(2), client.WithWorkerLogger(e.log))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.log.Warn("worker", "err", err)
			}
		})
	}, nil
}

// workItems is how many work items RECON_WORK holds, once the outbox is
// drained and an acked item had time to go.
func (e *env) workItems(ctx context.Context) (uint64, error) {
	if err := e.drained(ctx); err != nil {
		return 0, err
	}
	st, err := e.js.Stream(ctx, events.DefaultWorkStream)
	if err != nil {
		return 0, err
	}
	var n uint64
	// An acked item goes at once; one still there after a few seconds stays.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err = poll(ctx, func() (bool, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return false, err
		}
		n = info.State.Msgs
		return n == 0, nil
	})
	if ctx.Err() != nil {
		return n, nil // report what is left
	}
	return n, err
}

// sideEffects counts the vendor's objects into r.
func sideEffects(e *env, r *Result, c *checker) {
	r.SideEffects = len(e.vendor.Objects())
	c.expect(r.SideEffects == r.Expected, "vendor created %d objects, want %d", r.SideEffects, r.Expected)
}

// 1. The vendor commits, then hangs past the client's timeout: Do reports
// a timeout (row unknown). The agent runs the same intent again: the ledger
// answers retry_same_key, the call carries the same key, the vendor replays.
func slowSuccess(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	a := e.agent("a")
	// This agent uses its Stripe SDK where it has one (Go: stripe-go
	// through client.StripeBackend), with a short call timeout.
	charge := chargeCall(e.vendor.URL(), 1050, true)
	charge.SDK, charge.TimeoutMS = sdkStripe, callTimeout.Milliseconds()
	e.vendor.Plan(1, FaultHang)
	claim := e.chargeClaim("run_d1", "call_1", 1050, chargeIntent(1050))

	first, err := a.do(ctx, claim, charge)
	c.expect(errors.Is(err, client.ErrUnsettled), "first attempt: want unsettled after the timeout, got %v", err)
	c.expect(first.Kind == ledger.OutcomeTimeout, "first attempt reported %q, want timeout", first.Kind)
	c.expect(first.Row.Status == ledger.StatusUnknown, "row after the timeout is %q, want unknown", first.Row.Status)

	claim.ToolCallID = "call_2" // the model loop asks again
	if e.sabotage == SabotageFreshKeyPerRetry {
		claim.Key = freshKey("retry")
	}
	second, err := a.do(ctx, claim, charge)
	c.expect(err == nil, "retry: %v", err)
	c.expect(second.Decision == ledger.DecisionRetrySameKey, "retry decision %q, want retry_same_key", second.Decision)
	c.expect(second.Key == first.Key, "retry used another key")
	c.expect(second.Row.Status == ledger.StatusSucceeded && second.Row.IdempotentReplayed,
		"row after the retry: %s replayed=%v, want succeeded by the vendor's replay", second.Row.Status, second.Row.IdempotentReplayed)
	keys := e.vendor.Keys()
	c.expect(len(keys) == 2 && keys[0] == first.Key && keys[1] == first.Key, "vendor saw keys %v, want the ledger key twice", keys)
	objs := e.vendor.Objects()
	c.expect(len(objs) > 0 && first.LocalID != "" && objs[0].Metadata["metadata_local_id"] == first.LocalID,
		"the vendor object does not carry the row's metadata_local_id %s", first.LocalID)
	sideEffects(e, &r, c)
	return c.result(r)
}

// run is one runtime call in its own goroutine (owned by the drill, which
// always receives from done).
type run struct {
	out  client.Outcome
	err  error
	done chan struct{}
}

func goRun(f func() (client.Outcome, error)) *run {
	r := &run{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.out, r.err = f()
	}()
	return r
}

// waitEither returns true when waited is closed (the watch saw the agent
// told to wait), false when the agent's run ended first (an unsafe runtime
// may never wait) or ctx ended.
func waitEither(ctx context.Context, waited <-chan struct{}, r *run) bool {
	select {
	case <-waited:
		return true
	case <-r.done:
		return false
	case <-ctx.Done():
		return false
	}
}

// 2. The harness claims (proceed), calls, and crashes before reporting.
// After the lease runs out it resumes, twice at once: one resume gets
// retry_same_key (the vendor replays), the other is told to wait and gets
// the receipt when the first settles. One side effect.
func doubleResume(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	a, b := e.agent("a"), e.agent("b")
	call := chargeCall(e.vendor.URL(), 1050, true)
	claim := e.chargeClaim("run_d2", "call_1", 1050, chargeIntent(1050))

	resp, err := a.claim(ctx, claim)
	if !c.expect(err == nil && resp.Decision == ledger.DecisionProceed && resp.Row != nil,
		"first claim: %v %v, want proceed", resp.Decision, err) {
		return c.result(r)
	}
	key, localID := resp.Row.Key, resp.Row.MetadataLocalID
	_, err = a.call(ctx, call, key, localID)
	c.expect(err == nil, "first call: %v", err)
	// The harness dies here: no report. While the lease holds, a resume is
	// told to wait; the harness comes back after the lease has run out.
	early := claim
	early.ToolCallID = "call_resume_early"
	resp, err = a.claim(ctx, early)
	c.expect(err == nil && resp.Decision == ledger.DecisionWait, "resume under the lease: %s %v, want wait", resp.Decision, err)
	e.clock.Advance(ledger.DefaultPolicy().PendingTTL + time.Minute)

	e.vendor.Plan(2, FaultHold) // hold the first resume's call until the second has claimed
	claimA, claimB := claim, claim
	claimA.ToolCallID, claimB.ToolCallID = "call_resume_a", "call_resume_b"
	ra := goRun(func() (client.Outcome, error) { return a.do(ctx, claimA, call) })
	if err := e.vendor.WaitPosts(ctx, 2); err != nil {
		c.expect(false, "first resume never called: %v", err)
	}
	rb := goRun(func() (client.Outcome, error) {
		if e.sabotage != SabotageIgnoreWait {
			return b.do(ctx, claimB, call)
		}
		// The unsafe harness claims but takes "wait" for "lost" and calls
		// under an identity of its own.
		resp, err := b.claim(ctx, claimB)
		if err != nil || resp.Decision != ledger.DecisionWait {
			return client.Outcome{Decision: resp.Decision}, err
		}
		res, err := callUnclaimed(ctx, b, call)
		return client.Outcome{Decision: resp.Decision, Called: true, Result: res}, err
	})
	waited := waitEither(ctx, e.watch.answered(b.name, ledger.DecisionWait), rb)
	e.vendor.Release()
	<-ra.done
	<-rb.done
	c.expect(waited, "the second resume was never told to wait")
	c.expect(ra.err == nil && ra.out.Decision == ledger.DecisionRetrySameKey && ra.out.Called,
		"first resume: %s called=%v err=%v, want retry_same_key and a call", ra.out.Decision, ra.out.Called, ra.err)
	c.expect(rb.err == nil && !rb.out.Called && (rb.out.Replayed || rb.out.Waited),
		"second resume: %s called=%v err=%v, want the stored receipt without a call", rb.out.Decision, rb.out.Called, rb.err)
	c.expect(rb.out.ReceiptID() != "" && rb.out.ReceiptID() == ra.out.ReceiptID(),
		"second resume got receipt %q, first %q", rb.out.ReceiptID(), ra.out.ReceiptID())
	c.expect(e.vendor.Posts() == 2, "vendor saw %d posts, want 2 (the crashed call and one resume)", e.vendor.Posts())
	sideEffects(e, &r, c)
	return c.result(r)
}

// 3. The model re-emits the tool call with a fresh tool_call_id and new
// ephemeral fields (request_id, idempotency_key) that the runtime's scrub
// removes: the intent, so the key, is the same, and the ledger replays the
// receipt.
func modelReemits(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	a := e.agent("a")
	call := chargeCall(e.vendor.URL(), 1050, true)
	args1 := chargeIntent(1050)
	args1["request_id"] = "req_model_0001"
	args2 := chargeIntent(1050)
	args2["request_id"], args2["idempotency_key"] = "req_model_0002", "model-invented-key"
	intent1, intent2 := args1, args2
	if e.sabotage != SabotageNoScrub {
		var err1, err2 error
		intent1, err1 = a.scrub(ctx, args1)
		intent2, err2 = a.scrub(ctx, args2)
		if err := errors.Join(err1, err2); err != nil {
			return c.abort(r, err)
		}
	}

	first, err := a.do(ctx, e.chargeClaim("run_d3", "call_1", 1050, intent1), call)
	c.expect(err == nil && first.Row.Status == ledger.StatusSucceeded, "first call: %s %v", first.Row.Status, err)
	second, err := a.do(ctx, e.chargeClaim("run_d3", "call_2", 1050, intent2), call)
	c.expect(err == nil, "re-emitted call: %v", err)
	c.expect(second.Key == first.Key, "re-emitted call got another key")
	c.expect(second.Decision == ledger.DecisionReplay && !second.Called,
		"re-emitted call: %s called=%v, want replay without a call", second.Decision, second.Called)
	c.expect(second.ReceiptID() == first.ReceiptID(), "receipts %q and %q differ", second.ReceiptID(), first.ReceiptID())
	c.expect(e.vendor.Posts() == 1, "vendor saw %d posts, want 1", e.vendor.Posts())
	sideEffects(e, &r, c)
	return c.result(r)
}

// 4. The vendor answers 409 "already exists" naming the object (a
// duplicate delivery upstream won): that is a success with that receipt.
func conflictWithReceipt(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	a := e.agent("a")
	e.vendor.Plan(1, Fault409)
	call := chargeCall(e.vendor.URL(), 1050, true)
	if e.sabotage == SabotageDrop409Receipt {
		call.Receipt = []string{"id"} // "409 is an error; its body is not ours to read"
	}
	out, err := a.do(ctx, e.chargeClaim("run_d4", "call_1", 1050, chargeIntent(1050)), call)
	if err != nil && e.sabotage == SabotageDrop409Receipt {
		// ...and having "failed", the unsafe runtime tries once more anew.
		_, _ = callUnclaimed(ctx, a, chargeCall(e.vendor.URL(), 1050, true))
	}
	objs := e.vendor.Objects()
	c.expect(err == nil, "call: %v", err)
	c.expect(out.Row.Status == ledger.StatusSucceeded, "row is %q, want succeeded", out.Row.Status)
	c.expect(len(objs) > 0 && out.Row.UpstreamReceiptID == objs[0].ID,
		"row receipt %q, want the object the 409 named", out.Row.UpstreamReceiptID)
	sideEffects(e, &r, c)
	return c.result(r)
}

// 5. The vendor commits and answers 500: the row is unknown, and since
// Stripe replays a stored 500 a retry would learn nothing, so the ledger
// says wait. The agent's retry waits (on NATS for the Go runtime, by long
// poll for the others); the vendor's signed webhook with our local id
// closes the row and wakes it. One object, one POST.
func serverErrorThenWebhook(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	a, b := e.agent("a"), e.agent("b")
	call := chargeCall(e.vendor.URL(), 1050, true)
	e.vendor.Plan(1, Fault500)
	claim := e.chargeClaim("run_d5", "call_1", 1050, chargeIntent(1050))
	first, err := a.do(ctx, claim, call)
	c.expect(errors.Is(err, client.ErrUnsettled), "first call: want unsettled after a 500, got %v", err)
	c.expect(first.Row.Status == ledger.StatusUnknown, "row after the 500 is %q, want unknown", first.Row.Status)

	claim.ToolCallID = "call_2"
	if e.sabotage == SabotageFreshKeyAfter5xx {
		claim.Key = freshKey("after500")
	}
	retry := goRun(func() (client.Outcome, error) { return b.do(ctx, claim, call) })
	waited := waitEither(ctx, e.watch.answered(b.name, ledger.DecisionWait), retry)
	c.expect(waited, "the retry was never told to wait")
	objs := e.vendor.Objects()
	if c.expect(len(objs) > 0, "vendor holds no object") {
		status, result, err := e.webhook(ctx, objs[0].ID)
		c.expect(err == nil && status == http.StatusOK && result == string(ledger.IngestAccepted),
			"webhook answered %d %q (%v), want 200 accepted", status, result, err)
	}
	<-retry.done
	c.expect(retry.err == nil && !retry.out.Called, "retry: called=%v err=%v, want the receipt without a call", retry.out.Called, retry.err)
	row, err := e.ledger.Get(ctx, first.Key)
	c.expect(err == nil && row.Status == ledger.StatusSucceeded && row.Resolution != nil && row.Resolution.Source == ledger.SourceWebhook,
		"row %s (%v), want succeeded by the webhook", row.Status, err)
	c.expect(len(objs) > 0 && row.UpstreamReceiptID == objs[0].ID, "row receipt %q", row.UpstreamReceiptID)
	c.expect(e.vendor.Posts() == 1, "vendor saw %d posts, want 1", e.vendor.Posts())
	sideEffects(e, &r, c)
	return c.result(r)
}

// 6. A business key is reused for a different amount: refused with 422
// fingerprint_mismatch, and the vendor is not called.
func sameKeyDifferentAmount(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	a := e.agent("a")
	claim := e.chargeClaim("run_d6", "call_1", 1050, chargeIntent(1050))
	claim.Key = "order_1042"
	_, err := a.do(ctx, claim, chargeCall(e.vendor.URL(), 1050, true))
	c.expect(err == nil, "first charge: %v", err)

	other := e.chargeClaim("run_d6", "call_2", 2000, chargeIntent(2000))
	other.Key = "order_1042"
	var second client.Outcome
	if e.sabotage == SabotageSkipClaim {
		_, err = callUnclaimed(ctx, a, chargeCall(e.vendor.URL(), 2000, true))
		second.Called = true
	} else {
		second, err = a.do(ctx, other, chargeCall(e.vendor.URL(), 2000, true))
	}
	var apiErr *client.Error
	c.expect(errors.Is(err, client.ErrFingerprintMismatch) && errors.As(err, &apiErr) && apiErr.Status == http.StatusUnprocessableEntity,
		"second charge: %v, want 422 fingerprint_mismatch", err)
	c.expect(!second.Called, "the vendor was called for the refused intent")
	c.expect(e.vendor.Posts() == 1, "vendor saw %d posts, want 1", e.vendor.Posts())
	sideEffects(e, &r, c)
	return c.result(r)
}

// 7. Compensation is refused (409) while the charge is pending; after it
// succeeds, two refund requests at once make one refund.
func compensationOnce(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 2}, &checker{} // the charge and one refund
	a := e.agent("a")
	e.vendor.Plan(1, FaultHold)
	ch := goRun(func() (client.Outcome, error) {
		return a.do(ctx, e.chargeClaim("run_d7", "call_1", 1050, chargeIntent(1050)), chargeCall(e.vendor.URL(), 1050, true))
	})
	select {
	case <-e.watch.answered(a.name, ledger.DecisionProceed):
	case <-ch.done:
	case <-ctx.Done():
	}
	key := e.watch.key(a.name, ledger.DecisionProceed)
	if err := e.vendor.WaitPosts(ctx, 1); err != nil {
		c.expect(false, "charge never reached the vendor: %v", err)
	}
	// The charge is in flight (committed at the vendor, answer held): the
	// row is pending and a refund must be refused.
	if e.sabotage != SabotageCompensateUnclaimed {
		_, err := a.compensate(ctx, key, "refund")
		c.expect(errors.Is(err, client.ErrCompensationPending), "refund while pending: %v, want 409 compensation_pending", err)
	}
	e.vendor.Release()
	<-ch.done
	c.expect(ch.err == nil && ch.out.Row.Status == ledger.StatusSucceeded, "charge: %s %v", ch.out.Row.Status, ch.err)
	refund := refundCall(e.vendor.URL(), ch.out.ReceiptID())

	// Two refund requests at once (two agents, or a retried tool call).
	var wg sync.WaitGroup
	rows := make([]ledger.Row, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			if e.sabotage == SabotageCompensateUnclaimed {
				_, errs[i] = callUnclaimed(ctx, a, refund)
				return
			}
			rows[i], errs[i] = compensate(ctx, a, refund, key)
		})
	}
	wg.Wait()
	for i := range 2 {
		c.expect(errs[i] == nil, "refund %d: %v", i+1, errs[i])
	}
	if e.sabotage != SabotageCompensateUnclaimed {
		c.expect(rows[0].Key == rows[1].Key && rows[0].Status == ledger.StatusSucceeded && rows[1].Status == ledger.StatusSucceeded,
			"refund rows %s/%s %s/%s, want one succeeded compensation row", rows[0].Key, rows[0].Status, rows[1].Key, rows[1].Status)
		// A third request finds the first compensation row.
		resp, err := a.compensate(ctx, key, "refund")
		c.expect(err == nil && resp.Decision == ledger.DecisionReplay && resp.Key() == rows[0].Key,
			"third refund request: %s %v, want replay of the first", resp.Decision, err)
	}
	c.expect(e.vendor.Count("refund") == 1, "vendor made %d refunds, want 1", e.vendor.Count("refund"))
	sideEffects(e, &r, c)
	return c.result(r)
}

// compensate is the runtime's refund: claim the compensation key; call on
// proceed or retry_same_key and report; on wait, wait for the row to settle;
// on replay, the stored row is the answer.
func compensate(ctx context.Context, a *agent, refund vendorCall, key string) (ledger.Row, error) {
	resp, err := a.compensate(ctx, key, "refund")
	if err != nil {
		return ledger.Row{}, err
	}
	if resp.Row == nil {
		return ledger.Row{}, fmt.Errorf("compensation decided %s without a row", resp.Decision)
	}
	row := *resp.Row
	switch resp.Decision {
	case ledger.DecisionProceed, ledger.DecisionRetrySameKey:
		res, callErr := a.call(ctx, refund, row.Key, row.MetadataLocalID)
		rep := client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: res.HTTPStatus, ReceiptID: res.ReceiptID, Headers: res.Headers}
		if res.HTTPStatus == 0 {
			rep = client.OutcomeReport{Kind: ledger.OutcomeNetworkError}
		}
		row, err = a.report(ctx, row.Key, rep)
		if err != nil {
			return row, errors.Join(err, callErr)
		}
	case ledger.DecisionWait:
		err = poll(ctx, func() (bool, error) {
			var gerr error
			row, gerr = a.get(ctx, row.Key)
			return !row.Status.Open(), gerr
		})
		if err != nil {
			return row, fmt.Errorf("wait for compensation %s: %w", row.Key, err)
		}
	case ledger.DecisionReplay:
	default:
		return row, fmt.Errorf("compensation decided %s", resp.Decision)
	}
	return row, nil
}

// hookSeen is what drill 8's vendor hook saw, handed to the drill.
type hookSeen struct {
	status int
	result string
	err    error
	before ledger.Row
}

// 8. The vendor's webhook lands while the row is pending (the vendor has
// committed, the runtime has not reported): the webhook settles the row;
// the late report changes nothing. One transition, one event on NATS.
func webhookBeforeReport(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 1}, &checker{}
	a := e.agent("a")
	seen := make(chan hookSeen, 1)
	// The vendor's webhook beats the answer, so the runtime's own report.
	e.vendor.OnCommit(1, func(ctx context.Context, key string, obj Object) {
		var h hookSeen
		h.status, h.result, h.err = e.webhook(ctx, obj.ID)
		h.before, _ = e.ledger.Get(ctx, key)
		seen <- h
	})
	out, err := a.do(ctx, e.chargeClaim("run_d8", "call_1", 1050, chargeIntent(1050)),
		chargeCall(e.vendor.URL(), 1050, e.sabotage != SabotageNoLocalID))
	var h hookSeen
	select {
	case h = <-seen:
	default:
		h.err = errors.New("the vendor never committed")
	}
	c.expect(h.err == nil && h.status == http.StatusOK && h.result == string(ledger.IngestAccepted),
		"webhook answered %d %q (%v), want 200 accepted", h.status, h.result, h.err)
	c.expect(h.before.Status == ledger.StatusSucceeded && h.before.Resolution != nil && h.before.Resolution.Source == ledger.SourceWebhook,
		"row before the report is %q, want succeeded by the webhook", h.before.Status)
	c.expect(err == nil && out.Row.Status == ledger.StatusSucceeded, "late report: %s %v", out.Row.Status, err)
	c.expect(out.Row.Resolution != nil && out.Row.Resolution.Source == ledger.SourceWebhook &&
		out.Row.SucceededAt.Equal(h.before.SucceededAt), "the late report moved the row again")
	counts, err := e.eventCounts(ctx, "run_d8")
	c.expect(err == nil && len(counts) == 1 && counts[string(ledger.StatusSucceeded)] == 1,
		"events on NATS %v (%v), want one succeeded", counts, err)
	sideEffects(e, &r, c)
	return c.result(r)
}

// forgetPaged is the sabotaged resolver store: its due rows lose paged_at,
// so the resolver does not know it paged.
type forgetPaged struct{ resolver.Store }

func (f forgetPaged) Due(ctx context.Context, now time.Time, limit int) ([]ledger.Row, error) {
	rows, err := f.Store.Due(ctx, now, limit)
	for i := range rows {
		rows[i].PagedAt = time.Time{}
	}
	return rows, err
}

// 9. The call dies on a broken connection (the vendor never saw it): the
// row is unknown. Its replay window closes with nothing known; the
// resolver (Stripe lookup against the fake vendor, PagerDuty pager against
// a fake) passes several times: one page, one escalated event.
func pageOnce(ctx context.Context, e *env) Result {
	r, c := Result{Expected: 0}, &checker{}
	a := e.agent("a")
	e.vendor.Plan(1, FaultDrop)
	out, err := a.do(ctx, e.chargeClaim("run_d9", "call_1", 1050, chargeIntent(1050)), chargeCall(e.vendor.URL(), 1050, true))
	c.expect(errors.Is(err, client.ErrUnsettled) && out.Row.Status == ledger.StatusUnknown,
		"call on a dropped connection: %s %v, want unknown", out.Row.Status, err)

	pd := NewPagerDuty()
	defer pd.Close()
	pager, err := paging.NewPagerDuty(paging.PagerDutyOptions{URL: pd.URL(), RoutingKey: "drill_routing_key"})
	if err != nil {
		return c.abort(r, err)
	}
	lookup, err := resolver.NewStripe(resolver.StripeOptions{APIBase: e.vendor.URL(), APIKey: "sk_test_drill", Now: e.clock.Now})
	if err != nil {
		return c.abort(r, err)
	}
	var store resolver.Store = e.store
	if e.sabotage == SabotageForgetPaged {
		store = forgetPaged{store}
	}
	res := resolver.New(store, resolver.Options{
		Lookups: map[string]resolver.Lookup{"stripe": lookup}, Pager: pager,
		Interval: time.Minute, MinBackoff: time.Minute, MaxBackoff: time.Hour, SearchLag: time.Minute,
		PageTimeout: 5 * time.Second, Now: e.clock.Now, Logger: e.log,
	})
	// Nobody learned anything while the vendor's replay window was open.
	e.clock.Advance(replayWindow + time.Hour)
	const passes = 4
	for range passes {
		if err := res.Pass(ctx); err != nil {
			c.expect(false, "resolver pass: %v", err)
		}
		e.clock.Advance(2 * time.Hour) // past any backoff: the row is due again
	}
	triggers := pd.Triggers()
	c.expect(len(triggers) == 1 && triggers[0] == paging.DedupKey(tenant, out.Key),
		"pagerduty got %d triggers in %d passes, want 1 for %s", len(triggers), passes, paging.DedupKey(tenant, out.Key))
	row, err := e.ledger.Get(ctx, out.Key)
	c.expect(err == nil && !row.PagedAt.IsZero() && row.Status == ledger.StatusUnknown,
		"row %s paged_at=%v (%v), want unknown and paged", row.Status, row.PagedAt, err)
	counts, err := e.eventCounts(ctx, "run_d9")
	c.expect(err == nil && counts[ledger.EventEscalated] == 1, "events on NATS %v (%v), want one escalated", counts, err)
	keys := e.vendor.Keys()
	c.expect(!slices.ContainsFunc(keys, func(k string) bool { return k != out.Key }), "vendor saw keys %v", keys)
	sideEffects(e, &r, c)
	return c.result(r)
}
