package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// Target names, in the order Run measures them.
const (
	TargetBare = "bare"
	TargetReal = "real"
	// TargetPgx is the hand-rolled PostgreSQL claim service (pgxclaim.go),
	// measured when Config.PgxURL is set.
	TargetPgx = "pgx"
	// TargetLag is phase 2: claim + outcome pairs on the real API.
	TargetLag = "real_claim_outcome"
)

// The real target's stores (Report.Store).
const (
	StoreBolt     = "bolt"
	StorePostgres = "postgres"
)

// Modes of Run.
const (
	// ModeClaim measures the claim API against the bare server, then the
	// relay lag of claim + outcome pairs.
	ModeClaim = "claim"
	// ModeWebhook measures durable Stripe ingest against the same server's
	// verify-only route (see webhook.go).
	ModeWebhook = "webhook"
)

// Config configures Run. Start from DefaultConfig: a zero field here is
// meaningful (LagRate 0 is unlimited).
type Config struct {
	// Mode is ModeClaim or ModeWebhook.
	Mode string
	// WebhookRows is how many unknown rows ModeWebhook claims and reports
	// (timeout) before it measures; each durable delivery flips one. When
	// they run out the durable target stops early and its window shrinks
	// (the report says so).
	WebhookRows int
	// Conns is the number of concurrent keep-alive connections, one worker
	// each, used for every phase.
	Conns int
	// Warmup is sent to each phase-1 target before its first round;
	// requests started during it are not timed (their errors count).
	Warmup time.Duration
	// Duration is the measured window of each phase-1 target.
	Duration time.Duration
	// Rounds splits Duration into this many alternating bare/real (webhook
	// mode: verify-only/durable) rounds
	// (1: bare, then real). On a machine shared with other work, more
	// rounds let both targets see the same background load.
	Rounds int
	// LagDuration is how long phase 2 sends claim + outcome pairs; 0 skips
	// phase 2. ModeWebhook has no phase 2 and ignores it.
	LagDuration time.Duration
	// LagRate caps phase 2 at this many pairs a second across all
	// connections; 0 sends as fast as the connections allow (the relay then
	// falls behind and the lag measures its backlog, not its latency).
	LagRate float64
	// HalfDuration is how long ModeWebhook sends durable deliveries at half
	// the rate its durable rounds reached (the events' second phase); 0
	// skips it. ModeClaim ignores it.
	HalfDuration time.Duration
	// DrainTimeout bounds the wait, after the load (phase 2, or webhook
	// mode's last phase), for every event to be stored on the stream and
	// the outbox to empty.
	DrainTimeout time.Duration
	// RequestTimeout bounds one HTTP request.
	RequestTimeout time.Duration
	// IdempotencyKey sends an Idempotency-Key header, a new value each,
	// with every claim to the real target (claim mode; issue 34).
	IdempotencyKey bool
	// SkipBare measures only the real target (webhook mode: the durable
	// route) for profiling it alone; the ratio is then absent.
	SkipBare bool
	// APILog makes the real API log as `reconciler serve` does (JSON at info,
	// one line per claim and outcome) into io.Discard, so the cost of slog is
	// measured without flooding the terminal. Off: the API's logger discards
	// records before formatting them.
	APILog bool
	// UnsafeNoSync opens the real target's store with bolt's UnsafeNoSync:
	// no fdatasync, so no durability. It measures the ceiling the disk
	// does not set (what the HTTP path, the rules and bbolt cost); the
	// report and its table say so.
	UnsafeNoSync bool
	// PgxURL, when set, adds the pgx claim service (pgxclaim.go) on this
	// PostgreSQL to claim mode's phase 1, in the same rounds as bare and
	// real, and the report's real/pgx ratio.
	PgxURL string
	// Store, when set, is a postgres:// URL: the real target runs on
	// ledger/postgres in a fresh database made on that server for the run
	// (and dropped after it), instead of bolt in the temporary directory.
	Store string
	// NoWAL opens the real target's store without its write-ahead log
	// (bolt.Options.NoWAL): every group its own bbolt commit.
	NoWAL bool
	// Dir is where the temporary data directory is created ("" = os.TempDir()).
	Dir string
	// Logger receives the program's progress lines (nil: discarded).
	Logger *slog.Logger
	// Now is the clock of every measurement (nil: time.Now). It must carry a
	// monotonic reading, as time.Now does.
	Now func() time.Time

	// BeforeLoad, when set, is called once after the targets are up (and
	// webhook mode's rows claimed), just before the first request: the
	// place to start a CPU profile that leaves the setup out. An error
	// ends Run.
	BeforeLoad func() error
	// AfterLoad, when set, is called once in webhook mode when the last
	// delivery is answered, before the wait for the events and the check
	// of the rows: the place to stop that profile, so it holds the
	// measured load only.
	AfterLoad func()

	// afterWebhook, when set, sees the store after ModeWebhook's load,
	// before it is closed (tests check the rows themselves).
	afterWebhook func(ctx context.Context, st ledger.Store, rows []rowRef, acked []ackedDelivery)
}

