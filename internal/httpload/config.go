package httpload

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Target names, in the order Run measures them.
const (
	TargetBare = "bare"
	TargetReal = "real"
	// TargetLag is phase 2: claim + outcome pairs on the real API.
	TargetLag = "real_claim_outcome"
)

// Config configures Run. Start from DefaultConfig: a zero field here is
// meaningful (LagRate 0 is unlimited).
type Config struct {
	// Conns is the number of concurrent keep-alive connections, one worker
	// each, used for every phase.
	Conns int
	// Warmup is sent to each phase-1 target before its first round;
	// requests started during it are not timed (their errors count).
	Warmup time.Duration
	// Duration is the measured window of each phase-1 target.
	Duration time.Duration
	// Rounds splits Duration into this many alternating bare/real rounds
	// (1: bare, then real). On a machine shared with other work, more
	// rounds let both targets see the same background load.
	Rounds int
	// LagDuration is how long phase 2 sends claim + outcome pairs; 0 skips
	// phase 2.
	LagDuration time.Duration
	// LagRate caps phase 2 at this many pairs a second across all
	// connections; 0 sends as fast as the connections allow (the relay then
	// falls behind and the lag measures its backlog, not its latency).
	LagRate float64
	// DrainTimeout bounds the wait, after phase 2, for every event to be
	// stored on the stream.
	DrainTimeout time.Duration
	// RequestTimeout bounds one HTTP request.
	RequestTimeout time.Duration
	// SkipBare measures only the real target (for profiling it alone); the
	// ratio is then absent.
	SkipBare bool
	// APILog makes the real API log as `reconciler serve` does (JSON at info,
	// one line per claim and outcome) into io.Discard, so the cost of slog is
	// measured without flooding the terminal. Off: the API's logger discards
	// records before formatting them.
	APILog bool
	// Dir is where the temporary data directory is created ("" = os.TempDir()).
	Dir string
	// Logger receives the program's progress lines (nil: discarded).
	Logger *slog.Logger
	// Now is the clock of every measurement (nil: time.Now). It must carry a
	// monotonic reading, as time.Now does.
	Now func() time.Time
}

// DefaultConfig is what `go run ./cmd/httpload` runs: 64 connections, 2 s
// warm-up and 10 s measured per target, 5 s of phase 2 at 50 pairs/s (the
// relay's latency, well under its capacity of a few hundred a second), so
// the whole run stays under 60 s (see MaxRunTime).
func DefaultConfig() Config {
	return Config{
		Conns:          64,
		Warmup:         2 * time.Second,
		Duration:       10 * time.Second,
		Rounds:         1,
		LagDuration:    5 * time.Second,
		LagRate:        50,
		DrainTimeout:   15 * time.Second,
		RequestTimeout: 5 * time.Second,
		APILog:         true,
	}
}

// MaxRunTime is the longest the load phases of c can take: every phase's
// sending time, a straggling request at the end of each, and the drain
// timeout. Start-up and shutdown (about a second) come on top.
func (c Config) MaxRunTime() time.Duration {
	targets := 2
	if c.SkipBare {
		targets = 1
	}
	total := time.Duration(targets) * (c.Warmup + c.Duration + time.Duration(c.Rounds)*c.RequestTimeout)
	if c.LagDuration > 0 {
		total += c.LagDuration + c.RequestTimeout + c.DrainTimeout
	}
	return total
}

// Validate reports the first setting that cannot run.
func (c Config) Validate() error {
	switch {
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
	case c.LagDuration > 0 && c.DrainTimeout <= 0:
		return errors.New("drain timeout: want > 0 when phase 2 runs")
	case c.RequestTimeout <= 0:
		return errors.New("request timeout: want > 0")
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
