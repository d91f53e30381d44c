package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Outbox is what the relay needs of a store (ledger.Outbox satisfies it).
type Outbox interface {
	// PendingEvents returns up to limit records in commit order.
	PendingEvents(ctx context.Context, limit int) ([]ledger.OutboxRecord, error)
	// AckEvents deletes published records.
	AckEvents(ctx context.Context, seqs ...uint64) error
	// Notify receives a value after a commit that wrote records.
	Notify() <-chan struct{}
}

// LeasingOutbox is an Outbox that lets several relays share the work
// (ledger/postgres.Store implements it). ClaimEvents leases up to limit
// records until now+lease, in sequence order, never handing a record to two
// callers under live leases and never handing out a row's record while an
// earlier record of that row is leased to someone else. When the Outbox
// given to NewRelay implements it, the relay leases batches instead of
// reading PendingEvents.
type LeasingOutbox interface {
	ClaimEvents(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]ledger.OutboxRecord, error)
}

// Publisher publishes one message and waits for its PubAck
// (jetstream.JetStream satisfies it).
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Relay defaults.
const (
	DefaultRelayBatch     = 100
	DefaultPublishTimeout = 5 * time.Second
	DefaultRelayInterval  = time.Second
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	// DefaultLease is how long a leasing outbox's batch belongs to this
	// relay. It must exceed PublishTimeout: a publish is started only while
	// at least PublishTimeout of the lease is left.
	DefaultLease = 30 * time.Second
)

// Publish results, as RelayMetrics.CountResult receives them (the result
// label of reconciler_relay_publishes_total).
const (
	ResultPublished = "published" // stored by JetStream
	ResultDuplicate = "duplicate" // JetStream already held this Nats-Msg-Id
	ResultError     = "error"     // no PubAck; the record stays and is retried
	ResultInvalid   = "invalid"   // the record can never be published; dropped
)

// ErrRelayNotStarted is what Healthy reports before the first pass over the
// outbox has completed.
var ErrRelayNotStarted = errors.New("relay has not published yet")

// RelayOptions configures a Relay. Zero values take the defaults.
type RelayOptions struct {
	// Stream the events must land in (the PubAck is refused otherwise);
	// empty means DefaultStream.
	Stream string
	// SubjectPrefix of the event subjects; empty means DefaultSubjectPrefix.
	SubjectPrefix string
	Logger        *slog.Logger
	// Metrics receives the relay's observations; nil discards them.
	// eventsprom.NewRelayMetrics exports them to Prometheus.
	Metrics RelayMetrics
	// Batch is how many records one read of the outbox returns.
	Batch int
	// PublishTimeout bounds the wait for one PubAck.
	PublishTimeout time.Duration
	// Interval is how often the outbox is read without a notification (a
	// missed notification, a record written by another process).
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential wait after a
	// failed pass (NATS or the store unavailable).
	MinBackoff, MaxBackoff time.Duration
	// Lease is how long a batch leased from a LeasingOutbox stays this
	// relay's (default DefaultLease); it must be longer than PublishTimeout.
	// Unused with a plain Outbox.
	Lease time.Duration
	// Now is the clock for the lag metric and the leases; nil means
	// time.Now. Replicas sharing an outbox need clocks that agree to well
	// within Lease.
	Now func() time.Time
}

// Relay moves outbox records to JetStream in commit order. A record is
// deleted from the outbox only after its PubAck; a record is never published
// before the one ahead of it has been acknowledged.
type Relay struct {
	out     Outbox
	lease   LeasingOutbox // out, when it leases; nil otherwise
	pub     Publisher
	opts    RelayOptions
	log     *slog.Logger
	now     func() time.Time
	met     RelayMetrics
	running atomic.Bool

	// held is owned by the Run goroutine (drain and read only).
	held leasedBatch
	// wake carries Wake's request to Run (buffered: one pending is enough).
	wake chan struct{}

	mu        sync.Mutex
	health    error
	downSince time.Time
}

