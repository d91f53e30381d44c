package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
)

// WorkItem is one work item of outbox autonomy (docs/architecture.md §11):
// the queued call's identity (the event's key, tenant, run, tool) and
// what the call needs (vendor, class, local id, intent, request envelope,
// expectation, replay window).
type WorkItem struct {
	Key        string
	Tenant     string
	RunID      string
	Tool       string
	ToolCallID string
	ledger.WorkItem
}

// WorkHandler makes the vendor call of one work item, as a CallFunc does:
// it must send key as the vendor's idempotency key and localID in the
// vendor's metadata (ctx carries both, see WithKey: Transport and
// StripeBackend read them from there), and returns the vendor's answer;
// an error with a zero HTTPStatus means no answer arrived.
type WorkHandler func(ctx context.Context, item WorkItem, key, localID string) (Result, error)

// Defaults of a Worker.
const (
	// DefaultWorkerConcurrency is how many items one Worker calls at once.
	DefaultWorkerConcurrency = 4
	// DefaultAckWait is how long JetStream waits for a worker's ack
	// before it hands the item out again; a Worker signals progress
	// while its call runs, so only a dead worker's items come back.
	DefaultAckWait = 30 * time.Second
)

// workerPull bounds one pull request, so a stopping Worker is not held.
const workerPull = 5 * time.Second

// leaseMargin is added to a lease's end before a Worker treats it as
// over: the worker's clock and the server's may differ a little, and a
// lease read as over too early would drop an item whose start answer was
// lost (the row's own lease, granted to a worker that never heard it).
const leaseMargin = time.Second

// Worker takes a tenant's work items from the work stream and makes each
// queued call exactly once: for each item it starts the key (Client.Start:
// proceed once across all workers), calls the tool's handler with the key
// and local id, reports the outcome as Do does (the same classification,
// the same resent report), and acknowledges the item.
//
// Every worker process of the tenant shares one durable pull consumer
// (events.WorkConsumer: worker-<tenant>, filter <prefix>_work.<tenant>.>),
// so each item is held by one worker at a time. Run creates it if missing
// on the open single node; in the account layout (events.AccountLayout)
// the service makes it and Run uses it as it is.
//
// The message only names the key: handle terminates, calling nothing, an
// item that is not a work item, names another tenant, names a key that is
// no row of the tenant, or disagrees with its row (read before the start:
// tool, run, tool call, vendor, class, local id, request, expectation, and
// the intent against the row's fingerprint), and logs why. The handler
// gets the row as start returned it: the request stored on the row, never
// a body taken from the message.
//
// What each start answers decides the item's fate:
//
//   - proceed or retry_same_key: call, report; then ack, unless the row
//     is still pending (a 429, or a 409 without a receipt: the vendor said
//     retry later, the lease ended; or the report was lost, or the call
//     sent nothing): nak with a growing delay, so a later start answers
//     retry_same_key and the call is made again with the same key;
//   - replay or stop (the row is closed), 404 or 409 not_queued (nothing
//     for a worker): ack and skip;
//   - wait at attempt 1 or more while the row's lease is live (another
//     worker is calling; JetStream handed out again an item whose worker
//     died mid-call; or this worker's own start was granted but its answer
//     was lost and the resend found the lease): nak until the lease ends
//     (capped at the max backoff), never a second call under a live lease.
//     When it comes back, the lease holder has reported (replay, stop), or
//     a write_idempotent tool inside its replay window is retried with the
//     same key (retry_same_key: the vendor replays), or
//   - wait at attempt 1 or more after the lease ended (a tool that may not
//     be retried, a closed replay window, a 5xx, a frozen tool): ack and do
//     not call — the row is the resolver's;
//   - wait at attempt 0 (the kill switch covers the tool), an API error
//     that may pass (5xx, 429, no answer), or a tool this worker has no
//     handler for (another worker may): nak with a growing delay.
//
// The item is kept in progress (InProgress every third of the ack wait)
// while its start and its call run. A WorkHandler that panics does not
// kill the worker: the panic is reported as a network error (the row
// becomes unknown, for the resolver), logged at error level with its
// stack, and the item acked.
//
// Run makes the consumer again when it disappears (deleted, or the work
// stream recreated), retrying with a growing delay while it cannot.
//
// A Worker that dies mid-call leaves the row pending under its lease, as a
// runtime that dies in Do does. A Run whose ctx ends stops taking items;
// calls in flight see the ended ctx (reported as a timeout or a network
// error: the row becomes unknown, for the resolver) and Run returns when
// they have reported.
type Worker struct {
	c        *Client
	js       jetstream.JetStream
	tenant   string
	handlers map[string]WorkHandler
	log      *slog.Logger

	concurrency int
	ackWait     time.Duration
	stream      string
	prefix      string
	maxBackoff  time.Duration
}

