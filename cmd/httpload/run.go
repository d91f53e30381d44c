package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// ErrEventsMissing means an outcome answered 2xx but its event had not been
// stored on the stream when the drain timeout passed.
var ErrEventsMissing = errors.New("events missing after drain")

// drainPoll is how often the drain checks whether every event has arrived.
const drainPoll = 10 * time.Millisecond

// Run measures bare, then real (alternating cfg.Rounds times), then, when
// cfg.LagDuration > 0, claim + outcome pairs on real with relay lag, and
// returns the report. A failure to start a target or ErrEventsMissing is an
// error; failed requests are counted in the report (see
// Report.ErrorCount), not returned. The report comes back with
// ErrEventsMissing too, so a caller can still print it.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("httpload: config: %w", err)
	}
	cfg = cfg.withDefaults()
	rep := &Report{
		Conns: cfg.Conns, WarmupMS: ms(cfg.Warmup), DurationMS: ms(cfg.Duration), Rounds: cfg.Rounds,
		GOMAXPROCS: runtime.GOMAXPROCS(0), APILog: cfg.APILog, UnsafeNoSync: cfg.UnsafeNoSync, Mode: cfg.Mode,
		Store: StoreBolt,
	}
	if cfg.Store != "" {
		rep.Store = StorePostgres
	}
	if cfg.Mode == ModeWebhook {
		return rep, runWebhook(ctx, cfg, rep)
	}
	// Both targets run for the whole measurement, so rounds can alternate;
	// the one not under load is idle (the relay wakes once a second).
	var bare *httpServer
	if !cfg.SkipBare {
		if bare, err = serve(bareHandler(), cfg.Logger); err != nil {
			return nil, fmt.Errorf("httpload: bare target: %w", err)
		}
		defer func() {
			if cerr := bare.close(context.WithoutCancel(ctx)); cerr != nil {
				err = errors.Join(err, fmt.Errorf("httpload: close bare target: %w", cerr))
			}
		}()
	}
	var pg *pgxTarget
	if cfg.PgxURL != "" {
		if pg, err = startPgx(ctx, cfg.PgxURL, cfg.Conns, cfg.Now, func(h http.Handler) (*httpServer, error) { return serve(h, cfg.Logger) }); err != nil {
			return nil, fmt.Errorf("httpload: pgx target: %w", err)
		}
		defer func() {
			if cerr := pg.close(context.WithoutCancel(ctx)); cerr != nil {
				err = errors.Join(err, fmt.Errorf("httpload: close pgx target: %w", cerr))
			}
		}()
	}
	rt, err := startReal(ctx, cfg.Dir, realOptions{apiLog: cfg.APILog, unsafeNoSync: cfg.UnsafeNoSync, noWAL: cfg.NoWAL, pgURL: cfg.Store, now: cfg.Now}, cfg.Logger)
	if err != nil {
		return rep, fmt.Errorf("httpload: real target: %w", err)
	}
	defer func() {
		if cerr := rt.close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("httpload: close real target: %w", cerr))
		}
	}()
	if cfg.BeforeLoad != nil {
		if err := cfg.BeforeLoad(); err != nil {
			return rep, fmt.Errorf("httpload: before load: %w", err)
		}
	}
	return rep, measure(ctx, cfg, bare, pg, rt, rep)
}

// claim is phase 1's op: one claim that inserts a row.
func claim(ctx context.Context, w *worker, phase string, seq int) error {
	return w.post(ctx, "/v1/claims", w.claimBody(phase, seq), http.StatusCreated, nil)
}

