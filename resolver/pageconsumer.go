package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// Consumer defaults.
const (
	DefaultPageConsumer = "reconciler-page-resolver"
	defaultConsumeWait  = 30 * time.Second
)

// Consume feeds HandleEvent from a durable JetStream consumer of the
// settled events (<prefix>.*.*.succeeded and <prefix>.*.*.failed_poison)
// until ctx ends, then returns nil once no handler is running. A message is
// acknowledged only after HandleEvent returned nil; a failed one is
// redelivered after RetryDelay, without limit, so a page is resolved once
// the pager is back. A body that is not an event is terminated (never
// redelivered) and logged.
func (p *PageResolver) Consume(ctx context.Context, js jetstream.JetStream, o ConsumeOptions) error {
	if o.Stream == "" {
		o.Stream = "RECON"
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = "recon"
	}
	if o.Durable == "" {
		o.Durable = DefaultPageConsumer
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultConsumeWait
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = defaultConsumeWait
	}
	cfg := jetstream.ConsumerConfig{
		Durable: o.Durable,
		FilterSubjects: []string{
			o.SubjectPrefix + ".*.*." + string(ledger.StatusSucceeded),
			o.SubjectPrefix + ".*.*." + string(ledger.StatusFailedPoison),
		},
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.Timeout + 10*time.Second, // longer than a handler may take
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, o.Stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported) {
		// A server before 2.10 takes one filter only: take every event of
		// the prefix; HandleEvent ignores the ones that settle nothing.
		cfg.FilterSubjects, cfg.FilterSubject = nil, o.SubjectPrefix+".>"
		cons, err = js.CreateOrUpdateConsumer(ctx, o.Stream, cfg)
	}
	if err != nil {
		return fmt.Errorf("page resolver: consumer %s: %w", o.Durable, err)
	}
	var running sync.WaitGroup
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		running.Add(1)
		defer running.Done()
		var ev ledger.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.Key == "" {
			p.logger.Error("page resolver: not an event, dropped", "subject", msg.Subject())
			_ = msg.Term()
			return
		}
		hctx, cancel := context.WithTimeout(ctx, o.Timeout)
		err := p.HandleEvent(hctx, ev)
		cancel()
		if err != nil {
			p.logger.Warn("page resolver: resolve failed, will retry", "tenant", ev.Tenant, "key", ev.Key, "err", err)
			_ = msg.NakWithDelay(o.RetryDelay)
			return
		}
		_ = msg.Ack()
	})
	if err != nil {
		return fmt.Errorf("page resolver: consume: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	running.Wait()
	return nil
}
