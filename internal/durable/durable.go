package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/ledger"
)

// Options describe one consumer. Name, Durable, Statuses and Failure are
// required; zero values of the others take the defaults, the same for
// every consumer (the callers' docs promise them).
type Options struct {
	// Name begins every log line and error ("page resolver").
	Name string
	// Stream and SubjectPrefix are the event stream's (defaults RECON,
	// recon).
	Stream, SubjectPrefix string
	// Durable names the consumer all replicas share.
	Durable string
	// Statuses are the events consumed: the filters
	// <prefix>.*.*.<status>. A server before 2.10 takes one filter only and
	// gets <prefix>.>, so the handler must ignore the other events.
	Statuses []string
	// MaxAckPending bounds the events handed out but not yet acknowledged
	// (0: the server's default). 1 handles them strictly in stream order,
	// a failed one redelivered before any later one.
	MaxAckPending int
	// Timeout bounds one handler call (default 30 s); the ack wait is 10 s
	// longer, so the server does not redeliver an event whose handler
	// still runs.
	Timeout time.Duration
	// RetryDelay is how long a failed event waits for redelivery (default
	// 30 s).
	RetryDelay time.Duration
	// Failure names what failed in the log line of a handler error
	// ("resolve failed"), which says it will be retried.
	Failure string
	Logger  *slog.Logger // nil: discard
}

// defaultWait is Options' default Timeout and RetryDelay.
const defaultWait = 30 * time.Second

func (o Options) withDefaults() Options {
	if o.Stream == "" {
		o.Stream = "RECON"
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = "recon"
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultWait
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = defaultWait
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Consume creates or updates the durable consumer (delivering from the
// start of the stream, so a consumer created again replays what it has not
// acknowledged) and feeds handle until ctx ends; then it returns nil once
// no handler runs. A body that is not an event is terminated (never
// redelivered) and logged.
func Consume(ctx context.Context, js jetstream.JetStream, o Options, handle func(context.Context, ledger.Event) error) error {
	o = o.withDefaults()
	log := o.Logger
	filters := make([]string, 0, len(o.Statuses))
	for _, s := range o.Statuses {
		filters = append(filters, o.SubjectPrefix+".*.*."+s)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        o.Durable,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        o.Timeout + 10*time.Second, // longer than a handler may take
		MaxDeliver:     -1,
		MaxAckPending:  o.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, o.Stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported) {
		cfg.FilterSubjects, cfg.FilterSubject = nil, o.SubjectPrefix+".>"
		cons, err = js.CreateOrUpdateConsumer(ctx, o.Stream, cfg)
	}
	if err != nil {
		return fmt.Errorf("%s: consumer %s: %w", o.Name, o.Durable, err)
	}
	var running sync.WaitGroup
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		running.Add(1)
		defer running.Done()
		var ev ledger.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.Key == "" {
			log.Error(o.Name+": not an event, dropped", "subject", msg.Subject())
			_ = msg.Term()
			return
		}
		hctx, cancel := context.WithTimeout(ctx, o.Timeout)
		err := handle(hctx, ev)
		cancel()
		if err != nil {
			log.Warn(o.Name+": "+o.Failure+", will retry", "tenant", ev.Tenant, "key", ev.Key, "status", ev.Status, "err", err)
			_ = msg.NakWithDelay(o.RetryDelay)
			return
		}
		_ = msg.Ack()
	})
	if err != nil {
		return fmt.Errorf("%s: consume: %w", o.Name, err)
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	running.Wait()
	return nil
}
