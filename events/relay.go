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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// Outbox is what the relay needs of a store (ledger.Outbox satisfies it).
type Outbox interface {
	// EventsAfter returns up to limit records with a sequence number above
	// after, in commit order.
	EventsAfter(ctx context.Context, after uint64, limit int) ([]ledger.OutboxRecord, error)
	// AckEvents deletes records.
	AckEvents(ctx context.Context, seqs ...uint64) error
	// CountEvents returns how many records the outbox holds (a
	// LeasingOutbox leaves out the records it holds).
	CountEvents(ctx context.Context) (int, error)
	// Notify receives a value after a commit that wrote records.
	Notify() <-chan struct{}
}

// LeasingOutbox is an Outbox that lets several relays share the work
// (ledger/postgres.Store implements it). ClaimEvents leases up to limit
// records until now+lease, in sequence order, never handing a record to two
// callers under live leases and never handing out a row's record while an
// earlier record of that row is leased, and not held, by someone else.
// HoldEvents marks published records as held until until: they are not
// handed out before then and keep no later record of their row waiting.
// When the Outbox given to NewRelay implements it, the relay leases batches
// instead of reading EventsAfter.
type LeasingOutbox interface {
	ClaimEvents(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]ledger.OutboxRecord, error)
	HoldEvents(ctx context.Context, until time.Time, seqs ...uint64) error
}

// Publisher sends a message without waiting for its PubAck, which the
// returned future delivers (jetstream.JetStream satisfies it). An error
// means the message was not sent.
type Publisher interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// Relay defaults.
const (
	DefaultRelayBatch     = 100
	DefaultWindow         = 256
	DefaultPublishTimeout = 5 * time.Second
	DefaultRelayInterval  = time.Second
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	// DefaultLease is how long a leasing outbox's batch belongs to this
	// relay. It must exceed PublishTimeout: a publish is started only while
	// at least PublishTimeout of the lease is left.
	DefaultLease = 30 * time.Second
	// StockSyncedAfter is RelayOptions.SyncedAfter for a nats-server whose
	// sync_interval nobody set: it syncs every 2 minutes; the margin covers
	// the sync rounds' own time.
	StockSyncedAfter = 2*time.Minute + 30*time.Second
	// MaxSyncedAfter bounds RelayOptions.SyncedAfter. A record the relay
	// holds is published again after a restart, and only JetStream's
	// duplicates window (DefaultDuplicates, 1 h) keeps that second copy off
	// the stream, so the hold must stay far inside it.
	MaxSyncedAfter = 10 * time.Minute
)

// Publish results, as RelayMetrics.CountResult receives them (the result
// label of reconciler_relay_publishes_total).
const (
	ResultPublished = "published" // stored by JetStream
	ResultDuplicate = "duplicate" // JetStream already held this Nats-Msg-Id
	ResultError     = "error"     // no PubAck; the record stays and is retried
	ResultInvalid   = "invalid"   // the record can never be published; dropped
)

// ErrRelayNotStarted is what Healthy reports before the relay has first
// had a PubAck or found the outbox empty.
var ErrRelayNotStarted = errors.New("relay has not published yet")

// errPublishTimeout is a publish whose PubAck did not come within
// RelayOptions.PublishTimeout.
var errPublishTimeout = errors.New("no pub ack within the publish timeout")