// measure runs phase 1 (bare when given, and real, in rounds) and phase 2.
func measure(ctx context.Context, cfg Config, bare *httpServer, pg *pgxTarget, rt *realTarget, rep *Report) error {
	log := cfg.Logger
	bareClient := newClient(cfg.Conns, cfg.RequestTimeout)
	defer bareClient.CloseIdleConnections()
	pgClient := newClient(cfg.Conns, cfg.RequestTimeout)
	defer pgClient.CloseIdleConnections()
	realClient := newClient(cfg.Conns, cfg.RequestTimeout)
	defer realClient.CloseIdleConnections()

	var bareRes, pgRes, realRes phaseResult
	var boltSum bolt.Stats
	var boltWall time.Duration
	perRound := cfg.Duration / time.Duration(cfg.Rounds)
	for r := range cfg.Rounds {
		spec := phaseSpec{
			conns: cfg.Conns, duration: perRound, now: cfg.Now, iter: claim,
		}
		if r == 0 {
			spec.warmup = cfg.Warmup // connections stay open for later rounds
		}
		suffix := ""
		if cfg.Rounds > 1 {
			suffix = "-r" + strconv.Itoa(r)
		}
		if bare != nil {
			s := spec
			s.name, s.base, s.client = TargetBare+suffix, bare.url, bareClient
			log.Info("measuring", "target", TargetBare, "round", r, "conns", cfg.Conns, "warmup", s.warmup, "duration", s.duration)
			bareRes.add(drive(ctx, s))
		}
		if pg != nil {
			s := spec
			s.name, s.base, s.client = TargetPgx+suffix, pg.http.url, pgClient
			log.Info("measuring", "target", TargetPgx, "round", r, "conns", cfg.Conns, "warmup", s.warmup, "duration", s.duration)
			pgRes.add(drive(ctx, s))
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("httpload: %w", err)
		}
		s := spec
		s.name, s.base, s.token, s.client = TargetReal+suffix, rt.http.url, rt.token, realClient
		s.idemKey = cfg.IdempotencyKey
		log.Info("measuring", "target", TargetReal, "round", r, "conns", cfg.Conns, "warmup", s.warmup, "duration", s.duration)
		st0, t0 := rt.stats(), cfg.Now()
		realRes.add(drive(ctx, s))
		boltSum = addStats(boltSum, rt.stats(), st0)
		boltWall += cfg.Now().Sub(t0)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("httpload: %w", err)
		}
	}
	if bare != nil {
		rep.Targets = append(rep.Targets, targetResult(TargetBare, cfg.Conns, 1, bareRes))
	}
	var pgTR TargetResult
	if pg != nil {
		pgTR = targetResult(TargetPgx, cfg.Conns, 1, pgRes)
		rep.Targets = append(rep.Targets, pgTR)
	}
	realTR := targetResult(TargetReal, cfg.Conns, 1, realRes)
	rep.Targets = append(rep.Targets, realTR)
	if pg != nil && pgTR.OpsPerSec > 0 {
		rep.RealOverPgx = realTR.OpsPerSec / pgTR.OpsPerSec
		if n, err := pg.rows(ctx); err != nil || n < int64(pgTR.Ops) {
			return fmt.Errorf("httpload: pgx table holds %d rows after %d acknowledged claims (%v)", n, pgTR.Ops, err)
		}
	}
	rep.Bolt = boltStats(boltSum, boltWall)
	if bare != nil && rep.Targets[0].Target == TargetBare && rep.Targets[0].OpsPerSec > 0 {
		rep.RealOverBare = realTR.OpsPerSec / rep.Targets[0].OpsPerSec
	}
	if cfg.LagDuration == 0 {
		return nil
	}
	return measureLag(ctx, cfg, rt, realClient, rep)
}

