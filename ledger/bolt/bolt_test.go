package bolt_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/storetest"
)

// TestConformance runs the suite every ledger.Store passes, on a fresh file
// per subtest, on the store without its write-ahead log (every group its
// own bbolt commit).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ledger.Store {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{Policy: ledger.DefaultPolicy(), NoWAL: true})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestConformanceWAL runs the suite on the store with its write-ahead log
// (the default),
// with a flush interval short enough that every subtest sees reads served
// from the log's layers, from bbolt after a batch commit, and both mixed.
func TestConformanceWAL(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ledger.Store {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{Policy: ledger.DefaultPolicy(), WALFlushInterval: time.Millisecond})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