// RelayOptions configures a Relay. Zero values take the defaults.
type RelayOptions struct {
	// Stream the events must land in (the PubAck is refused otherwise);
	// empty means DefaultStream.
	Stream string
	// WorkStream the work items must land in; empty means
	// DefaultWorkStream.
	WorkStream string
	// SubjectPrefix of the event subjects; empty means DefaultSubjectPrefix.
	SubjectPrefix string
	Logger        *slog.Logger
	// Metrics receives the relay's observations; nil discards them.
	// eventsprom.NewRelayMetrics exports them to Prometheus.
	Metrics RelayMetrics
	// Batch is how many records one read of the outbox returns.
	Batch int
	// Window is how many publishes may wait for their PubAck at once.
	Window int
	// PublishTimeout bounds the wait for one PubAck.
	PublishTimeout time.Duration
	// SyncedAfter is how long after its PubAck a message is certainly on
	// the server's disk; the relay keeps the record (and publishes it again
	// after a restart or a reconnect) until then. 0 deletes a record at its
	// PubAck: right for a server that syncs before it acks (sync_interval:
	// always) or a stream of 3 or more replicas, whose ack is a quorum's.
	// A stock nats-server syncs every 2 minutes; the embedded one every
	// natsserver.DefaultSyncInterval. At most MaxSyncedAfter.
	SyncedAfter time.Duration
	// Interval is how often the outbox is read without a notification (a
	// missed notification, a record written by another process) and the
	// backlog gauges are refreshed.
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential wait after a
	// failure (NATS or the store unavailable).
	MinBackoff, MaxBackoff time.Duration
	// Lease is how long a batch leased from a LeasingOutbox stays this
	// relay's (default DefaultLease); it must be longer than PublishTimeout.
	// Unused with a plain Outbox.
	Lease time.Duration
	// Now is the clock for the lag metric, the leases and SyncedAfter; nil
	// means time.Now. Replicas sharing an outbox need clocks that agree to
	// well within Lease.
	Now func() time.Time
	// TracerProvider receives a publish span per message sent (tracing.go);
	// nil: none, and a message carries the row's own traceparent.
	TracerProvider trace.TracerProvider
}

// Relay moves outbox records to JetStream: up to Window publishes in
// flight, each key's records in commit order, a record deleted only once
// its PubAck came and SyncedAfter has passed. See doc.go.
type Relay struct {
	out   Outbox
	lease LeasingOutbox // out, when it leases; nil otherwise
	pub   Publisher
	// nc is the publisher's connection (nil when it has none): its
	// reconnects may mean a restarted server that lost what it had not
	// synced, and a ping on it proves the server stayed up (doc.go).
	nc   *nats.Conn
	opts RelayOptions
	log  *slog.Logger
	now  func() time.Time
	met  RelayMetrics
	// tracer starts the publish spans; nil when the relay does not trace.
	tracer  trace.Tracer
	running atomic.Bool

	// p is the pipeline's state, owned by the one Run or Drain running.
	p pipeline
	// wake carries Wake's request to Run (buffered: one pending is enough).
	wake chan struct{}

	// depth and oldest are the backlog Backlog reports (oldest in ns).
	depth, oldest atomic.Int64

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
	if opts.WorkStream == "" {
		opts.WorkStream = DefaultWorkStream
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
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = DefaultPublishTimeout
	}
	if opts.SyncedAfter < 0 || opts.SyncedAfter > MaxSyncedAfter {
		return nil, fmt.Errorf("new relay: synced after %s: want 0 to %s", opts.SyncedAfter, MaxSyncedAfter)
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
	r := &Relay{
		out: out, lease: lo, pub: pub, opts: opts, log: log.With("component", "relay"), now: now, met: met,
		health: ErrRelayNotStarted, wake: make(chan struct{}, 1),
	}
	if c, ok := pub.(interface{ Conn() *nats.Conn }); ok {
		r.nc = c.Conn()
	}
	if opts.TracerProvider != nil {
		r.tracer = opts.TracerProvider.Tracer(tracerScope)
	}
	r.p.init(r)
	return r, nil
}

// Healthy returns nil while the relay reads the outbox, publishes and
// deletes without failing, the failure's error while one is not followed
// by a success of its kind, and ErrRelayNotStarted until the relay has
// first had a PubAck or found the outbox empty (a backlog is not a
// failure: Backlog shows it). It is what /readyz reports for the event bus.
func (r *Relay) Healthy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.health
}

// Backlog returns how many outbox records wait to be published and how
// long the oldest of those the relay has read has waited since its commit,
// as of the relay's last look (RelayOptions.Interval at most, and after
// every step while it works). Safe from any goroutine.
func (r *Relay) Backlog() (depth int, oldest time.Duration) {
	return int(r.depth.Load()), time.Duration(r.oldest.Load())
}

// Run relays until ctx is done, then returns nil after waiting for the
// publishes in flight (bounded by PublishTimeout) and deleting what may be
// deleted; records still held (SyncedAfter) stay in the outbox and are
// published again, as duplicates, by the next Run. It is woken by the
// outbox's Notify and every Interval; after a failure it waits a jittered,
// capped exponential backoff (notifications do not cut the wait short, so
// an outage is not hammered; Wake, an operator's request, does).
// Only one Run may be active at a time.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: already running")
	}
	defer r.running.Store(false)
	_ = r.loop(ctx, false)
	return nil
}

