package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultPollInterval is how often Await consults its ledger check.
const DefaultPollInterval = 2 * time.Second

// StreamReader is what Await needs of JetStream (jetstream.JetStream
// satisfies it): the account's JetStream info (a tenant's account in the
// account layout has none), an ordered consumer where the stream is the
// account's own, and the connection for the live events otherwise.
type StreamReader interface {
	AccountInfo(ctx context.Context) (*jetstream.AccountInfo, error)
	OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error)
	DeleteConsumer(ctx context.Context, stream string, consumer string) error
	Conn() *nats.Conn
}

// LedgerCheck asks the ledger (or the claim API) whether a key is settled;
// it returns the resolution event and true when it is.
type LedgerCheck func(ctx context.Context) (ledger.Event, bool, error)

// AwaitOption configures Await.
type AwaitOption func(*awaitConfig)

type awaitConfig struct {
	opened       func()
	stream       string
	prefix       string
	check        LedgerCheck
	pollInterval time.Duration
	wakeOn       []string
}

// WithWakeOn makes Await also return the first event of key with one of
// statuses, which are not resolutions: a runtime waiting for an approval
// wakes on approved, after which the key's next claim proceeds.
func WithWakeOn(statuses ...string) AwaitOption {
	return func(c *awaitConfig) { c.wakeOn = append(c.wakeOn, statuses...) }
}

// ends reports whether an event of status ends the wait.
func (c *awaitConfig) ends(status string) bool {
	return resolution(status) || slices.Contains(c.wakeOn, status)
}

// WithOpened makes Await call f once, as soon as its subscription (or
// consumer) is open: an action whose event the caller waits for may start
// then, and its event is not missed even where Await sees only live events
// (a tenant's account in the account layout).
func WithOpened(f func()) AwaitOption { return func(c *awaitConfig) { c.opened = f } }

// WithStream names the event stream (default DefaultStream).
func WithStream(name string) AwaitOption { return func(c *awaitConfig) { c.stream = name } }

// WithSubjectPrefix sets the subject prefix (default DefaultSubjectPrefix).
func WithSubjectPrefix(p string) AwaitOption { return func(c *awaitConfig) { c.prefix = p } }

// WithLedger makes Await consult check at start and every poll interval, so
// a notification that never arrives (stream purged, NATS down, an event the
// relay dropped) cannot strand a paused run.
func WithLedger(check LedgerCheck) AwaitOption { return func(c *awaitConfig) { c.check = check } }

// WithPollInterval sets how often the ledger check runs (default 2 s).
func WithPollInterval(d time.Duration) AwaitOption {
	return func(c *awaitConfig) { c.pollInterval = d }
}

// Await returns the first resolution event (succeeded, failed_poison,
// escalated, or the approval gate's denied and approval_expired; unknown,
// approval_requested and approved are not resolutions) of key in the run.
// Where the connection's account holds the stream (the service's, or the
// open single node's one account) that includes an event published before
// the call: it reads <prefix>.<tenant>.<run_id>.* from the start of the
// stream with an ordered, ephemeral consumer that it deletes on return. A
// tenant's account in the account layout (AccountLayout) has no JetStream
// ($JS.API.INFO says so): Await then subscribes to the events as they are
// published, and only WithLedger finds one published before the call. With
// WithLedger it also returns as soon as the ledger says the key is settled.
// An event counts only when it parses and its tenant, run and key are the
// ones asked for; anything else on the subject is skipped. It returns ctx's error (wrapped) when ctx ends first. The
// event's Traceparent is the trace context its message carried (the
// relay's publish span, or the claim's): ResumeContext continues it.
//
// Without WithLedger, a stream that cannot be read is an error; with it,
// Await keeps polling the ledger and retries the stream every interval.
func Await(ctx context.Context, js StreamReader, tenant, runID, key string, opts ...AwaitOption) (ledger.Event, error) {
	cfg := awaitConfig{stream: DefaultStream, prefix: DefaultSubjectPrefix, pollInterval: DefaultPollInterval}
	for _, o := range opts {
		o(&cfg)
	}
	if ledger.ValidateTenant(tenant) != nil || ledger.ValidateRunID(runID) != nil || ledger.ValidateKey(key) != nil {
		return ledger.Event{}, fmt.Errorf("await %s: %w: tenant, run_id or key", key, ErrInvalidEvent)
	}
	if err := ValidSubjectPrefix(cfg.prefix); err != nil {
		return ledger.Event{}, fmt.Errorf("await %s: %w", key, err)
	}
	if cfg.pollInterval <= 0 {
		cfg.pollInterval = DefaultPollInterval
	}

	found := make(chan ledger.Event, 1)
	w := &watch{
		js: js, stream: cfg.stream,
		filter: cfg.prefix + "." + tenant + "." + runID + ".*",
		handle: func(subject string, data []byte, header nats.Header) {
			if ev, ok := matchEvent(subject, data, header, tenant, runID, key, cfg.ends); ok {
				select {
				case found <- ev:
				default: // one is enough
				}
			}
		},
	}
	defer w.close(ctx)

	// Subscribe before the first ledger check: an event committed between
	// the two is then seen by one or the other.
	if err := w.open(ctx); err != nil {
		if cfg.check == nil || ctx.Err() != nil {
			return ledger.Event{}, fmt.Errorf("await %s: %w", key, err)
		}
	} else if cfg.opened != nil {
		cfg.opened()
	}
	if ev, ok := poll(ctx, cfg.check); ok {
		return ev, nil
	}

	var tick <-chan time.Time
	if cfg.check != nil {
		t := time.NewTicker(cfg.pollInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			// An event may have been delivered just as ctx ended; prefer it.
			select {
			case ev := <-found:
				return ev, nil
			default:
			}
			return ledger.Event{}, fmt.Errorf("await %s: %w", key, ctx.Err())
		case ev := <-found:
			return ev, nil
		case <-tick:
			if !w.opened() {
				// The ledger poll covers us meanwhile.
				if w.open(ctx) == nil && cfg.opened != nil {
					cfg.opened()
				}
			}
			if ev, ok := poll(ctx, cfg.check); ok {
				return ev, nil
			}
		}
	}
}

