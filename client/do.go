package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
)

// Result is what one vendor call answered: its HTTP status, the vendor's
// object id, and the vendor headers the ledger's classification reads
// (Idempotent-Replayed, Stripe-Should-Retry). A call that got no answer
// returns an error and a zero Result.
type Result struct {
	HTTPStatus int
	ReceiptID  string
	Headers    map[string]string
}

// CallFunc makes the vendor call for one attempt. It must send key as the
// vendor's idempotency key — key is the row's vendor_key: the ledger key,
// or the digest of it the vendor's profile asks for (Square's 45
// characters, Linear's UUID) — where the vendor's profile places it, and
// localID in the vendor's metadata.
// StripeBackend does both from ctx; the Transport sets only the key (where
// metadata goes depends on the vendor's body: metadata[metadata_local_id]
// for Stripe, custom_id for PayPal), so the call puts localID there itself. It returns the vendor's
// answer; an error with a zero HTTPStatus means no answer arrived (a timeout
// or a broken connection), an error with a status is the vendor's refusal.
type CallFunc func(ctx context.Context, key, localID string) (Result, error)

// Outcome is how Do ended.
type Outcome struct {
	// Decision is the claim decision Do acted on last (proceed,
	// retry_same_key, replay or stop; a wait is followed by another decision).
	Decision ledger.Decision
	Key      string
	LocalID  string
	// VendorKey is the row's vendor_key: what the call sent as the
	// vendor's idempotency key (the key itself unless the vendor's profile
	// shortens it).
	VendorKey string
	// Row is the row as Do last saw it: after the report, or as replayed.
	Row ledger.Row
	// Called is true when Do called the vendor; Result is then its answer.
	Called bool
	Result Result
	// Kind is the outcome kind reported for the call.
	Kind ledger.OutcomeKind
	// Replayed is true when the receipt came from the ledger without a call.
	Replayed bool
	// Waited is true when the key was in flight elsewhere and Do waited.
	Waited bool
	// AwaitedApproval is true when the tool's gate asked for a human's
	// approval (await_approval) and Do waited for the decision: a call
	// made after it is the one call the grant allowed.
	AwaitedApproval bool
	// Queued is true when the claim answered queued: the outbox worker
	// makes the call, never this Do (Called is false). With WithWaitQueued
	// Do waited for the worker's result, and Row is the row it settled;
	// without, Do returned the *QueuedError with the row as queued.
	Queued bool
}

// ReceiptID is the vendor object id of the side effect, if known.
func (o Outcome) ReceiptID() string {
	if o.Row.UpstreamReceiptID != "" {
		return o.Row.UpstreamReceiptID
	}
	return o.Result.ReceiptID
}

