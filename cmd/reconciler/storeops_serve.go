package main

import (
	"context"
	"errors"
	"io"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/retention"
)

// startRetention runs the retention job (docs/architecture.md §15) when
// retention.settled_rows is set. Every replica of a shared PostgreSQL runs
// one; their deletes are conditional, so they do not delete twice.
func (m *Main) startRetention(st ledger.Store, reg prometheus.Registerer) error {
	cfg := m.Config.Retention
	if cfg.SettledRows <= 0 {
		return nil
	}
	o := retention.Options{
		SettledRows: cfg.SettledRows, ArchiveDir: cfg.ArchiveDir,
		Now: m.Now, Logger: m.Logger.With("component", "retention"), Registerer: reg,
	}
	if b, ok := st.(*bolt.Store); ok {
		o.File = func(ctx context.Context) (retention.FileStats, error) {
			fs, err := b.FileStats(ctx)
			return retention.FileStats{Size: fs.Size, FreePages: fs.FreePages}, err
		}
	}
	j, err := retention.New(st, o)
	if err != nil {
		return err
	}
	m.Logger.Info("retention deletes settled rows", "settled_rows", cfg.SettledRows.String(), "archive_dir", cfg.ArchiveDir)
	m.goUntilClose(stageResolver, "retention", j.Run)
	return nil
}

// boltBackup serves GET /v1/admin/backup from the bolt store.
type boltBackup struct{ s *bolt.Store }

func (b boltBackup) Backup(ctx context.Context, w io.Writer, start func(rows, bytes int64) error) error {
	_, err := b.s.Backup(ctx, w, func(i bolt.BackupInfo) error { return start(i.Rows, i.Bytes) })
	return err
}

// backuperOf is the store's online backup: bolt has one; PostgreSQL has
// pg_dump and point-in-time recovery instead (nil: 501).
func backuperOf(st ledger.Store) api.Backuper {
	if b, ok := st.(*bolt.Store); ok {
		return boltBackup{b}
	}
	return nil
}

// storeWritesCheck is the /readyz check "store_writes" of a bolt store:
// failing, with its detail, while commits fail (a full disk), and trying
// a write now and then so the node comes back by itself once they
// succeed (bolt.Store.Writable).
func storeWritesCheck(st ledger.Store) []api.ReadyCheck {
	b, ok := st.(*bolt.Store)
	if !ok {
		return nil
	}
	return []api.ReadyCheck{{Name: "store_writes", Check: func(ctx context.Context) error {
		err := b.Writable(ctx)
		if err == nil {
			return nil
		}
		what := "the ledger's writes fail"
		if errors.Is(err, bolt.ErrDiskFull) {
			what = "disk full: the ledger's writes fail"
		}
		return &api.Unready{Detail: what + "; claims and webhooks answer 503 until a write succeeds"}
	}}}
}
