package events

import (
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
)

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
	if err := ValidSubjectPrefix(cfg.SubjectPrefix); err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	if cfg.Duplicates < 0 || cfg.MaxAge < 0 {
		return nil, fmt.Errorf("ensure stream %s: negative duplicates window or max age", cfg.Name)
	}
	if cfg.Replicas < 0 || cfg.Replicas > 5 {
		return nil, fmt.Errorf("ensure stream %s: replicas %d, want 1 to 5", cfg.Name, cfg.Replicas)
	}
	if cfg.MaxAge != 0 && cfg.MaxAge < cfg.Duplicates {
		return nil, fmt.Errorf("ensure stream %s: max age %s is shorter than the duplicates window %s", cfg.Name, cfg.MaxAge, cfg.Duplicates)
	}
	subjects := []string{cfg.SubjectPrefix + ".>"}
	existing, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        cfg.Name,
			Description: "reconciler resolution events",
			Subjects:    subjects,
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Duplicates:  cfg.Duplicates,
			MaxAge:      cfg.MaxAge,
			Replicas:    max(cfg.Replicas, 1),
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another replica created it meanwhile: update that one.
			return EnsureStream(ctx, js, cfg)
		}
		if err != nil {
			return nil, fmt.Errorf("ensure stream %s: create: %w", cfg.Name, err)
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("ensure stream %s: look up: %w", cfg.Name, err)
	}
	sc := existing.CachedInfo().Config
	if sc.Storage != jetstream.FileStorage {
		return nil, fmt.Errorf("ensure stream %s: it uses %s storage; events need file storage (recreate it)", cfg.Name, sc.Storage)
	}
	sc.Subjects, sc.Duplicates = subjects, cfg.Duplicates
	if cfg.MaxAge != 0 {
		sc.MaxAge = cfg.MaxAge
	}
	if sc.MaxAge != 0 && sc.MaxAge < sc.Duplicates {
		return nil, fmt.Errorf("ensure stream %s: its max age %s is shorter than the duplicates window %s", cfg.Name, sc.MaxAge, sc.Duplicates)
	}
	if cfg.Replicas != 0 {
		sc.Replicas = cfg.Replicas
	}
	s, err := js.UpdateStream(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: update: %w", cfg.Name, err)
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

// publishedStatus reports whether status is one that goes on the stream.
func publishedStatus(status string) bool {
	switch status {
	case string(ledger.StatusSucceeded), string(ledger.StatusFailedPoison),
		string(ledger.StatusUnknown), ledger.EventEscalated:
		return true
	}
	return false
}

// resolution reports whether status settles a key for a waiting run; unknown
// only says the outcome is not known yet.
func resolution(status string) bool {
	switch status {
	case string(ledger.StatusSucceeded), string(ledger.StatusFailedPoison), ledger.EventEscalated:
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
