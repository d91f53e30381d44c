package resolver

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/paging"
)

// PageResolver closes the page of a row that settles after it was paged
// (a late webhook, a human, the resolver itself): it sends the pager's
// resolve for the same dedup key. Feed it the settled events of the outbox
// stream (recon.*.*.succeeded and recon.*.*.failed_poison) from a durable
// consumer; ack a message only when HandleEvent returned nil.
type PageResolver struct {
	pager  Pager
	logger *slog.Logger
	tracer trace.Tracer
}

// PageResolverOption configures a PageResolver.
type PageResolverOption func(*PageResolver)

// TracePages makes each resolve a page span (a root: no request asked for
// it; linked to the row's claim) from tp.
func TracePages(tp trace.TracerProvider) PageResolverOption {
	return func(p *PageResolver) { p.tracer = tracerOf(tp) }
}

// NewPageResolver returns a PageResolver sending resolves to pager.
func NewPageResolver(pager Pager, logger *slog.Logger, opts ...PageResolverOption) *PageResolver {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &PageResolver{pager: pager, logger: logger, tracer: tracerOf(nil)}
	for _, o := range opts {
		o(p)
	}
	return p
}

// HandleEvent resolves the page of ev's row when ev settles a paged row
// (PagedAt set, status succeeded or failed_poison) and ignores every other
// event. It is idempotent: a resolve for an alert that is already closed is
// dropped by PagerDuty. An error means the resolve was not delivered: the
// caller should let the message be redelivered.
func (p *PageResolver) HandleEvent(ctx context.Context, ev ledger.Event) error {
	if ev.PagedAt.IsZero() {
		return nil
	}
	switch ledger.Status(ev.Status) {
	case ledger.StatusSucceeded, ledger.StatusFailedPoison:
	default:
		return nil
	}
	dk := paging.DedupKey(ev.Tenant, ev.Key)
	ctx, span := tracing.StartPage(ctx, p.tracer, tracing.PageResolve, dk, ev.Traceparent)
	err := p.pager.Resolve(ctx, dk)
	tracing.End(span, err, pageUndelivered)
	if err != nil {
		return fmt.Errorf("resolve page %s: %w", dk, err)
	}
	p.logger.InfoContext(ctx, "resolver: page resolved", "tenant", ev.Tenant, "key", ev.Key, "status", ev.Status, "source", string(ev.Source))
	return nil
}
