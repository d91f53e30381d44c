package bolt

import (
	"context"
	"fmt"
	"io"
)

// BackupInfo describes a backup: the rows it holds, the outbox records a
// node restored from it publishes again, and its size in bytes.
type BackupInfo struct {
	Rows, Outbox, Bytes int64
}

// Backup writes a consistent copy of the file to w from one bbolt read
// transaction (Tx.WriteTo): the copy is the file as of the last commit
// before the call, and the committer goes on committing meanwhile — bbolt
// keeps the pages the transaction reads until it ends, so a long backup
// costs file growth, never a pause. (A writer waits for readers only to
// remap a file grown past its memory map; Options.InitialMmapSize, 1 GiB
// by default, keeps that from happening until the file outgrows it.)
//
// start, when not nil, learns the copy's size and row count before the
// first byte is written (an HTTP answer's headers). ctx ends the copy
// between writes.
func (s *Store) Backup(ctx context.Context, w io.Writer, start func(BackupInfo) error) (BackupInfo, error) {
	var info BackupInfo
	// With the write-ahead log, bbolt first takes every write acknowledged
	// before the backup began; the copy is then bbolt's file alone (its
	// wal_index says which log records it holds), read below without the
	// log's layers so that the counts describe the copy.
	if err := s.Flush(ctx); err != nil {
		return info, fmt.Errorf("backup: %w", err)
	}
	err := s.viewBolt(ctx, func(tx *boltTx) error {
		m := tx.bucket(bucketMeta)
		for _, st := range allStatuses {
			info.Rows += readCount(m, st)
		}
		info.Outbox = int64(tx.bucket(bucketOutbox).KeyN())
		info.Bytes = tx.tx.Size()
		if start != nil {
			if err := start(info); err != nil {
				return err
			}
		}
		n, err := tx.tx.WriteTo(ctxWriter{ctx, w})
		if err != nil {
			return fmt.Errorf("backup: %w (after %d bytes)", err, n)
		}
		if n != info.Bytes {
			return fmt.Errorf("backup: wrote %d bytes, want %d", n, info.Bytes)
		}
		return nil
	})
	return info, err
}

// ctxWriter ends a copy once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
