package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRunPostgresStore runs claim mode briefly with the real target on
// PostgreSQL (-store) beside the pgx claim service: both answer every
// request, every outcome's event reaches the stream, the report names the
// store and issue 31's target, and the run's fresh database is gone after.
func TestRunPostgresStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS and a PostgreSQL store and runs load for ~2 s")
	}
	base := os.Getenv("RECONCILER_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("RECONCILER_TEST_POSTGRES_URL is not set")
	}
	before := freshDatabases(t, base)
	cfg := DefaultConfig()
	cfg.Conns = 4
	cfg.Warmup = 100 * time.Millisecond
	cfg.Duration = time.Second
	cfg.LagDuration = 500 * time.Millisecond
	cfg.LagRate = 100
	cfg.DrainTimeout = 30 * time.Second
	cfg.RequestTimeout = 10 * time.Second
	cfg.Dir = t.TempDir()
	cfg.Store = base
	cfg.PgxURL = base
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Store != StorePostgres || rep.RealOverPgx <= 0 {
		t.Fatalf("store %q, real/pgx %v; want postgres and a ratio", rep.Store, rep.RealOverPgx)
	}
	for _, tr := range rep.Targets {
		if tr.Ops == 0 || tr.Errors != 0 {
			t.Errorf("%s: %d ops, %d errors %q", tr.Target, tr.Ops, tr.Errors, tr.ErrorSamples)
		}
	}
	if rl := rep.Relay; rl == nil || rl.Outcomes == 0 || rl.Delivered != rl.Outcomes {
		t.Fatalf("relay: %+v; want every outcome's event", rl)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "issue 31's target") || !strings.Contains(table.String(), "store: postgres") {
		t.Errorf("table does not name the store and issue 31's target:\n%s", table.String())
	}
	if after := freshDatabases(t, base); after != before {
		t.Errorf("httpload_ databases: %d before the run, %d after; want the run's dropped", before, after)
	}
}

// freshDatabases counts the databases the load program makes.
func freshDatabases(t *testing.T, base string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_database WHERE datname LIKE 'httpload\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
