package approvals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/durable"
	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/paging"
)

// Pager is what the Notifier needs of a pager (paging.PagerDuty,
// paging.Webhook and paging.Log have it).
type Pager interface {
	Trigger(ctx context.Context, p paging.Page) error
	Resolve(ctx context.Context, dedupKey string) error
}

// DefaultNotifierConsumer is the notifier's default durable name.
const DefaultNotifierConsumer = "reconciler-approval-notifier"

// NotifierOptions configure a Notifier. Zero values take the defaults.
type NotifierOptions struct {
	// Pagers are asked, each, for every request (the generic webhook, and
	// PagerDuty when configured; paging.Log when neither is).
	Pagers []Pager
	// Source is the pages' source (default paging.DefaultSource).
	Source string
	// Stream and SubjectPrefix are the event stream's (defaults RECON, recon).
	Stream, SubjectPrefix string
	// Durable names the consumer all replicas share (default
	// DefaultNotifierConsumer).
	Durable string
	// Timeout bounds one event's pages, retries included (default 30 s).
	Timeout time.Duration
	// RetryDelay is how long a failed event waits for redelivery (default 30 s).
	RetryDelay time.Duration
	Logger     *slog.Logger
	// TracerProvider receives a page span per pager asked (tracing.go);
	// nil: none.
	TracerProvider trace.TracerProvider
}

// Notifier pages a human for each approval request, at severity info
// (PagerDuty's low urgency), and resolves the alert when the request is
// granted, denied or expires.
type Notifier struct {
	o      NotifierOptions
	tracer trace.Tracer
}

// NewNotifier returns a Notifier. It starts nothing: call Consume, or feed
// HandleEvent.
func NewNotifier(o NotifierOptions) *Notifier {
	if o.Source == "" {
		o.Source = paging.DefaultSource
	}
	if o.Durable == "" {
		o.Durable = DefaultNotifierConsumer
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Notifier{o: o, tracer: tracerOf(o.TracerProvider)}
}

// Page is the page of an approval request event.
func (n *Notifier) Page(ev ledger.Event) paging.Page {
	a := ev.Approval
	return paging.Page{
		DedupKey: paging.ApprovalDedupKey(ev.Tenant, ev.Key),
		Summary: fmt.Sprintf("reconciler: approval needed for %s in run %s of tenant %s (%s); approve or deny %s before %s",
			ev.Tool, ev.RunID, ev.Tenant, a.Reason, a.ID, a.ExpiresAt.UTC().Format(time.RFC3339)),
		Source:   n.o.Source,
		Severity: paging.SeverityInfo,
		CustomDetails: map[string]any{
			"tenant": ev.Tenant, "key": ev.Key, "run_id": ev.RunID, "tool": ev.Tool, "tool_call_id": ev.ToolCallID,
			"approval_id": a.ID, "reason": a.Reason, "expires_at": a.ExpiresAt.UTC().Format(time.RFC3339),
			"approve": "POST /v1/approvals/" + a.ID + "/approve", "deny": "POST /v1/approvals/" + a.ID + "/deny",
		},
	}
}

// HandleEvent triggers the request's page on approval_requested and
// resolves it on approved, denied and approval_expired; every other event
// is ignored. Every pager is asked even when one fails; an error means at
// least one was not reached, and the caller should let the event be
// redelivered (a second trigger or resolve of one dedup key is harmless).
func (n *Notifier) HandleEvent(ctx context.Context, ev ledger.Event) error {
	var call func(context.Context, Pager) error
	action, dk := tracing.PageResolve, paging.ApprovalDedupKey(ev.Tenant, ev.Key)
	switch ev.Status {
	case ledger.EventApprovalRequested:
		if ev.Approval == nil {
			return nil // not an event this build writes
		}
		p := n.Page(ev)
		action = tracing.PageTrigger
		call = func(ctx context.Context, pg Pager) error { return pg.Trigger(ctx, p) }
	case ledger.EventApproved, ledger.EventDenied, ledger.EventApprovalExpired:
		call = func(ctx context.Context, pg Pager) error { return pg.Resolve(ctx, dk) }
	default:
		return nil
	}
	var errs []error
	for _, pg := range n.o.Pagers {
		pctx, span := tracing.StartPage(ctx, n.tracer, action, dk, ev.Traceparent)
		err := call(pctx, pg)
		tracing.End(span, err, "page not delivered")
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("notify %s of %s/%s: %w", ev.Status, ev.Tenant, ev.Key, err)
	}
	return nil
}

// Consume feeds HandleEvent from a durable JetStream consumer of the
// approval events until ctx ends, then returns nil once no handler runs.
// Events are handled one at a time in stream order. A message is
// acknowledged after HandleEvent returned nil; a failed one is redelivered
// after RetryDelay, without limit, before any later one; a body that is
// not an event is terminated and logged.
func (n *Notifier) Consume(ctx context.Context, js jetstream.JetStream) error {
	o := n.o
	return durable.Consume(ctx, js, durable.Options{
		Name:          "approval notifier",
		Stream:        o.Stream,
		SubjectPrefix: o.SubjectPrefix,
		Durable:       o.Durable,
		Statuses:      []string{ledger.EventApprovalRequested, ledger.EventApproved, ledger.EventDenied, ledger.EventApprovalExpired},
		// One event at a time, in stream order, a failed one redelivered
		// before the next: a request's trigger can never land after its
		// resolve and reopen a decided request's alert. Requests wait for a
		// human; a notification a moment later costs nothing. Delivery
		// starts at the stream's beginning, as the page resolver's: a
		// consumer created again replays each request's trigger and then
		// its resolve, so no request made meanwhile goes unasked and no
		// decided one stays open.
		MaxAckPending: 1,
		Timeout:       o.Timeout,
		RetryDelay:    o.RetryDelay,
		Failure:       "page failed",
		Logger:        o.Logger,
	}, n.HandleEvent)
}