// poll runs the ledger check; errors count as "not settled yet" because the
// stream may still deliver and the next poll may succeed.
func poll(ctx context.Context, check LedgerCheck) (ledger.Event, bool) {
	if check == nil {
		return ledger.Event{}, false
	}
	ev, ok, err := check(ctx)
	if err != nil || !ok || !resolution(ev.Status) {
		return ledger.Event{}, false
	}
	return ev, true
}

// matchEvent decodes a message and reports whether it resolves key.
// Whatever does not parse, or names another tenant, run or key, is not.
func matchEvent(subj string, data []byte, header nats.Header, tenant, runID, key string, ends func(string) bool) (ledger.Event, bool) {
	if !ends(subj[strings.LastIndexByte(subj, '.')+1:]) {
		return ledger.Event{}, false // skip decoding unknown and anything else
	}
	var ev ledger.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return ledger.Event{}, false
	}
	if ev.Key != key || ev.Tenant != tenant || ev.RunID != runID || !ends(ev.Status) {
		return ledger.Event{}, false
	}
	// The header names the publish span when the relay traces (a child of
	// the claim the body names): the resumed run continues from there.
	if tp := header.Get(HeaderTraceparent); tp != "" && ledger.ValidateTraceparent(tp) == nil {
		ev.Traceparent = tp
	}
	return ev, true
}

// watch owns the ordered consumer, or the subscription, of one Await call.
type watch struct {
	js     StreamReader
	stream string
	filter string
	handle func(subject string, data []byte, header nats.Header)

	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
	sub  *nats.Subscription
}

func (w *watch) opened() bool { return w.cc != nil || w.sub != nil }

func (w *watch) open(ctx context.Context) error {
	if _, err := w.js.AccountInfo(ctx); errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		// A tenant's account (or its TenantJetStream, whose API prefix
		// answers no INFO): the stream is the service's, and the account
		// imports its events as they are published.
		sub, err := w.js.Conn().Subscribe(w.filter, func(m *nats.Msg) { w.handle(m.Subject, m.Data, m.Header) })
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", w.filter, err)
		}
		if err := w.js.Conn().FlushWithContext(ctx); err != nil {
			_ = sub.Unsubscribe()
			return fmt.Errorf("subscribe %s: %w", w.filter, err)
		}
		w.sub = sub
		return nil
	}
	cons, err := w.js.OrderedConsumer(ctx, w.stream, jetstream.OrderedConsumerConfig{
		// Exactly one filter: nats.go then puts it in the create request's
		// subject, where a server's permissions can scope it.
		FilterSubjects: []string{w.filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// A backstop: close deletes the consumer, but a crashed caller
		// cannot, and the server then removes it after this idle time.
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("open consumer on %s: %w", w.filter, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { w.handle(m.Subject(), m.Data(), m.Headers()) })
	if err != nil {
		w.deleteConsumer(ctx, cons)
		return fmt.Errorf("consume %s: %w", w.filter, err)
	}
	w.cons, w.cc = cons, cc
	return nil
}

// close stops delivery and deletes the server-side consumer.
func (w *watch) close(ctx context.Context) {
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
	}
	if w.cc == nil {
		return
	}
	w.cc.Stop()
	w.deleteConsumer(ctx, w.cons)
}

func (w *watch) deleteConsumer(ctx context.Context, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	// Cleanup runs even when the caller's ctx is done; bounded so a dead
	// server cannot hold the caller.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	// On failure the server's InactiveThreshold removes it later.
	_ = w.js.DeleteConsumer(dctx, w.stream, info.Name)
}
