package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// beginSQL opens every write transaction.
const beginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// lazyBegin is a write transaction's querier: its BEGIN is not a round
// trip of its own but goes out in front of the transaction's first
// statements. A first batch (the flows start with a locked read: a lock
// and a SELECT, pipelined) carries it in the same round trip, as does a
// COMMIT with no statement before it; a first plain statement sends it
// just before (as it always was).
type lazyBegin struct {
	conn    *pgxpool.Conn
	pending bool
}

var _ querier = (*lazyBegin)(nil)

func (l *lazyBegin) begin(ctx context.Context) error {
	if !l.pending {
		return nil
	}
	if _, err := l.conn.Conn().PgConn().Exec(ctx, beginSQL).ReadAll(); err != nil {
		return err
	}
	l.pending = false
	return nil
}

func (l *lazyBegin) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := l.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return l.conn.Exec(ctx, sql, args...)
}

func (l *lazyBegin) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := l.begin(ctx); err != nil {
		return nil, err
	}
	return l.conn.Query(ctx, sql, args...)
}

func (l *lazyBegin) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := l.begin(ctx); err != nil {
		return errRow{err}
	}
	return l.conn.QueryRow(ctx, sql, args...)
}

// SendBatch sends b with the BEGIN in front when it is still pending, and
// reads the BEGIN's answer before handing the results back, so the caller
// reads its own statements' as if b had gone alone.
func (l *lazyBegin) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !l.pending {
		return l.conn.SendBatch(ctx, b)
	}
	l.pending = false
	withBegin := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	withBegin.Queue(beginSQL)
	withBegin.QueuedQueries = append(withBegin.QueuedQueries, b.QueuedQueries...)
	return &afterBegin{BatchResults: l.conn.SendBatch(ctx, withBegin)}
}

// afterBegin reads a batch's leading BEGIN before its first result.
type afterBegin struct {
	pgx.BatchResults
	read bool
	err  error
}

func (a *afterBegin) skip() error {
	if !a.read {
		a.read = true
		_, a.err = a.BatchResults.Exec()
	}
	return a.err
}

func (a *afterBegin) Exec() (pgconn.CommandTag, error) {
	if err := a.skip(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return a.BatchResults.Exec()
}

func (a *afterBegin) Query() (pgx.Rows, error) {
	if err := a.skip(); err != nil {
		return nil, err
	}
	return a.BatchResults.Query()
}

func (a *afterBegin) QueryRow() pgx.Row {
	if err := a.skip(); err != nil {
		return errRow{err}
	}
	return a.BatchResults.QueryRow()
}

// errRow is a pgx.Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