// DefaultConfig is what `go run ./cmd/httpload` runs: 64 connections, 2 s
// warm-up and 10 s measured per target, 5 s of phase 2 at 50 pairs/s (the
// relay's latency, well under its capacity of a few hundred a second), so
// the whole run stays under 60 s (see MaxRunTime).
func DefaultConfig() Config {
	return Config{
		Mode:           ModeClaim,
		WebhookRows:    50000,
		Conns:          64,
		Warmup:         2 * time.Second,
		Duration:       10 * time.Second,
		Rounds:         1,
		LagDuration:    5 * time.Second,
		LagRate:        50,
		HalfDuration:   5 * time.Second,
		DrainTimeout:   15 * time.Second,
		RequestTimeout: 5 * time.Second,
		APILog:         true,
	}
}

// MaxRunTime is the longest the load phases of c can take: every phase's
// sending time, a straggling request at the end of each, and the drain
// timeout. Start-up and shutdown (about a second) come on top, and in
// ModeWebhook the claiming of WebhookRows rows before the load.
func (c Config) MaxRunTime() time.Duration {
	targets := 2
	if c.SkipBare {
		targets = 1
	}
	if c.PgxURL != "" && c.Mode == ModeClaim {
		targets++
	}
	total := time.Duration(targets) * (c.Warmup + c.Duration + time.Duration(c.Rounds)*c.RequestTimeout)
	switch {
	case c.Mode == ModeWebhook:
		total += c.RequestTimeout + c.DrainTimeout
		if c.HalfDuration > 0 {
			total += c.HalfDuration + c.RequestTimeout
		}
	case c.LagDuration > 0:
		total += c.LagDuration + c.RequestTimeout + c.DrainTimeout
	}
	return total
}

// Validate reports the first setting that cannot run.
func (c Config) Validate() error {
	switch {
	case c.Mode != ModeClaim && c.Mode != ModeWebhook:
		return fmt.Errorf("mode %q: want %q or %q", c.Mode, ModeClaim, ModeWebhook)
	case c.Mode == ModeWebhook && (c.WebhookRows < 1 || c.WebhookRows > 10_000_000):
		return fmt.Errorf("webhook rows %d: want 1 to 10000000", c.WebhookRows)
	case c.Conns < 1 || c.Conns > 4096:
		return fmt.Errorf("conns %d: want 1 to 4096", c.Conns)
	case c.Warmup < 0:
		return errors.New("warmup: negative")
	case c.Duration <= 0:
		return errors.New("duration: want > 0")
	case c.Rounds < 1 || c.Rounds > 100:
		return fmt.Errorf("rounds %d: want 1 to 100", c.Rounds)
	case c.Duration/time.Duration(c.Rounds) < 10*time.Millisecond:
		return errors.New("rounds: each round needs at least 10ms of duration")
	case c.LagDuration < 0:
		return errors.New("lag duration: negative")
	case c.LagRate < 0:
		return errors.New("lag rate: negative")
	case c.HalfDuration < 0:
		return errors.New("half duration: negative")
	case (c.LagDuration > 0 || c.Mode == ModeWebhook) && c.DrainTimeout <= 0:
		return errors.New("drain timeout: want > 0 when phase 2 or webhook mode runs")
	case c.RequestTimeout <= 0:
		return errors.New("request timeout: want > 0")
	case c.Store != "" && (c.UnsafeNoSync || c.NoWAL):
		return errors.New("store: -unsafe-nosync and -no-wal are bolt's; not with a PostgreSQL store")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
