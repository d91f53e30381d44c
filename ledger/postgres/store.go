package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentledger/reconciler/ledger"
)

// Options configure Open. The zero value is usable.
type Options struct {
	// Policy holds the timings of the rules (zero fields take ledger's defaults).
	Policy ledger.Policy
	// Logger receives open/close, retry and listener records (default: discard).
	// The connection URL is never logged: it may hold a password.
	Logger *slog.Logger
	// MaxConns caps the pool. Zero: the URL's pool_max_conns when it has
	// one, else DefaultMaxConns.
	MaxConns int
	// RetryTimeout bounds how long one call retries serialization failures,
	// deadlocks, lost races and dropped connections (default 10 s).
	RetryTimeout time.Duration
	// ListenURL, when set, is where the LISTEN connection goes instead of
	// the pool's URL: LISTEN needs a session, which a transaction-mode
	// pooler (PgBouncer's pool_mode = transaction) in front of the pool
	// does not keep, so point it at the server itself or a session-mode
	// pool of the same database. It listens on the channel of the pool's
	// schema, whatever its own search_path. Never logged.
	ListenURL string
}

// DefaultRetryTimeout is Options.RetryTimeout's default.
const DefaultRetryTimeout = 10 * time.Second

// DefaultMaxConns is the pool's size when neither Options.MaxConns nor the
// URL's pool_max_conns sets one: enough connections for a burst of callers
// to share each WAL flush (pgxpool's own default, max(4, NumCPU), lets at
// most four commits share one, and queues the rest behind them). Each
// replica also holds one LISTEN connection; README "Running more than one
// replica" sizes it against max_connections.
const DefaultMaxConns = 20

// errClosed is what every method returns after Close.
var errClosed = fmt.Errorf("postgres: store closed: %w", ledger.ErrUnavailable)

// errRace means the transaction lost a race that only a re-run can settle
// (an insert met a row committed after this transaction looked for it).
var errRace = errors.New("lost an insert race")

// errCommitUnknown means the connection failed while COMMIT was in flight
// and the transaction's status could not be read back in time: it may or
// may not have committed, so it is not re-run.
var errCommitUnknown = errors.New("commit outcome unknown")

// errCommitAborted means a COMMIT whose answer was lost was read back as
// aborted: nothing committed, and the flow runs again.
var errCommitAborted = errors.New("commit read back as aborted")

// Store is the PostgreSQL-backed ledger.Store. It is safe for concurrent use
// by many goroutines and by many processes sharing one database.
type Store struct {
	// Flows runs the shared ledger flows, each in one transaction retried
	// on serialization failures and lost races (Claim, Report, Apply,
	// Ingest, Escalate, Reschedule).
	ledger.Flows

	pool *pgxpool.Pool
	// listenCfg is the LISTEN connection's (the pool's unless
	// Options.ListenURL names another).
	listenCfg    *pgx.ConnConfig
	policy       ledger.Policy
	logger       *slog.Logger
	retryTimeout time.Duration
	// channel is the LISTEN/NOTIFY channel of this schema's outbox.
	channel string

	notify chan struct{}
	closed atomic.Bool

	stopListen context.CancelFunc
	listenDone chan struct{}
	// others is the notifier's doorbell (buffer 1): a commit that wrote
	// outbox records rings it, and the notifier NOTIFYs the other
	// replicas once per ring (notify.go).
	others       chan struct{}
	notifierDone chan struct{}
	closeOnce    sync.Once

	retries atomic.Uint64
	// commitsSettled counts COMMITs whose answer was lost and whose
	// outcome was read back (settleCommit).
	commitsSettled atomic.Uint64
	// fastInserts counts claims committed in one statement (tryInsert);
	// fastMisses those that tried and took the locked path.
	fastInserts, fastMisses atomic.Uint64
}

var _ ledger.Store = (*Store)(nil)

