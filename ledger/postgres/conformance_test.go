package postgres

import (
	"context"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/storetest"
)

// TestConformance runs the shared suite on one fresh database. Each store it
// opens gets a schema of its own, selected through search_path, so stores
// of different subtests (even parallel ones) never see each other's rows.
// Creating and migrating a schema costs far more than emptying one, so a
// schema whose store was closed is truncated and handed to the next open.
func TestConformance(t *testing.T) { runConformance(t, "") }

// TestConformanceExecMode runs the suite with pgx's statement cache off
// (default_query_exec_mode=exec: unnamed statements, every parameter's
// type from its Go value), the mode the README gives for PgBouncer older
// than 1.21 in transaction mode, which keeps no prepared statements. (A
// journal note's document once went as bytea there.)
func TestConformanceExecMode(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite again in another query mode: skipped with -short")
	}
	runConformance(t, "&default_query_exec_mode=exec")
}

// runConformance runs the suite with params added to every store's URL.
func runConformance(t *testing.T, params string) {
	// synchronous_commit=off: the suite checks semantics, not crash
	// durability, and a commit that waits for no fsync keeps it fast on a
	// busy machine.
	db := pgtest.WithParams(t, pgtest.Database(t), "synchronous_commit", "off")
	admin, err := pgx.Connect(t.Context(), db)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	schemas := &schemaRecycler{db: db, admin: admin}
	storetest.Run(t, func(t *testing.T) ledger.Store {
		u := schemas.get(t)
		// Registered before openStore's Close, so it runs after it.
		t.Cleanup(func() { schemas.put(t, u) })
		return openStore(t, u+params, Options{Policy: ledger.DefaultPolicy()})
	})
}

type schemaRecycler struct {
	db string
	mu sync.Mutex
	// admin empties schemas; it is used under mu.
	admin *pgx.Conn
	free  []string
}

func (r *schemaRecycler) get(t *testing.T) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.free); n > 0 {
		u := r.free[n-1]
		r.free = r.free[:n-1]
		return u
	}
	return newSchema(t, r.db)
}

// put empties the schema's tables (the store on it is closed) and frees it.
// DELETE, not TRUNCATE: on tables this small it skips TRUNCATE's file work.
func (r *schemaRecycler) put(t *testing.T, u string) {
	schema := searchPath(t, u)
	r.mu.Lock()
	defer r.mu.Unlock()
	var sql string
	for _, table := range []string{"rows", "outbox", "inbox", "orphans", "freezes", "tools", "idempotency", "row_journal", "console_revocations"} {
		sql += "DELETE FROM " + pgx.Identifier{schema, table}.Sanitize() + ";"
	}
	if _, err := r.admin.Exec(context.Background(), sql); err != nil {
		t.Logf("recycle schema %s: %v (not reused)", schema, err)
		return
	}
	r.free = append(r.free, u)
}

func searchPath(t *testing.T, u string) string {
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Query().Get("search_path")
}