// measureLag is phase 2: claim + outcome pairs on real, and the relay lag
// of the events they write.
func measureLag(ctx context.Context, cfg Config, rt *realTarget, client *http.Client, rep *Report) error {
	log := cfg.Logger
	tracker := newLagTracker()
	obs, err := startObserver(ctx, rt.ns.ClientURL(), tracker, cfg.Now, log)
	if err != nil {
		return fmt.Errorf("httpload: %w", err)
	}
	defer obs.stop()

	log.Info("measuring", "target", TargetLag, "conns", cfg.Conns, "duration", cfg.LagDuration, "rate", cfg.LagRate)
	p2 := phaseSpec{
		name: TargetLag, base: rt.http.url, token: rt.token, client: client, conns: cfg.Conns,
		duration: cfg.LagDuration, limit: rate.Limit(cfg.LagRate), now: cfg.Now,
	}
	p2.iter = func(ctx context.Context, w *worker, phase string, seq int) error {
		var claimed struct {
			Row struct {
				Key string `json:"key"`
			} `json:"row"`
		}
		if err := w.post(ctx, "/v1/claims", w.claimBody(phase, seq), http.StatusCreated, &claimed); err != nil {
			return err
		}
		if claimed.Row.Key == "" {
			return errors.New("claim answer has no row key")
		}
		if err := w.post(ctx, "/v1/claims/"+claimed.Row.Key+"/outcome", []byte(`{"kind":"timeout"}`), http.StatusOK, nil); err != nil {
			return err
		}
		tracker.ack(claimed.Row.Key, cfg.Now())
		return nil
	}
	res := drive(ctx, p2)
	loadEnd := cfg.Now()
	rep.Targets = append(rep.Targets, targetResult(TargetLag, cfg.Conns, 2, res))

	rl := &RelayResult{PairsPerSecLimit: cfg.LagRate}
	rep.Relay = rl
	if rl.OutboxDepthAtLoadEnd, err = rt.outboxDepth(ctx); err != nil {
		return fmt.Errorf("httpload: %w", err)
	}
	drained := waitDrained(ctx, tracker, rt, cfg.DrainTimeout)
	if rl.OutboxDepthAfterDrain, err = rt.outboxDepth(ctx); err != nil {
		return fmt.Errorf("httpload: %w", err)
	}
	if rl.StreamMsgs, err = streamMsgs(ctx, rt); err != nil {
		return fmt.Errorf("httpload: %w", err)
	}

	s := tracker.snapshot()
	rl.Outcomes, rl.Delivered, rl.Missing = s.acked, len(s.lags), s.missing
	rl.Unmatched, rl.Duplicates, rl.BeforeAck = s.unmatched, s.dupes, s.beforeAck
	rl.LagP50MS = ms(percentile(s.lags, 0.50))
	rl.LagP99MS = ms(percentile(s.lags, 0.99))
	rl.LagMaxMS = ms(percentile(s.lags, 1))
	if !s.last.IsZero() {
		rl.DrainMS = ms(max(s.last.Sub(loadEnd), 0))
		if span := s.last.Sub(s.first); span > 0 {
			rl.EventsPerSec = float64(rl.Delivered) / span.Seconds()
		}
	}
	if !drained || rl.Missing > 0 || rl.OutboxDepthAfterDrain > 0 {
		return fmt.Errorf("httpload: %w: %d of %d outcomes have no event on the stream and %d records are still in the outbox after %s",
			ErrEventsMissing, rl.Missing, rl.Outcomes, rl.OutboxDepthAfterDrain, cfg.DrainTimeout)
	}
	return nil
}

// waitDrained polls until every acknowledged outcome's event has arrived
// and the relay has deleted every outbox record (it deletes after the
// PubAck, so a record can outlive its delivery by one commit), and reports
// whether that happened within timeout.
func waitDrained(ctx context.Context, t *lagTracker, rt *realTarget, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	done := func() bool {
		if t.missing() > 0 {
			return false
		}
		depth, err := rt.outboxDepth(ctx)
		return err == nil && depth == 0
	}
	for !done() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return done()
		case <-tick.C:
		}
	}
	return true
}

// streamMsgs is the number of messages the event stream holds.
func streamMsgs(ctx context.Context, rt *realTarget) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := rt.js.Stream(ctx, events.DefaultStream)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	return info.State.Msgs, nil
}

// addStats adds the committer's counters between snapshots a and b to sum.
func addStats(sum, b, a bolt.Stats) bolt.Stats {
	sum.Groups += b.Groups - a.Groups
	sum.Ops += b.Ops - a.Ops
	sum.Rollbacks += b.Rollbacks - a.Rollbacks
	sum.RunTime += b.RunTime - a.RunTime
	sum.CommitTime += b.CommitTime - a.CommitTime
	return sum
}

// boltStats turns the committer's counters over wall into the report's figures.
func boltStats(d bolt.Stats, wall time.Duration) BoltStats {
	out := BoltStats{Groups: d.Groups, Ops: d.Ops}
	if d.Groups > 0 {
		g := float64(d.Groups)
		out.MeanGroup = float64(d.Ops) / g
		out.CommitMSPerGroup = ms(d.CommitTime) / g
		out.RunMSPerGroup = ms(d.RunTime) / g
		if wall > 0 {
			out.CommitterBusy = float64(d.CommitTime+d.RunTime) / float64(wall)
		}
	}
	return out
}
