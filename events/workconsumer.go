package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultWorkAckWait is the work consumers' ack wait when neither the
// service nor a worker sets another (client.DefaultAckWait is the same).
const DefaultWorkAckWait = 30 * time.Second

// WorkConsumerConfig is the durable pull consumer through which tenant's
// outbox workers take its work items (WorkConsumer), as both the service
// (EnsureWorkConsumers) and a worker that may make it (the open single
// node) write it: filter <prefix>_work.<tenant>.>, explicit acks, ackWait
// (0: DefaultWorkAckWait), never dropping an item (its row would stay
// queued).
func WorkConsumerConfig(prefix, tenant string, ackWait time.Duration) jetstream.ConsumerConfig {
	if ackWait <= 0 {
		ackWait = DefaultWorkAckWait
	}
	return jetstream.ConsumerConfig{
		Durable:       WorkConsumer(tenant),
		Description:   "reconciler outbox workers of tenant " + tenant,
		FilterSubject: WorkSubjectPrefix(prefix) + "." + tenant + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
	}
}

// EnsureWorkConsumers makes the work consumer of every tenant that has
// none on the work stream cfg names, with ackWait (0: DefaultWorkAckWait).
// In the account layout a tenant's runtimes cannot make consumers
// (AccountLayout), so the service makes them at start and again every
// WorkConsumersInterval (KeepWorkConsumers: one an operator deleted comes
// back); an existing one is left as it is (a worker may have set its own
// ack wait).
func EnsureWorkConsumers(ctx context.Context, js jetstream.JetStream, cfg WorkStreamConfig, ackWait time.Duration, tenants []string) error {
	stream := cfg.Name
	if stream == "" {
		stream = DefaultWorkStream
	}
	for _, t := range tenants {
		_, err := js.Consumer(ctx, stream, WorkConsumer(t))
		switch {
		case err == nil:
			continue
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("work consumer of %s: look up: %w", t, err)
		}
		if _, err := js.CreateConsumer(ctx, stream, WorkConsumerConfig(cfg.SubjectPrefix, t, ackWait)); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return fmt.Errorf("work consumer of %s: create: %w", t, err)
		}
	}
	return nil
}

// WorkConsumersInterval is how often KeepWorkConsumers looks for missing
// work consumers.
const WorkConsumersInterval = 10 * time.Second

// KeepWorkConsumers runs EnsureWorkConsumers every interval (0:
// WorkConsumersInterval) until ctx ends, logging a round that fails; a
// tenant's workers wait for their consumer meanwhile (client.Worker looks
// it up again with a growing delay). It returns nil when ctx ends.
func KeepWorkConsumers(ctx context.Context, js jetstream.JetStream, cfg WorkStreamConfig, tenants []string, interval time.Duration, log *slog.Logger) error {
	if interval <= 0 {
		interval = WorkConsumersInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, interval)
			if err := EnsureWorkConsumers(rctx, js, cfg, 0, tenants); err != nil && ctx.Err() == nil {
				log.Warn("work consumers: a missing one could not be made; retrying", "err", err, "retry_in", interval)
			}
			cancel()
		}
	}
}