// Do runs one tool call under the ledger:
//
//   - it claims the intent's key;
//   - on proceed or retry_same_key it calls call with the key and local id
//     (ctx carries them, see WithKey), classifies what happened — an answer
//     (status, receipt, vendor headers), a timeout, a network error — and
//     reports it, resending the same report if it is lost;
//   - on replay it returns the stored receipt without calling;
//   - on wait it waits for the row to settle, on NATS when WithNATS was given
//     (with the API as the fallback), else by long-polling the claim, and
//     then acts on the new decision;
//   - on stop it returns a *StopError;
//   - on await_approval (the tool's gate asks a human, docs/architecture.md
//     §11) it waits for the decision as for a wait — on NATS the approved,
//     denied and approval_expired events wake it — and then acts on the
//     key's next answer: proceed (the one call the grant allows, with the
//     same key; Outcome.AwaitedApproval), or stop with code
//     approval_denied or approval_expired (*StopError). A ctx that ends
//     first returns an *AwaitingApprovalError (ErrAwaitingApproval, and
//     ErrUnsettled): the row stays awaiting, and a later Do of the same
//     intent picks it up;
//   - on queued (an outbox tool: the runtime's Worker makes the call) it
//     calls nothing and returns a *QueuedError (ErrQueued, and
//     ErrUnsettled: the row is open; Outcome.Queued) naming the key, row
//     and run, for the runtime to park on — or, with WithWaitQueued, waits
//     until the worker's call settles the row and returns as a replay does
//     (Outcome.Queued), or a *StopError. A ctx that ends while it waits
//     returns the *QueuedError.
//
// A nil error means the side effect happened (Row.Status succeeded). A
// *StopError means the ledger or the vendor refused the intent. A
// *UnsettledError means nobody knows yet (timeout, 5xx, a lost report): the
// row stays pending or unknown, and the resolver, a webhook or a later Do
// with the same intent closes it — never call the vendor again under a new
// key. If the process dies between call and report, the row stays pending
// the same way: its lease (pending_until) runs out, then a retry of the same
// intent gets retry_same_key (same key, so the vendor replays) or the
// resolver settles it from vendor truth. A *QueuedError and an
// *AwaitingApprovalError match ErrUnsettled as well: the row is open and
// not this call's to make now, so errors.Is(err, ErrUnsettled) parks the
// run on all three, as an Unsettled does in the Python and TypeScript
// clients.
//
// A panic in call is reported as a network error (the row becomes unknown)
// and then re-raised. A call whose write the keyed Transport or
// StripeBackend refused before sending it (ErrNoKey: the call dropped ctx)
// is reported not at all: Do returns ErrNoKey and the row stays pending
// under its lease. An *UnsettledError matching ErrEscalated means a human
// was paged for the key while Do waited.
//
// The tool call is traced (tracing.go): Do annotates the span in ctx, or
// starts one, and every request it sends carries it.
func (c *Client) Do(ctx context.Context, claim ClaimRequest, call CallFunc) (Outcome, error) {
	ctx, end := traceTool(ctx, claim)
	out, err := c.doTool(ctx, claim, call)
	end(out, err)
	return out, err
}

// doTool is Do, inside its span.
func (c *Client) doTool(ctx context.Context, claim ClaimRequest, call CallFunc) (Outcome, error) {
	resp, err := c.Claim(ctx, claim)
	if err != nil {
		return Outcome{}, err
	}
	waited, awaited, queued := false, false, false
	for {
		out := outcomeOf(resp)
		out.Waited, out.AwaitedApproval, out.Queued = waited, awaited, queued
		c.log.DebugContext(ctx, "claim decided", "key", out.Key, "run_id", claim.RunID, "decision", resp.Decision)
		switch resp.Decision {
		case ledger.DecisionProceed, ledger.DecisionRetrySameKey:
			return c.attempt(ctx, out, call)
		case ledger.DecisionReplay:
			out.Replayed = true
			out.Result = Result{HTTPStatus: resp.Row.LastHTTPStatus, ReceiptID: resp.Row.UpstreamReceiptID}
			return out, nil
		case ledger.DecisionStop:
			return out, &StopError{Code: resp.Code, Key: out.Key, Row: resp.Row}
		case ledger.DecisionWait:
			if resp.Row == nil {
				return out, fmt.Errorf("claim: wait without a row")
			}
			waited = true
			if resp, err = c.waitSettled(ctx, claim, resp); err != nil {
				return out, err
			}
		case ledger.DecisionAwaitApproval:
			if resp.Row == nil {
				return out, fmt.Errorf("claim: await_approval without a row")
			}
			awaited = true
			out.AwaitedApproval = true
			c.log.InfoContext(ctx, "call waits for approval", "key", out.Key, "run_id", claim.RunID, "approval_id", approvalID(resp.Row))
			if resp, err = c.waitSettled(ctx, claim, resp); err != nil {
				return out, err
			}
		case ledger.DecisionQueued:
			if resp.Row == nil {
				return out, fmt.Errorf("claim: queued without a row")
			}
			qe := &QueuedError{Key: out.Key, RunID: resp.Row.RunID, Row: *resp.Row}
			queued = true
			out.Queued = true // on every return below, the *QueuedError's included
			if !c.waitQueued {
				return out, qe
			}
			if resp, err = c.waitWorker(ctx, claim, qe); err != nil {
				return out, err
			}
			if resp.Decision == ledger.DecisionProceed || resp.Decision == ledger.DecisionRetrySameKey {
				// Never: an outbox row's agent claims answer queued until it
				// settles. A call here would race the worker.
				return out, fmt.Errorf("claim of queued key %s answered %s", out.Key, resp.Decision)
			}
		default:
			return out, fmt.Errorf("claim: unknown decision %q", resp.Decision)
		}
	}
}

