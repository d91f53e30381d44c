package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/ledger"
)

// rowsCollector serves reconciler_rows{status} (docs/architecture.md §6a) from
// the store's counts, read at most every maxAge and within timeout, so a
// scrape never waits long on a slow database.
type rowsCollector struct {
	store   ledger.Counts
	desc    *prometheus.Desc
	log     *slog.Logger
	maxAge  time.Duration
	timeout time.Duration
	now     func() time.Time

	mu     sync.Mutex
	at     time.Time
	counts map[ledger.Status]int64
}

func newRowsCollector(st ledger.Counts, log *slog.Logger, now func() time.Time) *rowsCollector {
	return &rowsCollector{
		store: st, log: log, now: now, maxAge: 10 * time.Second, timeout: 2 * time.Second,
		desc: prometheus.NewDesc("reconciler_rows", "Ledger rows by status.", []string{"status"}, nil),
	}
}

func (c *rowsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *rowsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil || c.now().Sub(c.at) >= c.maxAge {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		counts, err := c.store.CountRows(ctx)
		cancel()
		if err != nil {
			c.log.Warn("reconciler_rows: counting rows failed", "err", err)
		} else {
			c.counts, c.at = counts, c.now()
		}
	}
	for st, n := range c.counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(st))
	}
}
