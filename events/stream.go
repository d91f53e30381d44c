package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of the event stream (docs/architecture.md §6).
const (
	DefaultStream        = "RECON"
	DefaultSubjectPrefix = "recon"
	// DefaultDuplicates is the stream's de-duplication window: a relay that
	// republishes an event within it (restart before AckEvents) is stored once.
	DefaultDuplicates = time.Hour
	// DefaultWorkStream holds the outbox autonomy's work items (§11).
	DefaultWorkStream = "RECON_WORK"
)

// WorkSubjectPrefix is the first token(s) of the work items' subjects for
// an event subject prefix: <prefix>_work. The design's recon.work.… would
// sit inside the event stream's recon.> subjects, and JetStream refuses
// two streams whose subjects overlap; <prefix>_work.> never overlaps
// <prefix>.>, whatever the tenants and tools are called.
func WorkSubjectPrefix(prefix string) string {
	if prefix == "" {
		prefix = DefaultSubjectPrefix
	}
	return prefix + "_work"
}

// WorkSubject is the subject a work item is published on:
// <prefix>_work.<tenant>.<tool>. A tool's dots separate subject tokens, so
// a worker takes a tenant's items with <prefix>_work.<tenant>.>, one
// vendor's with <prefix>_work.<tenant>.stripe.>, one tool's with its full
// subject.
func WorkSubject(prefix string, ev ledger.Event) (string, error) {
	if prefix == "" {
		prefix = DefaultSubjectPrefix
	}
	if err := ValidSubjectPrefix(prefix); err != nil {
		return "", err
	}
	if ev.Status != ledger.EventQueued || ev.Work == nil {
		return "", fmt.Errorf("%w: not a work item", ErrInvalidEvent)
	}
	if ledger.ValidateToolID(ev.Tenant, ev.Tool) != nil || !ledger.ValidSubjectTokens(ev.Tool) {
		return "", fmt.Errorf("%w: tenant or tool is not a subject token", ErrInvalidEvent)
	}
	if ledger.ValidateKey(ev.Key) != nil {
		return "", fmt.Errorf("%w: key", ErrInvalidEvent)
	}
	return WorkSubjectPrefix(prefix) + "." + ev.Tenant + "." + ev.Tool, nil
}

// WorkStreamConfig describes the stream that holds work items.
type WorkStreamConfig struct {
	// Name is the stream name; empty means DefaultWorkStream.
	Name string
	// SubjectPrefix is the event stream's prefix; the work stream takes
	// WorkSubjectPrefix of it. Empty means DefaultSubjectPrefix.
	SubjectPrefix string
	// Duplicates is the de-duplication window; 0 means DefaultDuplicates.
	Duplicates time.Duration
	// Replicas as in StreamConfig: 0 keeps an existing stream's count.
	Replicas int
	// MaxBytes and MaxMsgSize bound the stream as in StreamConfig. A full
	// work stream always refuses new items (discard new): dropping old
	// ones would lose queued calls.
	MaxBytes   int64
	MaxMsgSize int32
}

// EnsureWorkStream creates the work stream, or updates an existing one to
// what the relay and the workers rely on: subjects <prefix>_work.>,
// work-queue retention (a message is gone once a worker acks it; one
// consumer per subject), file storage and the duplicates window, so a
// relay that publishes a work item twice (msg id <tenant>:<key>) stores it
// once. Other settings of an existing stream are kept; one with another
// retention is an error (JetStream cannot change it).
func EnsureWorkStream(ctx context.Context, js jetstream.JetStream, cfg WorkStreamConfig) (jetstream.Stream, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultWorkStream
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = DefaultDuplicates
	}
	return ensureStream(ctx, js, streamSpec{
		name: cfg.Name, description: "reconciler work items (outbox autonomy)",
		prefix: WorkSubjectPrefix(cfg.SubjectPrefix), retention: jetstream.WorkQueuePolicy,
		duplicates: cfg.Duplicates, replicas: cfg.Replicas,
		limits: StreamLimits{MaxBytes: cfg.MaxBytes, MaxMsgSize: cfg.MaxMsgSize},
		usable: func(sc jetstream.StreamConfig) error {
			if sc.Retention != jetstream.WorkQueuePolicy || sc.Storage != jetstream.FileStorage {
				return fmt.Errorf("it has %s retention and %s storage; work items need work-queue retention and file storage (recreate it)",
					sc.Retention, sc.Storage)
			}
			return nil
		},
	})
}

// ErrInvalidEvent means an event cannot be turned into a subject (a tenant or
// run_id that is not a subject token, or a status that is not published).
var ErrInvalidEvent = errors.New("invalid event")