func outcomeOf(resp ClaimResponse) Outcome {
	out := Outcome{Decision: resp.Decision}
	if resp.Row != nil {
		out.Row = *resp.Row
		out.Key, out.LocalID, out.VendorKey = resp.Row.Key, resp.Row.MetadataLocalID, resp.Row.WireKey()
	}
	return out
}

// attempt calls the vendor once and reports what happened. A panic in
// call is reported (see attemptCaught) and then re-raised.
func (c *Client) attempt(ctx context.Context, out Outcome, call CallFunc) (Outcome, error) {
	out, p, err := c.attemptCaught(ctx, out, call)
	if p != nil {
		panic(p.value)
	}
	return out, err
}

// callPanic is a call's panic caught by attemptCaught, with the stack
// where it was raised.
type callPanic struct {
	value any
	stack []byte
}

// attemptCaught is attempt returning a panic of call instead of raising
// it, after reporting it as a network error: the Worker, which must not
// die of one handler's panic, recovers it per item.
func (c *Client) attemptCaught(ctx context.Context, out Outcome, call CallFunc) (_ Outcome, _ *callPanic, err error) {
	out.Called = true
	ck := CallKey{Key: out.Key, LocalID: out.LocalID, VendorKey: out.VendorKey}
	cctx := WithCallKey(ctx, ck)
	if c.callTimeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, c.callTimeout)
		defer cancel()
	}
	res, panicked, callErr := runCall(cctx, call, ck.Wire(), out.LocalID)
	if panicked != nil {
		// The vendor may have committed before the panic: report unknown so
		// the row leaves its lease and the resolver looks.
		_, _ = c.report(ctx, out.Key, OutcomeReport{Kind: ledger.OutcomeNetworkError, Attempt: out.Row.Attempt})
		return out, panicked, fmt.Errorf("the call panicked: %v", panicked.value)
	}
	if res.HTTPStatus == 0 && errors.Is(callErr, ErrNoKey) {
		// The keyed transport or backend refused the write before sending
		// it: nothing reached the vendor, so nothing is reported (a
		// network_error would make the row unknown and send the resolver
		// after a call never made). The row stays pending under its lease.
		out.Called = false
		return out, nil, fmt.Errorf("the call sent nothing: %w", callErr)
	}
	rep := classify(res, callErr)
	rep.Attempt = out.Row.Attempt
	out.Result, out.Kind = res, rep.Kind
	if rep.Kind != ledger.OutcomeResponse {
		c.log.WarnContext(ctx, "vendor call got no answer", "key", out.Key, "kind", rep.Kind, "err", callErr)
	}
	row, err := c.report(ctx, out.Key, rep)
	if err != nil {
		return out, nil, &UnsettledError{Key: out.Key, Err: errors.Join(fmt.Errorf("%w: %w", ErrReportFailed, err), callErr)}
	}
	out.Row = row
	switch row.Status {
	case ledger.StatusSucceeded:
		if callErr != nil {
			// The vendor said 2xx (or 409 with a receipt) but the call still
			// failed, e.g. decoding its body: the side effect happened.
			c.log.WarnContext(ctx, "vendor call succeeded with an error", "key", out.Key, "err", callErr)
		}
		return out, nil, nil
	case ledger.StatusFailedPoison:
		if callErr == nil {
			callErr = fmt.Errorf("vendor answered %d", res.HTTPStatus)
		}
		return out, nil, &StopError{Code: ledger.CodeFailedPoison, Key: out.Key, Row: &row, Err: callErr}
	}
	if callErr == nil {
		callErr = fmt.Errorf("vendor answered %d", res.HTTPStatus)
	}
	return out, nil, &UnsettledError{Key: out.Key, Status: row.Status, Err: callErr}
}

