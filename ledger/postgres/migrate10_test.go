package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Migration 0010's two indexes: approval_id stays unique where it is set
// and takes no entry where it is not; the prune finds old commit markers
// through the BRIN index, more than a chunk of them, and keeps the young.
func TestMigration10Indexes(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, newSchema(t, sharedDB(t)), Options{})
	insert := func(key string, approval *string) error {
		_, err := s.pool.Exec(ctx, `INSERT INTO rows (tenant, key, metadata_local_id, status, run_id, first_seen_at, doc, approval_id)
			VALUES ('acme', $1, 'l_' || $1, 'pending', 'run', now(), '{"v":1,"row":{}}', $2)`, key, approval)
		return err
	}
	ap := "ap_1"
	for i, tc := range []struct {
		key      string
		approval *string
		unique   bool // the insert must fail on the approval id
	}{
		{"k1", nil, false}, {"k2", nil, false}, {"k3", &ap, false}, {"k4", &ap, true},
	} {
		err := insert(tc.key, tc.approval)
		var pgErr *pgconn.PgError
		if got := errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "rows_approval_id_key"; got != tc.unique || (!tc.unique && err != nil) {
			t.Fatalf("insert %d (%s): %v; want a unique violation on rows_approval_id_key: %v", i, tc.key, err, tc.unique)
		}
	}
	var entries int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM rows WHERE approval_id IS NOT NULL`).Scan(&entries); err != nil || entries != 1 {
		t.Fatalf("rows with an approval id: %d %v", entries, err)
	}
	var partial bool
	if err := s.pool.QueryRow(ctx, `SELECT indpred IS NOT NULL AND indisunique FROM pg_index WHERE indexrelid = 'rows_approval_id_key'::regclass`).Scan(&partial); err != nil || !partial {
		t.Fatalf("rows_approval_id_key partial and unique: %v %v", partial, err)
	}

	old := pruneChunk + 10
	if _, err := s.pool.Exec(ctx, `INSERT INTO commit_markers (id, at)
		SELECT 'old' || g, now() - interval '1 hour' FROM generate_series(1, $1) g`, old); err != nil {
		t.Fatal(err)
	}
	young := newMarker()
	if _, err := s.pool.Exec(ctx, `INSERT INTO commit_markers (id) VALUES ($1)`, young); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneIdempotency(ctx, t0); err != nil {
		t.Fatal(err)
	}
	var oldLeft int
	var youngKept bool
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id LIKE 'old%'), bool_or(id = $1) FROM commit_markers`, young).Scan(&oldLeft, &youngKept); err != nil {
		t.Fatal(err)
	}
	if oldLeft != 0 || !youngKept {
		t.Fatalf("after the prune: %d old markers left, the young one kept: %v; want 0, true", oldLeft, youngKept)
	}
	// A marker's id begins with its time: later markers sort later.
	a := newMarker()
	time.Sleep(2 * time.Microsecond)
	if b := newMarker(); len(a) != 32 || len(b) != 32 || b <= a {
		t.Fatalf("markers %s then %s: want 32 hex digits each, in time order", a, b)
	}
}
