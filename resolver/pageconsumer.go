package resolver

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/internal/durable"
	"github.com/agentledger/reconciler/ledger"
)

// ConsumeOptions configure PageResolver.Consume. Zero fields take the defaults.
type ConsumeOptions struct {
	// Stream and SubjectPrefix are the event stream's (defaults RECON, recon).
	Stream, SubjectPrefix string
	// Durable names the consumer (default "reconciler-page-resolver"); all
	// replicas share it, so each event is handled by one of them.
	Durable string
	// Timeout bounds one event's resolve, retries included (default 30 s).
	Timeout time.Duration
	// RetryDelay is how long a failed event waits for redelivery (default 30 s).
	RetryDelay time.Duration
}

// DefaultPageConsumer is the consumer's default durable name.
const DefaultPageConsumer = "reconciler-page-resolver"

// Consume feeds HandleEvent from a durable JetStream consumer of the
// settled events (<prefix>.*.*.succeeded and <prefix>.*.*.failed_poison)
// until ctx ends, then returns nil once no handler is running. A message is
// acknowledged only after HandleEvent returned nil; a failed one is
// redelivered after RetryDelay, without limit, so a page is resolved once
// the pager is back. A body that is not an event is terminated (never
// redelivered) and logged.
func (p *PageResolver) Consume(ctx context.Context, js jetstream.JetStream, o ConsumeOptions) error {
	if o.Durable == "" {
		o.Durable = DefaultPageConsumer
	}
	return durable.Consume(ctx, js, durable.Options{
		Name:          "page resolver",
		Stream:        o.Stream,
		SubjectPrefix: o.SubjectPrefix,
		Durable:       o.Durable,
		Statuses:      []string{string(ledger.StatusSucceeded), string(ledger.StatusFailedPoison)},
		Timeout:       o.Timeout,
		RetryDelay:    o.RetryDelay,
		Failure:       "resolve failed",
		Logger:        p.logger,
	}, p.HandleEvent)
}
