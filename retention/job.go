package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/internal/promreg"
	"github.com/agentledger/reconciler/ledger"
)

// Defaults of Options.
const (
	DefaultBatch    = 256
	DefaultInterval = time.Minute
	DefaultPause    = 20 * time.Millisecond
)

// FileStats is what a store with a file reports (bolt.Store.FileStats).
type FileStats struct {
	Size      int64
	FreePages int
}

// Options configure a Job.
type Options struct {
	// SettledRows is how long a settled row is kept after it settled
	// (retention.settled_rows). Required.
	SettledRows time.Duration
	// ArchiveDir, when set, receives every row before it is deleted.
	ArchiveDir string
	// Batch is how many rows one delete carries (default 256): the bound
	// on how long a batch holds the store's writer.
	Batch int
	// Interval is the time between sweeps (default 1 min); Pause the time
	// between the batches of one sweep (default 20 ms), so claims queued
	// behind a batch run before the next one.
	Interval, Pause time.Duration
	// File reports the store's file (nil: a store without one).
	File func(context.Context) (FileStats, error)
	// Now is the clock (default time.Now).
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Job deletes expired rows.
type Job struct {
	st ledger.Retention
	o  Options
	m  metrics
	// deferred is set while the store defers retention, so that is
	// logged once, not every sweep.
	deferred bool
}

type metrics struct {
	deleted          prometheus.Counter
	archived         prometheus.Counter
	oldest           prometheus.Gauge
	fileSize, freePg prometheus.Gauge
}

// New returns a job over st.
func New(st ledger.Retention, o Options) (*Job, error) {
	if o.SettledRows <= 0 {
		return nil, errors.New("retention: settled_rows must be positive")
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Pause <= 0 {
		o.Pause = DefaultPause
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.ArchiveDir != "" {
		if err := os.MkdirAll(o.ArchiveDir, 0o700); err != nil {
			return nil, fmt.Errorf("retention: archive_dir: %w", err)
		}
	}
	j := &Job{st: st, o: o}
	var err error
	reg := o.Registerer
	if j.m.deleted, err = promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reconciler_retention_rows_deleted_total", Help: "Settled rows deleted by retention.",
	})); err != nil {
		return nil, err
	}
	if j.m.archived, err = promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reconciler_retention_rows_archived_total", Help: "Rows appended to retention's archive before their delete.",
	})); err != nil {
		return nil, err
	}
	if j.m.oldest, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "reconciler_retention_oldest_settled_age_seconds", Help: "Age of the oldest settled row kept, at the last sweep (0: none).",
	})); err != nil {
		return nil, err
	}
	if o.File != nil {
		if j.m.fileSize, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reconciler_store_file_bytes", Help: "Bytes of the ledger file up to its high-water mark, at the last sweep (bbolt never lowers it; reconciler compact does).",
		})); err != nil {
			return nil, err
		}
		if j.m.freePg, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reconciler_store_free_pages", Help: "Pages of the ledger file free for reuse, at the last sweep.",
		})); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// Run sweeps at once and then every Interval until ctx ends. A failed
// sweep is logged and retried at the next interval.
func (j *Job) Run(ctx context.Context) error {
	t := time.NewTicker(j.o.Interval)
	defer t.Stop()
	for {
		if _, err := j.Sweep(ctx); err != nil && ctx.Err() == nil {
			j.o.Logger.Warn("retention sweep failed; retried at the next interval", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep deletes expired rows batch by batch until a batch comes back
// short, and returns how many it deleted.
func (j *Job) Sweep(ctx context.Context) (int, error) {
	total := 0
	defer j.observe(ctx)
	for {
		now := j.o.Now()
		cutoff := now.Add(-j.o.SettledRows)
		rows, err := j.st.ExpiredRows(ctx, cutoff, j.o.Batch)
		if errors.Is(err, ledger.ErrRetentionDeferred) {
			if !j.deferred {
				j.o.Logger.Warn("retention waits for the event relay: the outbox is too long to tell which rows still have an event to publish", "err", err)
			}
			j.deferred = true
			return total, nil
		}
		if err != nil {
			return total, err
		}
		j.deferred = false
		if len(rows) == 0 {
			return total, nil
		}
		if j.o.ArchiveDir != "" {
			if _, err := appendArchive(j.o.ArchiveDir, rows, now); err != nil {
				return total, err // nothing deleted: a row is archived first or kept
			}
			j.m.archived.Add(float64(len(rows)))
		}
		n, err := j.st.DeleteExpired(ctx, cutoff, rows)
		if err != nil {
			return total, err
		}
		total += n
		j.m.deleted.Add(float64(n))
		if n > 0 {
			j.o.Logger.Debug("retention deleted a batch", "rows", n, "cutoff", cutoff)
		}
		if len(rows) < j.o.Batch {
			if total > 0 {
				j.o.Logger.Info("retention deleted settled rows", "rows", total, "cutoff", cutoff)
			}
			return total, nil
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(j.o.Pause):
		}
	}
}

// observe sets the gauges after a sweep; a failure only leaves them stale.
func (j *Job) observe(ctx context.Context) {
	if at, err := j.st.OldestSettled(ctx); err == nil {
		age := 0.0
		if !at.IsZero() {
			age = max(0, j.o.Now().Sub(at).Seconds())
		}
		j.m.oldest.Set(age)
	}
	if j.o.File != nil {
		if fs, err := j.o.File(ctx); err == nil {
			j.m.fileSize.Set(float64(fs.Size))
			j.m.freePg.Set(float64(fs.FreePages))
		}
	}
}