// runCall runs call, catching a panic (and its stack) so it can be
// reported first.
func runCall(ctx context.Context, call CallFunc, key, localID string) (res Result, panicked *callPanic, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = &callPanic{value: p, stack: debug.Stack()}
		}
	}()
	res, err = call(ctx, key, localID)
	return res, nil, err
}

// classify turns a call's return into the report. An answer with a status
// is a response, whatever the error; without one, a deadline or a net
// timeout is a timeout and anything else a network error (both leave the
// row unknown). A nil error without a status but with a receipt is a 200 (an
// SDK that hides the status); with neither it is unknown, never a success.
func classify(res Result, err error) OutcomeReport {
	r := OutcomeReport{HTTPStatus: res.HTTPStatus, ReceiptID: res.ReceiptID, Headers: res.Headers}
	switch {
	case res.HTTPStatus != 0:
		r.Kind = ledger.OutcomeResponse
	case err == nil && res.ReceiptID != "":
		r.Kind, r.HTTPStatus = ledger.OutcomeResponse, 200
	case isTimeout(err):
		r.Kind = ledger.OutcomeTimeout
	default:
		r.Kind = ledger.OutcomeNetworkError
	}
	if r.Kind != ledger.OutcomeResponse {
		r.HTTPStatus = 0
	}
	return r
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// report delivers an outcome with its own deadline, detached from ctx's
// cancellation: a call that used up the caller's deadline is exactly the one
// whose timeout must reach the ledger.
func (c *Client) report(ctx context.Context, key string, rep OutcomeReport) (ledger.Row, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.reportTimeout)
	defer cancel()
	return c.ReportOutcome(rctx, key, rep)
}

// waitSettled waits until a claim of the row answers something other than
// wait, or ctx ends.
//
// The row may be waiting for an approval (await_approval, then wait until
// a human decides): a ctx that ends first then returns an
// *AwaitingApprovalError, else an *UnsettledError.
func (c *Client) waitSettled(ctx context.Context, claim ClaimRequest, last ClaimResponse) (ClaimResponse, error) {
	row := last.Row
	if !row.PagedAt.IsZero() {
		return ClaimResponse{}, escalated(*row)
	}
	if c.js != nil {
		resp, fallback, err := c.waitNATS(ctx, claim, *row)
		if err != nil || !fallback {
			return resp, err
		}
	}
	for {
		start := time.Now()
		resp, err := c.ClaimWait(ctx, claim, c.wait)
		if err == nil && resp.Row != nil {
			row = resp.Row
		}
		if err == nil && resp.Decision != ledger.DecisionWait {
			return resp, nil
		}
		if ctx.Err() != nil {
			return ClaimResponse{}, waitEnded(*row, ctx.Err())
		}
		var ae *Error
		switch {
		case errors.As(err, &ae) && !ae.retryable():
			// A revoked token, a key gone: asking again cannot help.
			return ClaimResponse{}, err
		case err == nil && resp.Row != nil && !resp.Row.PagedAt.IsZero():
			return ClaimResponse{}, escalated(*resp.Row)
		case err == nil && time.Since(start) >= c.poll:
			continue // a long poll that waited: ask again at once
		case err != nil:
			// do() already retried; pause before the next long poll.
			c.log.WarnContext(ctx, "long poll failed", "key", row.Key, "err", err)
		}
		// A failed poll, or a wait answered at once (a tiny WithWait, a
		// server shutting down): pause so the loop never spins.
		t := time.NewTimer(c.poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ClaimResponse{}, waitEnded(*row, ctx.Err())
		}
	}
}

