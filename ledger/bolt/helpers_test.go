package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// t0 is the fixed clock of the tests: time comes from the test, not the machine.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// mustOpen opens a store in a fresh temp dir and closes it when the test ends.
func mustOpen(tb testing.TB, opts Options) *Store {
	tb.Helper()
	if os.Getenv("BOLT_TEST_NOWAL") == "1" {
		opts.NoWAL = true // the whole package's tests on the store without its log
	}
	s, err := Open(filepath.Join(tb.TempDir(), "ledger.db"), opts)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// claimReq builds a claim request; key "" mints one from the intent.
func claimReq(tenant, key, run string, n int) ledger.ClaimRequest {
	return ledger.ClaimRequest{
		Tenant: tenant, RunID: run, Tool: "stripe.create_payment_intent", ToolCallID: fmt.Sprintf("call_%d", n),
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, Key: key,
		Intent:       json.RawMessage(fmt.Sprintf(`{"amount":%d,"currency":"usd"}`, 1000+n)),
		ReplayWindow: 24 * time.Hour,
	}
}

// mustClaim claims at at and fails the test on error.
func mustClaim(tb testing.TB, s *Store, req ledger.ClaimRequest, at time.Time) ledger.ClaimResult {
	tb.Helper()
	c, err := ledger.NewClaim(req, s.policy, at)
	if err != nil {
		tb.Fatalf("new claim: %v", err)
	}
	res, err := s.Claim(context.Background(), c)
	if err != nil {
		tb.Fatalf("claim: %v", err)
	}
	return res
}

// rawKeys lists the keys of a bucket as strings, read straight from the
// store's buckets (with the log: its layers over bbolt).
func rawKeys(tb testing.TB, s *Store, bucket []byte) []string {
	tb.Helper()
	var out []string
	err := s.view(context.Background(), func(tx *boltTx) error {
		return tx.bucket(bucket).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	if err != nil {
		tb.Fatalf("view %s: %v", bucket, err)
	}
	return out
}

// rawGet reads one value straight from the store's buckets (a copy).
func rawGet(tb testing.TB, s *Store, bucket, key []byte) []byte {
	tb.Helper()
	var v []byte
	if err := s.view(context.Background(), func(tx *boltTx) error {
		v = cloneBytes(tx.bucket(bucket).Get(key))
		return nil
	}); err != nil {
		tb.Fatalf("view: %v", err)
	}
	if len(v) == 0 {
		return nil
	}
	return v
}

// rawRow reads a row's stored bytes through its index (a copy; nil: none).
func rawRow(tb testing.TB, s *Store, tenant, key string) []byte {
	tb.Helper()
	var v []byte
	if err := s.view(context.Background(), func(tx *boltTx) error {
		rv, err := tx.rowValue(tenant, key)
		v = cloneBytes(rv)
		return err
	}); err != nil {
		tb.Fatalf("view: %v", err)
	}
	if len(v) == 0 {
		return nil
	}
	return v
}

// mustFlush commits everything the log holds into bbolt, so a test can
// change the file underneath (no-op without the log).
func mustFlush(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.Flush(context.Background()); err != nil {
		tb.Fatalf("flush: %v", err)
	}
}

func mustConsistent(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.CheckConsistency(context.Background()); err != nil {
		tb.Fatalf("consistency: %v", err)
	}
}