// WorkerOption configures a Worker.
type WorkerOption func(*Worker)

// WithConcurrency sets how many items the Worker calls at once (default 4).
func WithConcurrency(n int) WorkerOption { return func(w *Worker) { w.concurrency = n } }

// WithAckWait sets the consumer's ack wait (default 30 s): how long an
// item held by a worker that went silent waits before another worker gets
// it (which then finds the lease and does not call).
func WithAckWait(d time.Duration) WorkerOption { return func(w *Worker) { w.ackWait = d } }

// WithWorkerLogger sets the Worker's logger (default: the Client's).
func WithWorkerLogger(l *slog.Logger) WorkerOption { return func(w *Worker) { w.log = l } }

// WithWorkStream names the work stream and the event subject prefix when
// they are not the defaults (RECON_WORK, recon: subjects recon_work.…).
func WithWorkStream(stream, subjectPrefix string) WorkerOption {
	return func(w *Worker) { w.stream, w.prefix = stream, subjectPrefix }
}

// WithMaxBackoff caps the delay of a nak (default 30 s; the first is 1 s
// and each redelivery doubles it).
func WithMaxBackoff(d time.Duration) WorkerOption { return func(w *Worker) { w.maxBackoff = d } }

// NewWorker returns a Worker of tenant's work items that calls through c
// (a client with the tenant's token) and reads the work stream through js
// (a connection with the tenant's credential and inbox prefix:
// ConnectNATS). handlers maps each tool name to its call.
func NewWorker(c *Client, js jetstream.JetStream, tenant string, handlers map[string]WorkHandler, opts ...WorkerOption) (*Worker, error) {
	w := &Worker{
		c: c, js: js, tenant: tenant, handlers: map[string]WorkHandler{}, log: c.log,
		concurrency: DefaultWorkerConcurrency, ackWait: DefaultAckWait,
		stream: events.DefaultWorkStream, prefix: events.DefaultSubjectPrefix, maxBackoff: 30 * time.Second,
	}
	for name, h := range handlers {
		if h == nil {
			return nil, fmt.Errorf("worker: tool %s: nil handler", name)
		}
		w.handlers[name] = h
	}
	for _, o := range opts {
		o(w)
	}
	switch {
	case js == nil:
		return nil, errors.New("worker: no JetStream")
	case ledger.ValidateTenant(tenant) != nil:
		return nil, fmt.Errorf("worker: tenant %q: %w", tenant, events.ErrInvalidTenant)
	case len(w.handlers) == 0:
		return nil, errors.New("worker: no handlers")
	case w.concurrency < 1:
		return nil, errors.New("worker: concurrency must be at least 1")
	case w.ackWait < time.Second:
		return nil, errors.New("worker: ack wait must be at least 1s")
	case w.maxBackoff <= 0:
		return nil, errors.New("worker: max backoff must be positive")
	}
	if err := events.ValidSubjectPrefix(w.prefix); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return w, nil
}

// Consumer returns the shared durable consumer, creating it (or updating
// it to this Worker's ack wait) when needed. In the account layout
// (events.AccountLayout) the tenant's account cannot make it: the create
// finds no responder, and the consumer the service made is used as it is.
func (w *Worker) Consumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := w.js.CreateOrUpdateConsumer(ctx, w.stream, events.WorkConsumerConfig(w.prefix, w.tenant, w.ackWait))
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		cons, err = w.js.Consumer(ctx, w.stream, events.WorkConsumer(w.tenant))
	}
	if err != nil {
		return nil, fmt.Errorf("worker: consumer %s on %s: %w", events.WorkConsumer(w.tenant), w.stream, err)
	}
	return cons, nil
}