// StreamConfig describes the stream that holds resolution events.
type StreamConfig struct {
	// Name is the stream name; empty means DefaultStream.
	Name string
	// SubjectPrefix is the first subject token(s); empty means DefaultSubjectPrefix.
	SubjectPrefix string
	// Duplicates is the de-duplication window; 0 means DefaultDuplicates.
	Duplicates time.Duration
	// MaxAge bounds how long events are kept; 0 keeps them forever. It must
	// not be shorter than Duplicates (JetStream refuses that configuration).
	MaxAge time.Duration
	// Replicas is how many servers of a NATS cluster hold the stream (1-5).
	// 0 keeps an existing stream's count, so a stream an operator scaled up
	// is not scaled back on the next start, and creates a new one with 1.
	Replicas int
	// Limits bound the stream's size; a zero field keeps an existing
	// stream's setting (and leaves a new one unbounded in it). A MaxBytes
	// below what an existing stream holds is not applied: the server would
	// drop stored messages to meet it. The returned stream's config says
	// which limit holds.
	Limits StreamLimits
}

// StreamLimits bound a stream (cmd/reconciler's events.max_bytes,
// events.max_msg_size and events.discard).
type StreamLimits struct {
	// MaxBytes is the most the stream stores; 0 keeps an existing
	// stream's limit.
	MaxBytes int64
	// MaxMsgSize is the largest message it takes; 0 keeps the existing.
	MaxMsgSize int32
	// DiscardOld makes a full stream drop its oldest events to take a new
	// one. The default (discard new) refuses the new one instead, which
	// the relay treats as an outage: the event stays in the outbox until
	// there is room, so a full stream loses no acknowledged event.
	DiscardOld bool
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Name == "" {
		c.Name = DefaultStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	return c
}

// EnsureStream creates the event stream, or updates an existing one to what
// the relay and Await rely on: subjects <prefix>.>, the de-duplication
// window, and — when cfg sets them — max age and replicas. Every other
// setting of an existing stream (limits an operator set: max bytes, max
// messages, a max age when cfg has none, placement) is kept. It is safe to
// call on every start and from several replicas. A stream that cannot be
// looked up (other than not found) is an error, not a reason to create or
// update it from defaults: that would scale a replicated stream down.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	cfg = cfg.withDefaults()
	return ensureStream(ctx, js, streamSpec{
		name: cfg.Name, description: "reconciler resolution events",
		prefix: cfg.SubjectPrefix, retention: jetstream.LimitsPolicy,
		duplicates: cfg.Duplicates, maxAge: cfg.MaxAge, replicas: cfg.Replicas, limits: cfg.Limits,
		usable: func(sc jetstream.StreamConfig) error {
			if sc.Storage != jetstream.FileStorage {
				return fmt.Errorf("it uses %s storage; events need file storage (recreate it)", sc.Storage)
			}
			return nil
		},
	})
}

// streamSpec is what the event stream and the work stream differ in.
type streamSpec struct {
	name, description string
	prefix            string // subjects <prefix>.>
	retention         jetstream.RetentionPolicy
	duplicates        time.Duration
	maxAge            time.Duration // 0: keep an existing stream's
	replicas          int           // 0: keep an existing stream's; 1 for a new one
	limits            StreamLimits  // zero fields: keep an existing stream's
	// usable says why an existing stream cannot be updated into this one
	// (JetStream cannot change its retention or storage); nil: it can.
	usable func(jetstream.StreamConfig) error
}

// ensureStream creates the stream of spec, or updates an existing one to it:
// subjects, duplicates window, and max age and replicas when spec sets them.
// Every other setting of an existing stream is kept.
func ensureStream(ctx context.Context, js jetstream.JetStream, spec streamSpec) (jetstream.Stream, error) {
	if err := ValidSubjectPrefix(spec.prefix); err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", spec.name, err)
	}
	if spec.duplicates < 0 || spec.maxAge < 0 {
		return nil, fmt.Errorf("ensure stream %s: negative duplicates window or max age", spec.name)
	}
	if spec.replicas < 0 || spec.replicas > 5 {
		return nil, fmt.Errorf("ensure stream %s: replicas %d, want 1 to 5", spec.name, spec.replicas)
	}
	if spec.limits.MaxBytes < 0 || spec.limits.MaxMsgSize < 0 {
		return nil, fmt.Errorf("ensure stream %s: negative max bytes or max message size", spec.name)
	}
	discard := jetstream.DiscardNew
	if spec.limits.DiscardOld {
		discard = jetstream.DiscardOld
	}
	if spec.maxAge != 0 && spec.maxAge < spec.duplicates {
		return nil, fmt.Errorf("ensure stream %s: max age %s is shorter than the duplicates window %s", spec.name, spec.maxAge, spec.duplicates)
	}
	subjects := []string{spec.prefix + ".>"}
	existing, err := js.Stream(ctx, spec.name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        spec.name,
			Description: spec.description,
			Subjects:    subjects,
			Storage:     jetstream.FileStorage,
			Retention:   spec.retention,
			Duplicates:  spec.duplicates,
			MaxAge:      spec.maxAge,
			Replicas:    max(spec.replicas, 1),
			MaxBytes:    cmp.Or(spec.limits.MaxBytes, -1),
			MaxMsgSize:  cmp.Or(spec.limits.MaxMsgSize, -1),
			Discard:     discard,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another replica created it meanwhile: update that one.
			return ensureStream(ctx, js, spec)
		}
		if err != nil {
			return nil, fmt.Errorf("ensure stream %s: create: %w", spec.name, err)
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("ensure stream %s: look up: %w", spec.name, err)
	}
	sc := existing.CachedInfo().Config
	if err := spec.usable(sc); err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", spec.name, err)
	}
	sc.Subjects, sc.Duplicates = subjects, spec.duplicates
	if spec.maxAge != 0 {
		sc.MaxAge = spec.maxAge
	}
	if sc.MaxAge != 0 && sc.MaxAge < sc.Duplicates {
		return nil, fmt.Errorf("ensure stream %s: its max age %s is shorter than the duplicates window %s", spec.name, sc.MaxAge, sc.Duplicates)
	}
	if spec.replicas != 0 {
		sc.Replicas = spec.replicas
	}
	// A limit below what the stream holds would make the server drop
	// stored messages at once (queued work items among them): such a
	// limit is not applied, and the caller sees the stream's own
	// (StreamConfig.Limits says so).
	if spec.limits.MaxBytes != 0 && uint64(spec.limits.MaxBytes) >= existing.CachedInfo().State.Bytes {
		sc.MaxBytes = spec.limits.MaxBytes
	}
	if spec.limits.MaxMsgSize != 0 {
		sc.MaxMsgSize = spec.limits.MaxMsgSize
	}
	if spec.limits != (StreamLimits{}) {
		sc.Discard = discard
	}
	s, err := js.UpdateStream(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: update: %w", spec.name, err)
	}
	return s, nil
}

