// Package pgtest gives tests a fresh, empty PostgreSQL database or schema
// on the server named by RECONCILER_TEST_POSTGRES_URL, and skips them with
// a message saying how to run them when it is unset.
//
// Imports: the standard library and pgx: not ledger/postgres, whose own
// tests use it too. Only _test.go files import it (scripts/importcheck.sh
// fails any other build that does); it holds no goroutines, and its
// functions are safe for concurrent use.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable that points tests at a PostgreSQL server.
const EnvURL = "RECONCILER_TEST_POSTGRES_URL"

// Hint is how to run the tests that need PostgreSQL.
const Hint = "set " + EnvURL + "=postgres://postgres@127.0.0.1:5432/test?sslmode=disable to run"

// BaseURL returns RECONCILER_TEST_POSTGRES_URL or skips tb.
func BaseURL(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		tb.Skip(Hint)
	}
	return base
}

// Database creates a fresh database, drops it (WITH FORCE) when the test
// ends, and returns its URL.
func Database(tb testing.TB) string {
	tb.Helper()
	base := BaseURL(tb)
	name, err := CreateDatabase(base)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := DropDatabase(base, name); err != nil {
			tb.Error(err)
		}
	})
	return DatabaseURL(tb, base, name)
}

// CreateDatabase creates a fresh database on the server of base and
// returns its name: for a database the tests of a package share, which
// their TestMain drops with DropDatabase.
func CreateDatabase(base string) (string, error) {
	name := "recon_rt_" + randHex(6)
	if err := admin(base, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	return name, nil
}

// DropDatabase drops database name (WITH FORCE: a leaked connection must
// not keep it).
func DropDatabase(base, name string) error {
	if err := admin(base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// DatabaseURL is base with its database replaced by name.
func DatabaseURL(tb testing.TB, base, name string) string {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("parse %s: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// WithParams returns u with extra query parameters (pgx passes unknown
// ones, such as search_path and application_name, to the server).
func WithParams(tb testing.TB, u string, kv ...string) string {
	tb.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		tb.Fatalf("parse %s: %v", u, err)
	}
	q := pu.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	pu.RawQuery = q.Encode()
	return pu.String()
}

// Schema creates a fresh schema in the database of RECONCILER_TEST_POSTGRES_URL,
// drops it when the test ends, and returns a URL whose search_path selects
// it: cheaper than a database (CREATE DATABASE takes a second or more on a
// busy machine), and every store opened on the URL shares it.
func Schema(tb testing.TB) string {
	tb.Helper()
	base := BaseURL(tb)
	name := "rt_" + randHex(6)
	if err := admin(base, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		if err := admin(base, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return WithParams(tb, base, "search_path", name)
}

func admin(base, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", EnvURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return err
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Stores opens n stores with open, as n replicas sharing one database
// would, and closes them when the test ends. open is the store's own
// (postgres.Open over a Schema or Database URL): pgtest cannot import
// ledger/postgres, whose tests import pgtest.
func Stores[S interface{ Close() error }](tb testing.TB, n int, open func(context.Context) (S, error)) []S {
	tb.Helper()
	stores := make([]S, n)
	for i := range stores {
		s, err := open(context.Background())
		if err != nil {
			tb.Fatalf("open store %d: %v", i, err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	return stores
}