// Run takes and calls work items until ctx ends, then waits for the calls
// in flight to report, and returns nil; an error means the consumer could
// not be made at first.
func (w *Worker) Run(ctx context.Context) error {
	cons, err := w.Consumer(ctx)
	if err != nil {
		return err
	}
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 && info.Config.AckWait < w.ackWait {
		// The service's consumer (account layout): keep items in progress
		// within its ack wait, not this Worker's.
		w.log.InfoContext(ctx, "work consumer's ack wait is shorter than the worker's; using it", "ack_wait", info.Config.AckWait)
		w.ackWait = info.Config.AckWait
	}
	ref := &consumerRef{cons: cons}
	var wg sync.WaitGroup
	for range w.concurrency {
		wg.Go(func() { w.pull(ctx, ref) })
	}
	wg.Wait()
	return nil
}

// consumerRef is the consumer the pullers share, made again by the first
// puller that finds it gone.
type consumerRef struct {
	mu   sync.Mutex
	cons jetstream.Consumer
}

func (r *consumerRef) get() jetstream.Consumer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cons
}

// pull takes one item at a time until ctx ends.
func (w *Worker) pull(ctx context.Context, ref *consumerRef) {
	for ctx.Err() == nil {
		cons := ref.get()
		pctx, cancel := context.WithTimeout(ctx, workerPull)
		msg, err := cons.Next(jetstream.FetchContext(pctx))
		cancel()
		switch {
		case err == nil:
			w.handle(ctx, msg)
		case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoMessages):
		case w.consumerGone(ctx, err):
			w.log.WarnContext(ctx, "work consumer gone; making it again", "tenant", w.tenant, "err", err)
			w.renew(ctx, ref, cons)
		default:
			w.log.WarnContext(ctx, "work pull failed", "tenant", w.tenant, "err", err)
			sleep(ctx, time.Second) // a bus that is down must not spin the loop
		}
	}
}

// consumerGone reports whether a pull failed because the consumer (or
// its stream) no longer exists. A pull of a deleted consumer may fail
// without saying so (no responders, missed heartbeats), so those errors
// look the consumer up.
func (w *Worker) consumerGone(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted),
		errors.Is(err, jetstream.ErrStreamNotFound):
		return true
	case errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, nats.ErrNoResponders):
		lctx, cancel := context.WithTimeout(ctx, workerPull)
		defer cancel()
		_, lerr := w.js.Consumer(lctx, w.stream, events.WorkConsumer(w.tenant))
		return errors.Is(lerr, jetstream.ErrConsumerNotFound) || errors.Is(lerr, jetstream.ErrStreamNotFound)
	}
	return false
}