// NewRelay returns a relay from out to pub. It starts nothing: call Run.
func NewRelay(out Outbox, pub Publisher, opts RelayOptions) (*Relay, error) {
	if out == nil || pub == nil {
		return nil, errors.New("new relay: outbox and publisher are required")
	}
	if opts.Stream == "" {
		opts.Stream = DefaultStream
	}
	if opts.SubjectPrefix == "" {
		opts.SubjectPrefix = DefaultSubjectPrefix
	}
	if err := ValidSubjectPrefix(opts.SubjectPrefix); err != nil {
		return nil, fmt.Errorf("new relay: %w", err)
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultRelayBatch
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = DefaultPublishTimeout
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultRelayInterval
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = opts.MinBackoff
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	lo, _ := out.(LeasingOutbox)
	if lo != nil && opts.Lease <= opts.PublishTimeout {
		return nil, fmt.Errorf("new relay: lease %s must be longer than the publish timeout %s", opts.Lease, opts.PublishTimeout)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	met := opts.Metrics
	if met == nil {
		met = noMetrics{}
	}
	return &Relay{
		out: out, lease: lo, pub: pub, opts: opts, log: log.With("component", "relay"), now: now, met: met,
		health: ErrRelayNotStarted, wake: make(chan struct{}, 1),
	}, nil
}

// Healthy returns nil when the last pass over the outbox published
// everything it read, and the pass's error while publishing (or reading the
// outbox) fails. It is what /readyz reports for the event bus.
func (r *Relay) Healthy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.health
}

// Run relays until ctx is done, then returns nil after finishing the record
// in flight (its PubAck wait is bounded by PublishTimeout) and deleting the
// records already acknowledged. It is woken by the outbox's Notify and every
// Interval; after a failure it waits a jittered, capped exponential backoff
// (notifications do not cut the wait short, so an outage is not hammered;
// Wake, an operator's request, does).
// Only one Run may be active at a time.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: already running")
	}
	defer r.running.Store(false)

	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(r.opts.MinBackoff),
		backoff.WithMaxInterval(r.opts.MaxBackoff),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0), // never give up: the outbox holds the events
	)
	ticker := time.NewTicker(r.opts.Interval)
	defer ticker.Stop()
	notify := r.out.Notify()

	for {
		if ctx.Err() != nil {
			return nil
		}
		err := r.drain(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.setHealth(err)
		if err != nil {
			wait := bo.NextBackOff()
			r.log.Warn("relay pass failed; retrying", "err", err, "retry_in", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			case <-r.wake:
				// An operator asked (POST /v1/admin/redrive): retry now,
				// and back off from the start if it fails again.
				t.Stop()
				bo.Reset()
			}
			continue
		}
		bo.Reset()
		select {
		case <-ctx.Done():
			return nil
		case <-notify:
		case <-ticker.C:
		case <-r.wake:
		}
	}
}

// Drain publishes what the outbox holds, once, within ctx: the last step of
// a graceful shutdown (STYLE.md §5: stop intake, stop the resolver, drain
// the relay), after Run has returned, so events committed by the last
// requests do not wait for the next start. It stops at the first failure
// (NATS down: the records stay for the next start) and fails if Run is
// running.
func (r *Relay) Drain(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: drain while running")
	}
	defer r.running.Store(false)
	if err := r.drain(ctx); err != nil {
		return fmt.Errorf("relay drain: %w", err)
	}
	return nil
}

// Wake makes Run read the outbox and publish now, cutting short a backoff
// after a failure or the wait for the next tick; records that are still
// pending are then published again. It never blocks; a Wake while Run is
// not running costs the next Run one extra pass.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default: // a wake is already pending
	}
}

func (r *Relay) setHealth(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil && r.health == nil:
		r.downSince = r.now()
	case err == nil && r.health != nil && !r.downSince.IsZero():
		r.log.Info("relay recovered", "outage", r.now().Sub(r.downSince))
		r.downSince = time.Time{}
	}
	r.health = err
}

// drain publishes batches until the outbox is empty, a step fails, or ctx
// is done.
func (r *Relay) drain(ctx context.Context) error {
	for ctx.Err() == nil {
		recs, until, err := r.read(ctx)
		if err != nil {
			return fmt.Errorf("read outbox: %w", err)
		}
		r.met.SetOutboxDepth(len(recs))
		if len(recs) == 0 {
			return nil
		}
		done, pubErr := r.publish(ctx, recs, until)
		// Under a lease, the records left after a failed publish are still
		// this relay's until the lease ends: keep them and retry them after
		// the backoff, rather than leaving them (and every later record of
		// their rows) to wait out the lease.
		r.held = leasedBatch{}
		if !until.IsZero() && pubErr != nil {
			r.held = leasedBatch{recs: recs[len(done):], until: until}
		}
		if len(done) > 0 {
			// The records are on the stream; delete them even when ctx is
			// done, or a restart republishes them (harmless inside the
			// duplicates window, but avoidable).
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.PublishTimeout)
			err := r.out.AckEvents(actx, done...)
			cancel()
			if err != nil {
				// The rest go back with the lease; so do these (their second
				// publish is a duplicate).
				r.held = leasedBatch{}
				return fmt.Errorf("ack outbox: %w", err)
			}
			r.met.SetOutboxDepth(len(recs) - len(done))
		}
		if pubErr != nil {
			return pubErr
		}
		if len(recs) < r.opts.Batch {
			return nil
		}
	}
	return nil
}