// waitEnded is Do's answer when ctx ends while it waits on row: an
// *AwaitingApprovalError while the row waits for a human (nothing was
// called), else an *UnsettledError.
func waitEnded(row ledger.Row, err error) error {
	if awaitingApproval(row) {
		return &AwaitingApprovalError{Key: row.Key, ApprovalID: row.Approval.ID, Row: row, Err: err}
	}
	return &UnsettledError{Key: row.Key, Status: row.Status, Err: err}
}

// awaitingApproval reports whether row waits for a human's decision: its
// approval is requested and no call was ever granted.
func awaitingApproval(row ledger.Row) bool {
	return row.Approval != nil && row.Approval.State == ledger.ApprovalRequested &&
		row.Attempt == 0 && row.Status == ledger.StatusPending
}

func approvalID(row *ledger.Row) string {
	if row == nil || row.Approval == nil {
		return ""
	}
	return row.Approval.ID
}

// escalated is Do's answer for a row a human was paged for: its replay
// window closed while it was open, and only the human (or a late webhook)
// will settle it. It matches ErrUnsettled and ErrEscalated.
func escalated(row ledger.Row) error {
	return &UnsettledError{Key: row.Key, Status: row.Status, Err: ErrEscalated}
}

// waitNATS waits with events.Await. Its ledger check claims again (without
// ?wait): a row can leave wait without a resolution event (an unknown row
// whose lease ran out answers retry_same_key), and a lost event must not
// strand the run. An escalated event ends the wait with ErrEscalated. It
// reports fallback when the caller should go on waiting by long polls: the
// event ran ahead of the API's view.
func (c *Client) waitNATS(ctx context.Context, claim ClaimRequest, row ledger.Row) (ClaimResponse, bool, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var moved *ClaimResponse
	var fatal error
	check := func(cctx context.Context) (ledger.Event, bool, error) {
		resp, err := c.Claim(cctx, claim)
		var ae *Error
		if errors.As(err, &ae) && !ae.retryable() {
			// A revoked token, a key gone: waiting longer cannot help.
			fatal = err
			cancel()
			return ledger.Event{}, false, err
		}
		if err != nil {
			return ledger.Event{}, false, err
		}
		if resp.Decision != ledger.DecisionWait {
			// Await runs the check on the calling goroutine, so moved is
			// read after Await returns without a race.
			moved = &resp
			cancel()
		}
		return ledger.Event{}, false, nil
	}
	opts := []events.AwaitOption{events.WithLedger(check), events.WithPollInterval(c.poll)}
	if awaitingApproval(row) {
		// A grant settles nothing, but it is what this wait is for: the
		// key's next claim proceeds.
		opts = append(opts, events.WithWakeOn(ledger.EventApproved))
	}
	opts = append(opts, c.awaitStream()...)
	ev, err := events.Await(actx, c.js, row.Tenant, row.RunID, row.Key, opts...)
	if moved != nil {
		return *moved, false, nil
	}
	if fatal != nil {
		return ClaimResponse{}, false, fatal
	}
	if err != nil {
		if ctx.Err() != nil {
			return ClaimResponse{}, false, waitEnded(row, ctx.Err())
		}
		return ClaimResponse{}, false, fmt.Errorf("await %s: %w", row.Key, err)
	}
	c.log.DebugContext(ctx, "resolution event", "key", row.Key, "status", ev.Status)
	if ev.Status == ledger.EventEscalated {
		c.log.WarnContext(ctx, "key escalated to a human", "key", row.Key, "run_id", row.RunID)
		return ClaimResponse{}, false, escalated(row)
	}
	// Settled (or, for an approval, granted): the claim now answers
	// replay, stop or, after a grant, proceed.
	resp, err := c.Claim(ctx, claim)
	if err != nil {
		return ClaimResponse{}, false, err
	}
	if resp.Decision == ledger.DecisionWait {
		// The event ran ahead of this replica's view; the long poll catches up.
		return ClaimResponse{}, true, nil
	}
	return resp, false, nil
}