// Subject is the subject an event is published on:
// <prefix>.<tenant>.<run_id>.<status>.
func Subject(prefix string, ev ledger.Event) (string, error) {
	if prefix == "" {
		prefix = DefaultSubjectPrefix
	}
	if err := ValidSubjectPrefix(prefix); err != nil {
		return "", err
	}
	if ledger.ValidateTenant(ev.Tenant) != nil {
		return "", fmt.Errorf("%w: tenant is not a subject token", ErrInvalidEvent)
	}
	if ledger.ValidateRunID(ev.RunID) != nil {
		return "", fmt.Errorf("%w: run_id is not a subject token", ErrInvalidEvent)
	}
	if !publishedStatus(ev.Status) {
		return "", fmt.Errorf("%w: status %q is not published", ErrInvalidEvent, ev.Status)
	}
	if ledger.ValidateKey(ev.Key) != nil {
		return "", fmt.Errorf("%w: key", ErrInvalidEvent)
	}
	return prefix + "." + ev.Tenant + "." + ev.RunID + "." + ev.Status, nil
}

// publishedStatus reports whether status is one that goes on the stream:
// a row status, escalated, or an event of the approval gate.
func publishedStatus(status string) bool {
	switch status {
	case string(ledger.StatusSucceeded), string(ledger.StatusFailedPoison),
		string(ledger.StatusUnknown), ledger.EventEscalated,
		ledger.EventApprovalRequested, ledger.EventApproved, ledger.EventDenied, ledger.EventApprovalExpired:
		return true
	}
	return false
}

// resolution reports whether status settles a key for a waiting run; unknown
// only says the outcome is not known yet. A denial and an expiry settle it
// (the row is failed_poison); a request or a grant do not (the run claims
// again, or waits on).
func resolution(status string) bool {
	switch status {
	case string(ledger.StatusSucceeded), string(ledger.StatusFailedPoison), ledger.EventEscalated,
		ledger.EventDenied, ledger.EventApprovalExpired:
		return true
	}
	return false
}

// ValidSubjectPrefix checks a subject prefix: dot-separated tokens of
// [A-Za-z0-9_-]{1,128}, the alphabet of the run_id token that follows it.
func ValidSubjectPrefix(p string) error {
	if p == "" {
		return errors.New("empty subject prefix")
	}
	for _, tok := range strings.Split(p, ".") {
		if ledger.ValidateRunID(tok) != nil { // same token alphabet as run_id
			return fmt.Errorf("subject prefix %q: token %q is not [A-Za-z0-9_-]{1,128}", p, tok)
		}
	}
	return nil
}

// ErrStreamFull means the stream refused an event because it is at a limit
// (max_bytes, or a message over max_msg_size, with discard new): the relay
// keeps the event in the outbox, as through an outage, until there is room.
var ErrStreamFull = errors.New("the stream is full (max_bytes or max_msg_size): events wait in the outbox")

// streamFull reports whether a publish error is the stream refusing a
// message for its limits: nats-server answers "maximum bytes exceeded"
// (or "maximum messages exceeded", or a message over max_msg_size) with
// an API error of code 503 or 400.
func streamFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	d := strings.ToLower(apiErr.Description)
	return strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "maximum messages exceeded") ||
		strings.Contains(d, "message size exceeds maximum") || strings.Contains(d, "maximum message size exceeded")
}
