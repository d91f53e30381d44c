package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/ledger"
)

// StreamReader is the part of a JetStream context StreamHistory uses.
type StreamReader interface {
	OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error)
	DeleteConsumer(ctx context.Context, stream string, consumer string) error
}

// StreamHistory reads a run's events from the event stream (RECON): the
// relay publishes every transition, page and approval decision of every
// row there, on <prefix>.<tenant>.<run_id>.<status>, and the stream keeps
// them (for events.max_age when one is set), so a run's subject is the
// history of its rows.
type StreamHistory struct {
	JS     StreamReader
	Stream string
	Prefix string
	// Max bounds the events read for one run (default 5000); Timeout one
	// read (default 3 s).
	Max     int
	Timeout time.Duration
}

// RunEvents returns the run's events in stream order. A run with more than
// Max events returns the first Max.
func (h StreamHistory) RunEvents(ctx context.Context, tenant, runID string) ([]ledger.Event, error) {
	if ledger.ValidateTenant(tenant) != nil || ledger.ValidateRunID(runID) != nil {
		return nil, errors.New("history: tenant or run id is not a subject token")
	}
	limit, timeout := h.Max, h.Timeout
	if limit <= 0 {
		limit = 5000
	}
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cons, err := h.JS.OrderedConsumer(ctx, h.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{h.Prefix + "." + tenant + "." + runID + ".*"},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("history of run %s: %w", runID, err)
	}
	defer func() {
		// The server would drop it after InactiveThreshold; say so now.
		if info := cons.CachedInfo(); info != nil && info.Name != "" {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = h.JS.DeleteConsumer(dctx, h.Stream, info.Name)
		}
	}()
	var out []ledger.Event
	for len(out) < limit {
		batch, err := cons.FetchNoWait(min(limit-len(out), 500))
		if err != nil {
			return out, fmt.Errorf("history of run %s: %w", runID, err)
		}
		n, last := 0, false
		for msg := range batch.Messages() {
			n++
			var ev ledger.Event
			if json.Unmarshal(msg.Data(), &ev) == nil {
				out = append(out, ev)
			}
			if md, err := msg.Metadata(); err == nil && md.NumPending == 0 {
				last = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return out, fmt.Errorf("history of run %s: %w", runID, err)
		}
		if last || n == 0 {
			break
		}
	}
	return out, nil
}
