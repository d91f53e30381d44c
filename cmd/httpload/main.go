package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("httpload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Mode, "mode", cfg.Mode, "claim: claim API vs bare echo, then relay lag; webhook: durable Stripe ingest vs the verify-only route")
	fs.IntVar(&cfg.WebhookRows, "webhook-rows", cfg.WebhookRows, "webhook mode: unknown rows claimed before the load (one per durable delivery)")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "concurrent keep-alive connections per target")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up per phase-1 target, not measured")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time per phase-1 target")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "split -duration into this many alternating bare/real (verify-only/durable) rounds (a noisy machine)")
	fs.DurationVar(&cfg.LagDuration, "lag-duration", cfg.LagDuration, "claim mode's phase 2 (claim + outcome, relay lag) duration; 0 skips it")
	fs.Float64Var(&cfg.LagRate, "lag-rate", cfg.LagRate, "phase 2 pairs per second; 0 = as fast as the connections go")
	fs.DurationVar(&cfg.HalfDuration, "half-duration", cfg.HalfDuration, "webhook mode: durable deliveries at half the peak's rate for this long, for the events' lag; 0 skips it")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "wait for every event after the load (phase 2, webhook mode)")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "timeout of one HTTP request")
	fs.BoolVar(&cfg.IdempotencyKey, "idempotency-key", false, "claim mode: every claim to the real target carries an Idempotency-Key, a new value each (what the header costs; run with and without)")
	fs.BoolVar(&cfg.SkipBare, "skip-bare", false, "measure only the real (webhook mode: durable) target (profiling)")
	fs.BoolVar(&cfg.APILog, "api-log", cfg.APILog, "the API logs JSON at info as serve does (into io.Discard)")
	fs.BoolVar(&cfg.UnsafeNoSync, "unsafe-nosync", false, "open the real target's store without fdatasync: a ceiling with no durability, for comparison only")
	fs.StringVar(&cfg.PgxURL, "pgx-url", "", "claim mode: also measure the hand-rolled pgx claim service on this PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/test); the report adds real/pgx")
	fs.StringVar(&cfg.Store, "store", "", "run the real target on PostgreSQL: a postgres:// URL of a server where the run creates (and then drops) a fresh database; empty: bolt")
	fs.BoolVar(&cfg.NoWAL, "no-wal", false, "open the real target's store without its write-ahead log (every group its own bbolt commit, as before issue 32)")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary data directory (default: the system temp dir)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the load phases (not the setup; in webhook mode not the events' drain and the rows' check) to this file")
	verbose := fs.Bool("v", false, "progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "httpload: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "httpload: %v\n", err)
		return 2
	}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "httpload: cpu profile: %v\n", err)
			return 1
		}
		defer f.Close()
		// The profile starts when the load does, so the targets' start-up
		// and webhook mode's row claiming stay out of it.
		started := false
		cfg.BeforeLoad = func() error {
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("cpu profile: %w", err)
			}
			started = true
			return nil
		}
		stop := func() {
			if started {
				pprof.StopCPUProfile()
				started = false
			}
		}
		// Webhook mode stops it when the load does (the drain's outbox
		// polls and the rows' check are not the ingest path).
		cfg.AfterLoad = stop
		defer stop()
	}

	rep, err := Run(ctx, cfg)
	if rep != nil {
		write := rep.WriteTable
		if *asJSON {
			write = rep.WriteJSON
		}
		if werr := write(stdout); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "httpload: %v\n", err)
		return 1
	}
	if n := rep.ErrorCount(); n > 0 {
		fmt.Fprintf(stderr, "httpload: %d requests failed; the figures are not a valid measurement\n", n)
		return 1
	}
	return 0
}