// read returns the next batch: the records held back from a failed publish
// while their lease has room, else a batch leased until the returned time
// from a LeasingOutbox, or one read with PendingEvents (zero time: no
// lease).
func (r *Relay) read(ctx context.Context) ([]ledger.OutboxRecord, time.Time, error) {
	if r.lease == nil {
		recs, err := r.out.PendingEvents(ctx, r.opts.Batch)
		return recs, time.Time{}, err
	}
	now := r.now()
	if h := r.held; len(h.recs) > 0 {
		r.held = leasedBatch{}
		if now.Add(r.opts.PublishTimeout).Before(h.until) {
			return h.recs, h.until, nil
		}
		// Too little of the lease is left to publish under it: the records
		// come back from ClaimEvents once it ends.
	}
	recs, err := r.lease.ClaimEvents(ctx, now, r.opts.Batch, r.opts.Lease)
	return recs, now.Add(r.opts.Lease), err
}

// leasedBatch is what is left of a leased batch after a failed publish:
// the records, in order, and the end of their lease.
type leasedBatch struct {
	recs  []ledger.OutboxRecord
	until time.Time
}

// publish sends recs one at a time, each after the previous PubAck, and
// returns the seqs that are done (published, duplicate, or invalid and
// dropped): always a prefix of recs. It stops at the first failure and
// between records once ctx is done. With a lease (until not zero) it
// starts a publish only while PublishTimeout still fits in the lease, so
// every publish ends before another relay can be handed the record or a
// later record of its row: that is what keeps each row's events in order
// across relays. Records it leaves unpublished come back when the lease
// ends.
func (r *Relay) publish(ctx context.Context, recs []ledger.OutboxRecord, until time.Time) ([]uint64, error) {
	done := make([]uint64, 0, len(recs))
	for _, rec := range recs {
		if ctx.Err() != nil {
			break
		}
		if !until.IsZero() && r.now().Add(r.opts.PublishTimeout).After(until) {
			r.log.Warn("relay lease running out; leaving the rest of the batch", "left", len(recs)-len(done))
			break
		}
		msg, err := r.message(rec.Event)
		if err != nil {
			// Retrying cannot fix it and keeping it would stall every event
			// behind it; the row itself still holds the truth (Await's
			// WithLedger poll sees it).
			r.met.CountResult(ResultInvalid)
			r.log.Error("dropping outbox record that cannot be published", "seq", rec.Seq, "key", rec.Event.Key, "err", err)
			done = append(done, rec.Seq)
			continue
		}
		// The in-flight publish is finished even if ctx ends meanwhile:
		// abandoning it would leave the outcome unknown.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.PublishTimeout)
		ack, err := r.pub.PublishMsg(pctx, msg,
			jetstream.WithMsgID(rec.Event.MsgID()),
			jetstream.WithExpectStream(r.opts.Stream))
		cancel()
		if err != nil {
			r.met.CountResult(ResultError)
			return done, fmt.Errorf("publish %s: %w", msg.Subject, err)
		}
		if ack.Duplicate {
			r.met.CountResult(ResultDuplicate)
		} else {
			r.met.CountResult(ResultPublished)
		}
		if !rec.Event.At.IsZero() {
			r.met.ObserveLag(max(r.now().Sub(rec.Event.At), 0))
		}
		done = append(done, rec.Seq)
	}
	return done, nil
}

// message builds the JetStream message of an event: its subject and the
// ledger.Event JSON body.
func (r *Relay) message(ev ledger.Event) (*nats.Msg, error) {
	subj, err := Subject(r.opts.SubjectPrefix, ev)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}, nil
}

// RelayMetrics receives what the relay observes, for /metrics
// (docs/architecture.md §6a). It is declared here and implemented elsewhere
// (eventsprom), so a program that only awaits events, like the client SDK,
// does not link Prometheus. A relay calls it from one goroutine at a time
// (Run or Drain); relays sharing one need it safe for concurrent use.
type RelayMetrics interface {
	// SetOutboxDepth reports how many records the last read of the outbox
	// returned, less those deleted since (so at most one batch).
	SetOutboxDepth(n int)
	// ObserveLag reports the time from an event's commit (Event.At) to its
	// PubAck.
	ObserveLag(d time.Duration)
	// CountResult counts one record handled, by result: ResultPublished,
	// ResultDuplicate, ResultError or ResultInvalid.
	CountResult(result string)
}

// noMetrics is the RelayMetrics of a relay given none.
type noMetrics struct{}

func (noMetrics) SetOutboxDepth(int)       {}
func (noMetrics) ObserveLag(time.Duration) {}
func (noMetrics) CountResult(string)       {}
