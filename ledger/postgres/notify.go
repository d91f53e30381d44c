package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
)

// connectListener opens the dedicated LISTEN connection. It is not a pool
// connection: LISTEN belongs to a session, and the pool would hand the
// session to other callers. It dials Options.ListenURL when set, else the
// pool's URL. With channel empty it listens on the channel of the
// connection's current schema (which it returns).
func (s *Store) connectListener(ctx context.Context, channel string) (*pgx.Conn, string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.listenCfg.Copy())
	if err != nil {
		return nil, "", err
	}
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		_ = conn.Close(context.Background())
		return nil, "", fmt.Errorf("current schema: %w", err)
	}
	if channel == "" {
		channel = channelName(schema)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, "", fmt.Errorf("listen: %w", err)
	}
	return conn, schema, nil
}

// listen turns notifications on the outbox channel into Notify signals. It
// is owned by the Store: started by Open, stopped by Close (through ctx).
// When the connection drops it reconnects with backoff and signals once,
// since a notification sent while it was away is lost.
func (s *Store) listen(ctx context.Context, conn *pgx.Conn) {
	defer close(s.listenDone)
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = 50 * time.Millisecond
	eb.MaxInterval = 5 * time.Second
	eb.MaxElapsedTime = 0 // never give up while the store is open
	for {
		for conn != nil {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				_ = conn.Close(context.Background())
				conn = nil
				if ctx.Err() != nil {
					return
				}
				s.logger.Warn("postgres: listener connection lost", "err", err)
				break
			}
			eb.Reset()
			s.signal()
		}
		t := time.NewTimer(eb.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c, _, err := s.connectListener(ctx, s.channel)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.logger.Warn("postgres: listener reconnect failed", "err", err)
			continue
		}
		conn = c
		s.signal()
	}
}

// wake tells this replica's relay (Notify) and, through the notifier,
// every other replica's that a commit wrote outbox records. Called after
// the commit, so a relay woken reads them.
//
// The transaction itself sends no NOTIFY: PostgreSQL serialises every
// notifying transaction's commit, WAL flush included, behind one
// database-wide lock (so queue entries appear in commit order), which
// would end group commit for every write that appends to the outbox. A
// NOTIFY alone in its own transaction writes no WAL and holds that lock
// for a moment; the notifier sends one per ring of its doorbell, so a
// burst of commits costs one.
func (s *Store) wake() {
	s.signal()
	select {
	case s.others <- struct{}{}:
	default:
	}
}

// notifier sends the NOTIFYs wake asks for, one at a time (rings that
// come meanwhile are coalesced into the next). It is owned by the Store:
// started by Open, stopped by Close (through ctx). A NOTIFY that fails is
// not retried: the other relays read the outbox every RelayOptions.Interval
// anyway, and the next commit rings again.
func (s *Store) notifier(ctx context.Context) {
	defer close(s.notifierDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.others:
		}
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.pool.Exec(nctx, `SELECT pg_notify($1, '')`, s.channel)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.logger.Debug("postgres: notify failed", "err", err)
		}
	}
}