// renew makes the consumer again, unless another puller already has
// (ref no longer holds old), retrying with a growing delay until it is
// made or ctx ends.
func (w *Worker) renew(ctx context.Context, ref *consumerRef, old jetstream.Consumer) {
	ref.mu.Lock()
	defer ref.mu.Unlock()
	if ref.cons != old {
		return
	}
	for d := time.Second; ctx.Err() == nil; d = min(2*d, w.maxBackoff) {
		cons, err := w.Consumer(ctx)
		if err == nil {
			ref.cons = cons
			w.log.InfoContext(ctx, "work consumer made again", "tenant", w.tenant)
			return
		}
		w.log.WarnContext(ctx, "work consumer could not be made; retrying", "tenant", w.tenant, "err", err, "retry_in", d)
		sleep(ctx, d)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// handle runs one item to its ack or nak. The message only names the key:
// what is called is the ledger's row, as its start returns it. A message
// that is not a work item, names another tenant, or disagrees with the row
// it names is logged and terminated, and nothing is called.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	var ev ledger.Event
	if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.Work == nil || ev.Key == "" {
		// Not a work item: no worker can do anything with it.
		w.log.ErrorContext(ctx, "not a work item; terminated", "subject", msg.Subject(), "err", err)
		w.settle(ctx, msg, "term", "")
		return
	}
	if ev.Tenant != w.tenant {
		w.log.ErrorContext(ctx, "work item of another tenant; terminated, nothing called",
			"subject", msg.Subject(), "item_tenant", ev.Tenant, "key", ev.Key)
		w.settle(ctx, msg, "term", ev.Key)
		return
	}
	log := w.log.With("key", ev.Key, "run_id", ev.RunID, "tool", ev.Tool)
	// Read the row before starting it: a forged item must not take the
	// row's lease (the genuine item would then wait it out).
	row, err := w.c.Get(ctx, ev.Key)
	switch {
	case errors.Is(err, ErrNotFound):
		log.WarnContext(ctx, "work item names no row of this tenant; terminated")
		w.settle(ctx, msg, "term", ev.Key)
		return
	case err != nil:
		log.WarnContext(ctx, "work item's row could not be read; handed back", "err", err)
		w.nak(ctx, msg, ev.Key)
		return
	}
	if field := mismatch(ev, row); field != "" {
		log.ErrorContext(ctx, "work item disagrees with its row in the ledger; terminated, nothing called", "field", field)
		w.settle(ctx, msg, "term", ev.Key)
		return
	}
	h, ok := w.handlers[row.Tool]
	if !ok {
		log.WarnContext(ctx, "no handler for the work item's tool; handed back")
		w.nak(ctx, msg, "")
		return
	}
	// A start resent after a lost answer, or a slow server, must not
	// outlive the ack wait: JetStream would hand the item out again.
	stop := w.keepAlive(ctx, msg)
	resp, err := w.c.Start(ctx, ev.Key)
	stop()
	item := WorkItem{Key: ev.Key}
	var ae *Error
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNotQueued):
		log.WarnContext(ctx, "work item has nothing to call; skipped", "err", err)
		w.settle(ctx, msg, "ack", item.Key)
		return
	case err != nil && errors.As(err, &ae) && !ae.retryable():
		log.ErrorContext(ctx, "start refused; handed back", "err", err)
		w.nak(ctx, msg, item.Key)
		return
	case err != nil:
		log.WarnContext(ctx, "start failed; handed back", "err", err)
		w.nak(ctx, msg, item.Key)
		return
	}
	switch resp.Decision {
	case ledger.DecisionProceed, ledger.DecisionRetrySameKey:
		if resp.Row == nil || mismatch(ev, *resp.Row) != "" {
			// The row changed between the read and the start: it is the
			// row's lease now, so the item comes back and is checked again.
			log.ErrorContext(ctx, "work item's row changed under its start; handed back")
			w.nak(ctx, msg, item.Key)
			return
		}
		item = itemOf(*resp.Row, ev.Work.Intent)
	case ledger.DecisionWait:
		switch {
		case resp.Row == nil || resp.Row.Attempt == 0:
			log.InfoContext(ctx, "tool frozen; handed back")
			w.nak(ctx, msg, item.Key)
		case time.Now().Before(resp.Row.PendingUntil.Add(leaseMargin)):
			// An attempt is in flight under its lease — another worker's,
			// a dead worker's, or this worker's own start whose answer was
			// lost. Never a second call under it; but the item must outlive
			// it, or a start granted to nobody who heard it loses the call.
			log.InfoContext(ctx, "an attempt in flight under its lease; handed back until it ends",
				"attempt", resp.Row.Attempt, "pending_until", resp.Row.PendingUntil)
			w.nakFor(ctx, msg, item.Key, time.Until(resp.Row.PendingUntil.Add(leaseMargin)))
		default:
			// The lease is over and the row may not be retried (or the tool
			// is frozen): it is the resolver's, never a second call.
			log.InfoContext(ctx, "work item's attempt is over and may not be retried; left to the resolver",
				"attempt", resp.Row.Attempt, "status", resp.Row.Status)
			w.settle(ctx, msg, "ack", item.Key)
		}
		return
	default:
		log.DebugContext(ctx, "work item already settled; skipped", "decision", resp.Decision)
		w.settle(ctx, msg, "ack", item.Key)
		return
	}
	w.call(ctx, msg, item, h, resp, log)
}

// itemOf is the work item a handler gets: the row's, as start returned it,
// with the intent the message carried, which mismatch checked against the
// row's fingerprint.
func itemOf(row ledger.Row, intent json.RawMessage) WorkItem {
	return WorkItem{Key: row.Key, Tenant: row.Tenant, RunID: row.RunID, Tool: row.Tool, ToolCallID: row.ToolCallID,
		WorkItem: ledger.WorkItem{Vendor: row.Vendor, ToolClass: row.ToolClass, MetadataLocalID: row.MetadataLocalID,
			Intent: intent, Request: row.Request, Expect: row.Expect, ReplayWindowUntil: row.ReplayWindowUntil}}
}