// Open connects to url (a postgres:// URL or a key=value DSN; a
// search_path parameter selects the schema), applies the embedded
// migrations and starts the LISTEN connection behind Notify. A database of
// a newer schema fails with ErrSchemaTooNew; an unreachable one with an
// error wrapping ledger.ErrUnavailable.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RetryTimeout <= 0 {
		opts.RetryTimeout = DefaultRetryTimeout
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors quote the URL, password included: say less.
		return nil, errors.New("postgres: open: cannot parse the connection URL")
	}
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = int32(min(opts.MaxConns, 1<<20))
	case !strings.Contains(url, "pool_max_conns"):
		cfg.MaxConns = DefaultMaxConns
	}
	listenCfg := cfg.ConnConfig
	if opts.ListenURL != "" {
		if listenCfg, err = pgx.ParseConfig(opts.ListenURL); err != nil {
			return nil, errors.New("postgres: open: cannot parse the listen URL")
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w: %w", ledger.ErrUnavailable, err)
	}
	s := &Store{
		pool: pool, listenCfg: listenCfg, policy: opts.Policy, logger: opts.Logger, retryTimeout: opts.RetryTimeout,
		notify:     make(chan struct{}, 1),
		listenDone: make(chan struct{}),
		others:     make(chan struct{}, 1), notifierDone: make(chan struct{}),
	}
	s.Flows = ledger.Flows{Policy: opts.Policy, Update: s.update}
	// The first LISTEN is made here, so a commit by any replica after Open
	// returns is seen; later reconnects happen in the listener goroutine.
	// It dials while the migrations run: a connection costs a backend fork.
	// A listener of its own URL is dialed after them, on the channel of
	// the pool's schema (its own search_path may name another).
	type dialed struct {
		conn   *pgx.Conn
		schema string
		err    error
	}
	dc := make(chan dialed, 1)
	go func() { // owned by Open, which waits for its one send
		if opts.ListenURL != "" {
			dc <- dialed{}
			return
		}
		conn, schema, err := s.connectListener(ctx, "")
		dc <- dialed{conn, schema, err}
	}()
	applied, err := migrate(ctx, pool)
	d := <-dc
	if err == nil && opts.ListenURL != "" {
		if err = pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&d.schema); err != nil {
			err = fmt.Errorf("current schema: %w", err)
		} else {
			d.conn, _, d.err = s.connectListener(ctx, channelName(d.schema))
		}
	}
	if err == nil && d.err != nil {
		err = fmt.Errorf("listen: %w", d.err)
	}
	if err != nil {
		if d.conn != nil {
			_ = d.conn.Close(context.Background())
		}
		pool.Close()
		if errors.Is(err, ErrSchemaTooNew) {
			return nil, fmt.Errorf("postgres: open: %w", err)
		}
		return nil, fmt.Errorf("postgres: open: %w: %w", ledger.ErrUnavailable, err)
	}
	s.channel = channelName(d.schema)
	conn := d.conn
	lctx, cancel := context.WithCancel(context.Background())
	s.stopListen = cancel
	go s.listen(lctx, conn)
	go s.notifier(lctx)
	s.logger.Info("postgres: store opened", "schema", d.schema, "schema_version", SchemaVersion(), "migrations_applied", len(applied))
	return s, nil
}

// channelName is the NOTIFY channel of a schema's outbox: one per schema,
// so stores on different schemas of one database do not wake each other.
// A channel name is an identifier (at most 63 bytes); a long schema name is
// replaced by its hash.
func channelName(schema string) string {
	const prefix = "reconciler_outbox."
	if len(prefix)+len(schema) <= 63 {
		return prefix + schema
	}
	sum := sha256.Sum256([]byte(schema))
	return prefix + hex.EncodeToString(sum[:16])
}

// Close stops the listener and closes the pool (waiting for calls in
// flight to give their connections back). Later calls to any method return
// ErrUnavailable; Close itself is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.stopListen()
		<-s.listenDone
		<-s.notifierDone
		s.pool.Close()
		s.logger.Info("postgres: store closed", "retries", s.retries.Load())
	})
	return nil
}

// Retries returns how many transactions were re-run since Open.
func (s *Store) Retries() uint64 { return s.retries.Load() }

// Notify returns the channel signalled after a commit, by any replica on
// this schema, that wrote outbox records (coalesced, buffer 1).
func (s *Store) Notify() <-chan struct{} { return s.notify }

func (s *Store) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// dbError marks an error that came from the database or the connection,
// as opposed to a rule of the flows (ErrNotFound, ErrFingerprintMismatch…).
// It unwraps to ledger.ErrUnavailable and to the driver's error.
type dbError struct {
	op  string
	err error
}

func (e *dbError) Error() string   { return "postgres: " + e.op + ": " + e.err.Error() }
func (e *dbError) Unwrap() []error { return []error{ledger.ErrUnavailable, e.err} }

func dbErr(op string, err error) error { return &dbError{op: op, err: err} }