// Drain publishes what the outbox holds, once, within ctx: the last step of
// a graceful shutdown (STYLE.md §5: stop intake, stop the resolver, drain
// the relay), after Run has returned, so events committed by the last
// requests do not wait for the next start. It stops at the first failure
// (NATS down: the records stay for the next start) and fails if Run is
// running. It does not wait for held records to become deletable.
func (r *Relay) Drain(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: drain while running")
	}
	defer r.running.Store(false)
	if err := r.loop(ctx, true); err != nil {
		return fmt.Errorf("relay drain: %w", err)
	}
	return nil
}

// Wake makes Run read the outbox and publish now, cutting short a backoff
// after a failure or the wait for the next tick. It never blocks; a Wake
// while Run is not running costs the next Run one extra read.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default: // a wake is already pending
	}
}

func (r *Relay) setHealth(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == r.health {
		return
	}
	switch {
	case err != nil && r.health == nil:
		r.downSince = r.now()
	case err == nil && r.health != nil && !r.downSince.IsZero():
		r.log.Info("relay recovered", "outage", r.now().Sub(r.downSince))
		r.downSince = time.Time{}
	}
	r.health = err
}

// route is where an outbox record goes: its stream, subject and
// Nats-Msg-Id. A work item (outbox autonomy) goes to the work stream on
// <prefix>_work.<tenant>.<tool>, one message per key; every other event
// to the event stream on <prefix>.<tenant>.<run_id>.<status>.
func (r *Relay) route(ev ledger.Event) (stream, subject, msgID string, err error) {
	if ev.Status == ledger.EventQueued {
		subject, err = WorkSubject(r.opts.SubjectPrefix, ev)
		return r.opts.WorkStream, subject, ev.MsgID(), err
	}
	subject, err = Subject(r.opts.SubjectPrefix, ev)
	return r.opts.Stream, subject, ev.MsgID(), err
}

// message maps an outbox record to what the relay publishes: the
// JetStream message (route's subject, the ledger.Event JSON body, the
// Nats-Msg-Id header and the row's traceparent, which a publish span
// replaces with its own) and the stream that must store it.
func (r *Relay) message(rec ledger.OutboxRecord) (*nats.Msg, string, error) {
	stream, subj, msgID, err := r.route(rec.Event)
	if err != nil {
		return nil, "", err
	}
	body, err := json.Marshal(rec.Event)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, msgID)
	if tp := rec.Event.Traceparent; tp != "" {
		h.Set(HeaderTraceparent, tp)
	}
	return &nats.Msg{Subject: subj, Data: body, Header: h}, stream, nil
}

// orderKey is what a record's order is kept within: its row (tenant and
// key). Records of different rows may reach the stream in any order.
func orderKey(rec ledger.OutboxRecord) string {
	return rec.Event.Tenant + "\x00" + rec.Event.Key
}

// RelayMetrics receives what the relay observes, for /metrics
// (docs/architecture.md §6a). It is declared here and implemented elsewhere
// (eventsprom), so a program that only awaits events, like the client SDK,
// does not link Prometheus. A relay calls it from one goroutine at a time
// (Run or Drain); relays sharing one need it safe for concurrent use.
type RelayMetrics interface {
	// SetOutboxDepth reports how many outbox records wait to be published
	// (held records, published and waiting for SyncedAfter, not counted).
	SetOutboxDepth(n int)
	// SetOutboxOldest reports how long the oldest of them the relay has
	// read has waited since its commit (Event.At); 0 when none.
	SetOutboxOldest(d time.Duration)
	// ObserveLag reports the time from an event's commit (Event.At) to its
	// PubAck.
	ObserveLag(d time.Duration)
	// CountResult counts one record handled, by result: ResultPublished,
	// ResultDuplicate, ResultError or ResultInvalid.
	CountResult(result string)
}

// noMetrics is the RelayMetrics of a relay given none.
type noMetrics struct{}

func (noMetrics) SetOutboxDepth(int)            {}
func (noMetrics) SetOutboxOldest(time.Duration) {}
func (noMetrics) ObserveLag(time.Duration)      {}
func (noMetrics) CountResult(string)            {}
