package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
)

// sharedDB is one database for the tests that make a fresh schema per
// case anyway: CREATE DATABASE costs a second or more on a busy machine.
// TestMain drops it.
func sharedDB(tb testing.TB) string {
	tb.Helper()
	base := pgtest.BaseURL(tb)
	shared.once.Do(func() {
		shared.base = base
		shared.name, shared.err = pgtest.CreateDatabase(base)
	})
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return pgtest.DatabaseURL(tb, base, shared.name)
}

var shared struct {
	once       sync.Once
	base, name string
	err        error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.name != "" {
		if err := pgtest.DropDatabase(shared.base, shared.name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

var schemaN atomic.Int64

// newSchema creates an empty schema in the database and returns a URL whose
// search_path selects it, so every store opened on it starts empty.
func newSchema(tb testing.TB, dbURL string) string {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	name := "s" + randHex(3) + "_" + itoa(schemaN.Add(1))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	return pgtest.WithParams(tb, dbURL, "search_path", name)
}

// openStore opens a store on u and closes it when the test ends.
func openStore(tb testing.TB, u string, opts Options) *Store {
	tb.Helper()
	s, err := Open(context.Background(), u, opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func itoa(n int64) string {
	const digits = "0123456789"
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{digits[n%10]}, b...)
		n /= 10
	}
	return string(b)
}

// t0 is the tests' epoch: whole seconds, so timestamptz round-trips it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// claimOne claims a new intent for tenant at t0 and returns the row.
func claimOne(tb testing.TB, s *Store, tenant, intent string) ledger.Row {
	tb.Helper()
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(intent), ReplayWindow: 24 * time.Hour,
	}, ledger.DefaultPolicy(), t0)
	if err != nil {
		tb.Fatalf("NewClaim: %v", err)
	}
	res, err := s.Claim(context.Background(), c)
	if err != nil {
		tb.Fatalf("Claim: %v", err)
	}
	return res.Row
}
