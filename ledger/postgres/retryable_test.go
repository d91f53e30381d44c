package postgres

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentledger/reconciler/ledger"
)

// TestRetryable pins which failures re-run a transaction. It needs no
// database: the errors are built the way pgx returns them.
func TestRetryable(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "x"} }
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"lost insert race", fmt.Errorf("insert row k: %w", errRace), true},
		{"serialization failure", dbErr("get row", pg("40001")), true},
		{"deadlock", dbErr("update row", pg("40P01")), true},
		{"backend terminated", dbErr("begin", pg("57P01")), true},
		{"connection exception class", dbErr("begin", pg("08006")), true},
		{"too many connections", dbErr("begin", pg("53300")), true},
		{"connection dropped mid-transaction", dbErr("get row", io.ErrUnexpectedEOF), true},
		{"unique violation on update", dbErr("update row", pg("23505")), false},
		{"syntax error (a bug, not a blip)", dbErr("get row", pg("42601")), false},
		{"commit outcome unknown", dbErr("commit", fmt.Errorf("%w: %w", errCommitUnknown, io.EOF)), false},
		{"a rule of the flows", fmt.Errorf("claim: %w", ledger.ErrNotFound), false},
		{"fingerprint mismatch", ledger.ErrFingerprintMismatch, false},
		{"a transport error outside a transaction statement", io.EOF, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryable(tc.err); got != tc.want {
				t.Fatalf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	// Every database error is also an ErrUnavailable for callers.
	if err := dbErr("begin", pg("57P01")); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("dbErr does not wrap ErrUnavailable: %v", err)
	}
}

func TestChannelName(t *testing.T) {
	long := ""
	for range 63 {
		long += "s"
	}
	cases := []struct {
		name, schema string
	}{
		{"short schema", "public"},
		{"63-byte schema", long},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := channelName(tc.schema)
			if len(got) > 63 {
				t.Fatalf("channelName(%q) = %q: %d bytes, PostgreSQL allows 63", tc.schema, got, len(got))
			}
			if seen[got] {
				t.Fatalf("channelName(%q) = %q collides", tc.schema, got)
			}
			seen[got] = true
		})
	}
}
