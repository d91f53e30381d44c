package bolt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

func TestOpenLockedFileFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reconciler.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// flock is per open file description, so a second Open in this process
	// contends exactly like a second process would.
	_, err = Open(path, Options{LockTimeout: 20 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v, want ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "open "+path+": locked by another process") {
		t.Errorf("message %q does not name the path and the lock", msg)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	cases := []struct {
		name    string
		version string
		wantErr error
		wantMsg string
	}{
		{"newer", strconv.Itoa(schemaVersion + 1), ErrSchemaTooNew, fmt.Sprintf("file has %d, this build reads up to %d", schemaVersion+1, schemaVersion)},
		{"garbage", "two", nil, "schema version"},
		{"current", strconv.Itoa(schemaVersion), nil, ""},
		{"older", "1", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "reconciler.db")
			s, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			setMeta(t, path, tc.version)

			s, err = Open(path, Options{})
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				s.Close()
				// An older file is upgraded in place.
				if got := getMeta(t, path); got != strconv.Itoa(schemaVersion) {
					t.Errorf("schema_version after open = %q, want %d", got, schemaVersion)
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("opened a file it cannot read")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %q, want it to name %q and the path", err, tc.wantMsg)
			}
			// The refused file is left exactly as it was.
			if got := getMeta(t, path); got != tc.version {
				t.Errorf("schema_version after refusal = %q, want %q", got, tc.version)
			}
		})
	}
}

func TestOpenRefusesForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucketRowsV2); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("opened a bbolt file without a schema version that has rows")
	}
}

func setMeta(t *testing.T, path, version string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, []byte(version))
	}); err != nil {
		t.Fatal(err)
	}
}

func getMeta(t *testing.T, path string) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	_ = db.View(func(tx *bolt.Tx) error { v = string(tx.Bucket(bucketMeta).Get(metaSchemaVersion)); return nil })
	return v
}

func TestEveryMethodUnavailableAfterClose(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	c, err := ledger.NewClaim(claimReq("acme", "", "run_1", 1), s.policy, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	key := c.Row.Key
	ev := ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, At: t0}
	cases := []struct {
		name string
		call func() error
	}{
		{"Claim", func() error { _, err := s.Claim(ctx, c); return err }},
		{"Report", func() error {
			_, _, err := s.Report(ctx, "acme", key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0})
			return err
		}},
		{"Get", func() error { _, err := s.Get(ctx, "acme", key); return err }},
		{"List", func() error { _, err := s.List(ctx, ledger.ListQuery{Tenant: "acme"}); return err }},
		{"Apply", func() error { _, _, err := s.Apply(ctx, "acme", key, ev); return err }},
		{"Ingest", func() error {
			_, err := s.Ingest(ctx, ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_1", Ignore: true, At: t0})
			return err
		}},
		{"Escalate", func() error { _, _, err := s.Escalate(ctx, "acme", key, t0); return err }},
		{"PruneInbox", func() error { _, err := s.PruneInbox(ctx, t0); return err }},
		{"Due", func() error { _, err := s.Due(ctx, t0.Add(time.Hour), 10); return err }},
		{"Reschedule", func() error { return s.Reschedule(ctx, "acme", key, t0) }},
		{"PendingEvents", func() error { _, err := s.PendingEvents(ctx, 10); return err }},
		{"AckEvents", func() error { return s.AckEvents(ctx, 1) }},
		{"CheckConsistency", func() error { return s.CheckConsistency(ctx) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("err = %v, want ErrUnavailable", err)
			}
		})
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestIOFailureIsUnavailable(t *testing.T) {
	t.Run("bbolt", func(t *testing.T) {
		var file *os.File
		s, err := Open(filepath.Join(t.TempDir(), "reconciler.db"), Options{
			NoWAL: true,
			openFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
				f, err := os.OpenFile(name, flag, mode)
				file = f
				return f, err
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// The disk goes away under the store: every page write now fails.
		checkIOFailure(t, s, func() error { return file.Close() })
	})
	t.Run("wal", func(t *testing.T) {
		fs := newFaultFS()
		s, err := Open(filepath.Join(t.TempDir(), "reconciler.db"), Options{walFS: fs})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// The log's disk goes away: every write and fsync now fails.
		checkIOFailure(t, s, func() error {
			fs.mu.Lock()
			defer fs.mu.Unlock()
			fs.cut = true
			return nil
		})
	})
}

func checkIOFailure(t *testing.T, s *Store, fail func() error) {
	ctx := context.Background()
	mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0)
	if err := fail(); err != nil {
		t.Fatal(err)
	}
	c, err := ledger.NewClaim(claimReq("acme", "", "run_1", 2), s.policy, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, c); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("claim after an I/O failure: %v, want ErrUnavailable", err)
	}
	// The failed group left nothing behind: the row is not there.
	if _, err := s.Get(ctx, "acme", c.Row.Key); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("get of the failed claim: %v, want ErrNotFound", err)
	}
}

func TestOpenCreatesDataDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "reconciler.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open in a missing directory: %v", err)
	}
	defer s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("file not created: %v", err)
	}
}

// TestUnsafeNoSyncIsOptIn: commits fdatasync unless UnsafeNoSync asks
// otherwise (httpload's ceiling run is its only user).
func TestUnsafeNoSyncIsOptIn(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		s, err := Open(filepath.Join(t.TempDir(), "l.db"), Options{UnsafeNoSync: unsafe})
		if err != nil {
			t.Fatal(err)
		}
		if s.db.NoSync != unsafe {
			t.Errorf("UnsafeNoSync %v: bbolt NoSync is %v", unsafe, s.db.NoSync)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