// awaitStream are the Await options naming the client's event stream.
func (c *Client) awaitStream() []events.AwaitOption {
	if len(c.streamOpts) == 2 {
		return []events.AwaitOption{events.WithStream(c.streamOpts[0]), events.WithSubjectPrefix(c.streamOpts[1])}
	}
	return nil
}

// waitWorker waits until the queued key's row is closed — the worker
// called and reported, or the resolver or a human settled it — and
// returns the agent's claim of it then (replay or stop). It reads the row
// (an agent's claim of an open outbox row answers queued at once, so a
// long poll cannot wait): on NATS it wakes on the key's resolution event,
// with the row read every poll interval as the fallback; else it reads
// the row every poll interval. A row a human was paged for ends the wait
// (ErrEscalated); a ctx that ends first returns q with ctx's error.
func (c *Client) waitWorker(ctx context.Context, claim ClaimRequest, q *QueuedError) (ClaimResponse, error) {
	for {
		row, err := c.awaitClosed(ctx, q.Row)
		if err != nil {
			if ctx.Err() != nil {
				q.Err = ctx.Err()
				return ClaimResponse{}, q
			}
			return ClaimResponse{}, err
		}
		if row.Status.Open() {
			return ClaimResponse{}, escalated(row)
		}
		resp, err := c.Claim(ctx, claim)
		if err != nil {
			return ClaimResponse{}, err
		}
		if resp.Decision != ledger.DecisionQueued {
			return resp, nil
		}
		// The claim reached a replica that has not seen the close yet:
		// pause, or the loop would spin (the row read shows it closed, so
		// awaitClosed returns at once).
		q.Row = row
		t := time.NewTimer(c.poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			q.Err = ctx.Err()
			return ClaimResponse{}, q
		}
	}
}

// awaitClosed returns row once it is closed, or open and paged (a human
// was paged: only the human or a late webhook settles it).
func (c *Client) awaitClosed(ctx context.Context, row ledger.Row) (ledger.Row, error) {
	done := func(r ledger.Row) bool { return !r.Status.Open() || !r.PagedAt.IsZero() }
	if done(row) {
		return row, nil
	}
	var last *ledger.Row
	var fatal error
	read := func(cctx context.Context) bool {
		r, err := c.Get(cctx, row.Key)
		var ae *Error
		switch {
		case errors.As(err, &ae) && !ae.retryable():
			fatal = err
			return true
		case err != nil:
			c.log.WarnContext(ctx, "read of queued row failed", "key", row.Key, "err", err)
			return false
		}
		if done(r) {
			last = &r
			return true
		}
		return false
	}
	if c.js != nil {
		actx, cancel := context.WithCancel(ctx)
		check := func(cctx context.Context) (ledger.Event, bool, error) {
			if read(cctx) {
				cancel() // Await runs the check on its caller's goroutine
			}
			return ledger.Event{}, false, nil
		}
		opts := append([]events.AwaitOption{events.WithLedger(check), events.WithPollInterval(c.poll)}, c.awaitStream()...)
		_, err := events.Await(actx, c.js, row.Tenant, row.RunID, row.Key, opts...)
		cancel()
		switch {
		case fatal != nil:
			return row, fatal
		case last != nil:
			return *last, nil
		case ctx.Err() != nil:
			return row, ctx.Err()
		case err != nil:
			c.log.WarnContext(ctx, "await of queued row failed; reading the row", "key", row.Key, "err", err)
		}
		// An event arrived (or Await failed): read the row below.
	}
	t := time.NewTicker(c.poll)
	defer t.Stop()
	for {
		if read(ctx) {
			if fatal != nil {
				return row, fatal
			}
			return *last, nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return row, ctx.Err()
		}
	}
}