// mismatch names the first field in which a work item's message disagrees
// with the row it names ("" when it agrees): a message the relay made from
// the row agrees in all of them.
func mismatch(ev ledger.Event, row ledger.Row) string {
	fp, err := ledger.Fingerprint(ev.Work.Intent)
	switch {
	case row.Key != ev.Key:
		return "key"
	case row.Tenant != ev.Tenant:
		return "tenant"
	case row.Tool != ev.Tool:
		return "tool"
	case row.RunID != ev.RunID:
		return "run_id"
	case row.ToolCallID != ev.ToolCallID:
		return "tool_call_id"
	case row.Vendor != ev.Work.Vendor:
		return "vendor"
	case row.ToolClass != ev.Work.ToolClass:
		return "tool_class"
	case row.MetadataLocalID != ev.Work.MetadataLocalID:
		return "metadata_local_id"
	case !reflect.DeepEqual(row.Request, ev.Work.Request):
		return "request"
	case !reflect.DeepEqual(row.Expect, ev.Work.Expect):
		return "expect"
	case err != nil || fp != row.IntentFingerprint:
		return "intent"
	}
	return ""
}

// call makes the item's call with Do's attempt (classify, report), telling
// JetStream the item is in progress meanwhile, then acks the item, or
// naks it when the row is still pending: the vendor said retry later, the
// report was lost, or nothing was sent.
func (w *Worker) call(ctx context.Context, msg jetstream.Msg, item WorkItem, h WorkHandler, resp ClaimResponse, log *slog.Logger) {
	claim := ClaimRequest{RunID: item.RunID, Tool: item.Tool, ToolCallID: item.ToolCallID, Vendor: item.Vendor, ToolClass: item.ToolClass}
	tctx, end := traceTool(ctx, claim)
	stop := w.keepAlive(ctx, msg)
	out, p, err := w.c.attemptCaught(tctx, outcomeOf(resp), func(cctx context.Context, key, localID string) (Result, error) {
		return h(cctx, item, key, localID)
	})
	stop()
	end(out, err)
	if p != nil {
		// attemptCaught reported a network error: the row is unknown, for
		// the resolver. One handler's panic must not kill the worker.
		log.ErrorContext(ctx, "work item's handler panicked; the row is left to the resolver",
			"panic", fmt.Sprint(p.value), "stack", string(p.stack))
		w.settle(ctx, msg, "ack", item.Key)
		return
	}
	switch {
	case err == nil:
		log.InfoContext(ctx, "work item called", "receipt_id", out.ReceiptID())
	case !out.Called:
		log.ErrorContext(ctx, "work item's call sent nothing; handed back", "err", err)
	default:
		log.WarnContext(ctx, "work item called without a success", "err", err, "status", out.Row.Status)
	}
	switch out.Row.Status {
	case ledger.StatusSucceeded, ledger.StatusFailedPoison, ledger.StatusUnknown:
		// The row holds its fate now; a second delivery could only find
		// it settled or the resolver's.
		w.settle(ctx, msg, "ack", item.Key)
	default:
		// Still pending: its lease ended (the vendor said retry later) or
		// runs (a lost report): a later start answers retry_same_key, or
		// wait until the lease ends.
		log.InfoContext(ctx, "work item's row still pending; handed back to retry with the same key", "status", out.Row.Status)
		w.nak(ctx, msg, item.Key)
	}
}

// keepAlive tells JetStream the item is in progress every third of the
// ack wait until stop is called, so a slow call is not handed out again.
func (w *Worker) keepAlive(ctx context.Context, msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(w.ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = msg.InProgress()
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// nak hands the item back with a delay that doubles per delivery.
func (w *Worker) nak(ctx context.Context, msg jetstream.Msg, key string) {
	d := time.Second
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		d <<= min(md.NumDelivered-1, 16)
	}
	w.nakFor(ctx, msg, key, d)
}

// nakFor hands the item back after d: at least a second, at most the max
// backoff.
func (w *Worker) nakFor(ctx context.Context, msg jetstream.Msg, key string, d time.Duration) {
	d = min(max(d, time.Second), w.maxBackoff)
	if err := msg.NakWithDelay(d); err != nil {
		w.log.WarnContext(ctx, "nak of work item failed", "key", key, "err", err)
	}
}

// settle acks (waiting for the server's confirmation, so a lost ack is
// seen) or terms the item.
func (w *Worker) settle(ctx context.Context, msg jetstream.Msg, how, key string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	if how == "term" {
		err = msg.Term()
	} else {
		err = msg.DoubleAck(actx)
	}
	if err != nil {
		// JetStream hands the item out again after the ack wait; the
		// next worker's start finds the row as this one left it.
		w.log.WarnContext(ctx, "ack of work item failed", "key", key, "err", err)
	}
}
