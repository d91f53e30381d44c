package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

func schemaVersions(t *testing.T, u string) []int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	return vs
}

func wantVersions() []int {
	var vs []int
	for v := 1; v <= SchemaVersion(); v++ {
		vs = append(vs, v)
	}
	return vs
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMigrate(t *testing.T) {
	db := sharedDB(t)
	if SchemaVersion() < 1 {
		t.Fatalf("SchemaVersion: %d, want at least 1", SchemaVersion())
	}
	cases := []struct {
		name string
		run  func(t *testing.T, u string)
	}{
		{"reopening applies nothing and keeps the data", func(t *testing.T, u string) {
			s := openStore(t, u, Options{})
			row := claimOne(t, s, "acme", `{"n":1}`)
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			s2 := openStore(t, u, Options{})
			if _, err := s2.Get(t.Context(), "acme", row.Key); err != nil {
				t.Fatalf("Get after reopen: %v", err)
			}
			if got := schemaVersions(t, u); !sameInts(got, wantVersions()) {
				t.Fatalf("schema_migrations: got %v, want %v", got, wantVersions())
			}
		}},
		{"three replicas open an empty schema at once", func(t *testing.T, u string) {
			var wg sync.WaitGroup
			errs := make([]error, 3)
			stores := make([]*Store, 3)
			start := make(chan struct{})
			for i := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					stores[i], errs[i] = Open(context.Background(), u, Options{})
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("Open %d: %v", i, err)
				}
				t.Cleanup(func() { _ = stores[i].Close() })
			}
			if got := schemaVersions(t, u); !sameInts(got, wantVersions()) {
				t.Fatalf("schema_migrations: got %v, want %v", got, wantVersions())
			}
			// Every replica works on the one schema.
			row := claimOne(t, stores[0], "acme", `{"n":2}`)
			for i, s := range stores {
				if _, err := s.Get(t.Context(), "acme", row.Key); err != nil {
					t.Fatalf("Get on replica %d: %v", i, err)
				}
			}
		}},
		{"a newer schema is refused untouched", func(t *testing.T, u string) {
			s := openStore(t, u, Options{})
			_ = s.Close()
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, u)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer conn.Close(ctx)
			newer := SchemaVersion() + 1
			if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future.sql')`, newer); err != nil {
				t.Fatalf("insert version: %v", err)
			}
			_, err = Open(ctx, u, Options{})
			if !errors.Is(err, ErrSchemaTooNew) {
				t.Fatalf("Open: got %v, want ErrSchemaTooNew", err)
			}
			want := append(wantVersions(), newer)
			if got := schemaVersions(t, u); !sameInts(got, want) {
				t.Fatalf("schema_migrations after refusal: got %v, want %v", got, want)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newSchema(t, db)) })
	}
}

func TestOpenUnreachable(t *testing.T) {
	// A port nothing listens on (the discard port): Open must fail with
	// ErrUnavailable, quickly, without the URL (and its password) in the error.
	ctx, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	_, err := Open(ctx, "postgres://u:sekrit@127.0.0.1:9/x?sslmode=disable&connect_timeout=2", Options{})
	if err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Open: got %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "sekrit") {
		t.Fatalf("Open error leaks the password: %v", err)
	}
}