// run runs fn in one READ COMMITTED transaction (write) or against the pool
// (read), re-running it with capped exponential backoff and jitter when the
// failure says a re-run can succeed: a serialization failure or deadlock,
// a lost insert race, a dropped or terminated connection before COMMIT.
// The flows are deterministic functions of what they read, so a re-run is
// the same operation against fresher data.
func (s *Store) run(ctx context.Context, write bool, fn func(*pgTx) error) error {
	var b backoff.BackOff
	for {
		if s.closed.Load() {
			return errClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.once(ctx, write, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if s.closed.Load() {
			return errClosed
		}
		if !retryable(err) {
			return err
		}
		if b == nil {
			eb := backoff.NewExponentialBackOff()
			eb.InitialInterval = 2 * time.Millisecond
			eb.MaxInterval = 250 * time.Millisecond
			eb.RandomizationFactor = 0.5
			eb.Multiplier = 2
			eb.MaxElapsedTime = s.retryTimeout
			eb.Reset()
			b = eb
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			if errors.Is(err, ledger.ErrUnavailable) {
				return fmt.Errorf("gave up retrying: %w", err)
			}
			return fmt.Errorf("postgres: gave up retrying: %w: %w", ledger.ErrUnavailable, err)
		}
		s.retries.Add(1)
		s.logger.Debug("postgres: retrying transaction", "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (s *Store) once(ctx context.Context, write bool, fn func(*pgTx) error) error {
	if !write {
		return fn(&pgTx{ctx: ctx, q: s.pool})
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return dbErr("begin", err)
	}
	// Release destroys a connection left inside a transaction (pgxpool
	// checks its status), so no path below leaks one back to the pool.
	defer conn.Release()
	q := &lazyBegin{conn: conn, pending: true}
	t := &pgTx{ctx: ctx, q: q, write: true}
	rollback := func() {
		// The rollback must reach the server even when ctx is done, or the
		// connection stays mid-transaction (Release then closes it).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = conn.Conn().PgConn().Exec(rctx, "ROLLBACK").ReadAll()
		cancel()
	}
	// A panic in fn must not leave the transaction open: its connection
	// (and the row and advisory locks it holds) would never go back to the
	// pool, and Close would wait for it for ever.
	defer func() {
		if r := recover(); r != nil {
			rollback()
			panic(r)
		}
	}()
	if err := fn(t); err != nil {
		rollback()
		return err
	}
	if conn.Conn().PgConn().IsClosed() {
		// The connection died under the flow's last statement: COMMIT is
		// never sent, so nothing committed.
		return dbErr("commit", errors.New("conn closed before COMMIT"))
	}
	// The transaction's marker goes in with the COMMIT, in one round trip:
	// it is what settles a COMMIT whose answer was lost (settleCommit).
	marker := newMarker()
	committed, err := commit(ctx, conn.Conn(), q.pending, t.atCommit, marker)
	if err == nil && !committed {
		// The server ended the transaction without committing it (an
		// earlier statement failed and the flow went on regardless).
		return dbErr("commit", errors.New("the transaction was rolled back"))
	}
	var refused *refusedError
	if errors.As(err, &refused) {
		// A queued statement's ERROR that is the flow's answer (a row
		// update that met another row's local id): nothing committed.
		rollback()
		return refused.err
	}
	var pgErr *pgconn.PgError
	if err != nil && len(t.atCommit) > 0 && errors.As(err, &pgErr) && commitRefused(err) {
		// A statement of the pipeline failed: the server skipped the rest,
		// COMMIT included, and the transaction is aborted; end it.
		rollback()
	}
	if err != nil {
		if commitRefused(err) {
			return dbErr("commit", err)
		}
		if err := s.settleCommit(ctx, marker, err); err != nil {
			return err
		}
	}
	if t.appended {
		s.wake()
	}
	return nil
}

// commit sends the transaction's end in one round trip: its BEGIN when no
// statement has sent it yet (begin), the statements queued for it, the
// marker's INSERT and COMMIT. It reports whether the server answered
// COMMIT (not ROLLBACK). Without queued statements it is one simple query
// with the marker in its text; with them, one pipeline.
func commit(ctx context.Context, conn *pgx.Conn, begin bool, atCommit []queued, marker string) (bool, error) {
	if len(atCommit) == 0 {
		sql := "INSERT INTO commit_markers (id) VALUES ('" + marker + "'); COMMIT"
		if begin {
			sql = beginSQL + "; " + sql
		}
		res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
		if err != nil {
			return false, err
		}
		return len(res) >= 2 && res[len(res)-1].CommandTag.String() == "COMMIT", nil
	}
	b := &pgx.Batch{}
	if begin {
		b.Queue(beginSQL)
	}
	for _, q := range atCommit {
		b.Queue(q.sql, q.args...)
	}
	b.Queue(`INSERT INTO commit_markers (id) VALUES ($1)`, marker)
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	var err error
	if begin {
		_, err = br.Exec()
	}
	for _, q := range atCommit {
		if err != nil {
			break
		}
		if _, e := br.Exec(); e != nil {
			err = e
			var pgErr *pgconn.PgError
			if q.refused != nil && errors.As(e, &pgErr) {
				if ferr := q.refused(pgErr); ferr != nil {
					err = &refusedError{ferr}
				}
			}
		}
	}
	var tag pgconn.CommandTag
	if err == nil {
		if _, err = br.Exec(); err == nil {
			tag, err = br.Exec()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	return tag.String() == "COMMIT", nil
}

// newMarker is a transaction's commit marker in hex (safe to write into
// the statement's text): the time in microseconds, then 64 random bits.
// The time first puts each new marker at the right end of the primary key,
// one page written where a random id dirtied a page of its own (and wrote
// it whole to the WAL after each checkpoint).
func newMarker() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMicro()))
	_, _ = rand.Read(b[8:])
	return hex.EncodeToString(b[:])
}

// commitRefused reports whether a COMMIT that was sent and failed is
// proven not to have committed: the server answered it with an error that
// ends only the transaction (a serialization failure, a deadlock, a
// deferred constraint). A FATAL or PANIC answer (an immediate shutdown's
// 57P01/57P02 can follow a flushed commit record), a dropped connection or
// a transport error proves nothing: settleCommit asks. (pgconn.SafeToRetry
// is not asked: when the connection drops while COMMIT's answer is read,
// pgconn v5.12 reports "conn closed", an error it calls safe to retry.)
func commitRefused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	sev := pgErr.SeverityUnlocalized
	if sev == "" {
		sev = pgErr.Severity
	}
	return sev == "ERROR"
}

// settleCommit finds out whether the transaction whose COMMIT failed with
// cause (commitRefused false) committed, from the marker it wrote: it
// inserts the same marker on another connection. A conflict means the
// transaction committed: nil, the flow's results stand and nothing runs
// again. An insert means it did not — and the marker now taken, it never
// will — so the flow runs again (errCommitAborted). While the old backend
// is still finishing, the insert waits for it on the marker's unique key;
// while the database is unreachable it is retried with backoff. Still
// unknown when the retry time or ctx ends: errCommitUnknown, never a blind
// re-run. (The transaction id and pg_xact_status would not do: after a
// crash, an id whose transaction never reached the WAL is handed out
// again, and its status is another transaction's.)
func (s *Store) settleCommit(ctx context.Context, marker string, cause error) error {
	s.commitsSettled.Add(1)
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = 5 * time.Millisecond
	eb.MaxInterval = 500 * time.Millisecond
	eb.MaxElapsedTime = s.retryTimeout
	eb.Reset()
	for {
		tag, err := s.pool.Exec(ctx, `INSERT INTO commit_markers (id) VALUES ($1) ON CONFLICT DO NOTHING`, marker)
		switch {
		case err == nil && tag.RowsAffected() == 0:
			s.logger.Warn("postgres: a commit whose answer was lost had committed", "err", cause)
			return nil
		case err == nil:
			return dbErr("commit", fmt.Errorf("%w: %w", errCommitAborted, cause))
		}
		wait := eb.NextBackOff()
		if wait == backoff.Stop || ctx.Err() != nil {
			return dbErr("commit", fmt.Errorf("%w: %w", errCommitUnknown, errors.Join(cause, err, ctx.Err())))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// retryable reports whether a failed transaction (which did not commit) may
// succeed when run again.
func retryable(err error) bool {
	if errors.Is(err, errRace) || errors.Is(err, errCommitAborted) {
		return true
	}
	if errors.Is(err, errCommitUnknown) {
		return false
	}
	var de *dbError
	if !errors.As(err, &de) {
		return false // a rule of the flows, not the database
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", // serialization_failure, deadlock_detected
			"57P01", "57P02", "57P03", // admin_shutdown (pg_terminate_backend), crash_shutdown, cannot_connect_now
			"53300": // too_many_connections
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08" // connection_exception
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	// Transport failures before COMMIT: the transaction never committed.
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		isConnClosed(err)
}

// isConnClosed recognises pgx's "conn closed" / "conn busy" errors for a
// connection that died under an earlier statement of the transaction.
func isConnClosed(err error) bool {
	var de *dbError
	if !errors.As(err, &de) {
		return false
	}
	msg := de.err.Error()
	for _, s := range []string{"conn closed", "closed pool", "unexpected EOF", "broken pipe", "connection reset"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
