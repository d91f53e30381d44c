package bolt

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

func testFreeze(tenant, target string) ledger.Freeze {
	return ledger.Freeze{Tenant: tenant, Target: target, Actor: "ops", Note: "vendor incident", At: t0}
}

func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	s2, err := Open(s.Path(), Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	return s2
}

func listed(t *testing.T, s *Store) []string {
	t.Helper()
	fs, err := s.ListFreezes(t.Context())
	if err != nil {
		t.Fatalf("ListFreezes: %v", err)
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Tenant + "/" + f.Target + " " + f.Actor + " " + f.At.Format(time.RFC3339)
	}
	return out
}

func TestFreezesSurviveReopen(t *testing.T) {
	s := mustOpen(t, Options{})
	ctx := t.Context()
	for _, f := range []ledger.Freeze{testFreeze("acme", "stripe.charges.create"), testFreeze("acme", "write_irreversible"), testFreeze("globex", "x")} {
		if err := s.PutFreeze(ctx, f); err != nil {
			t.Fatalf("PutFreeze: %v", err)
		}
	}
	want := []string{"acme/stripe.charges.create ops 2026-03-01T12:00:00Z", "acme/write_irreversible ops 2026-03-01T12:00:00Z", "globex/x ops 2026-03-01T12:00:00Z"}
	s = reopen(t, s)
	if got := listed(t, s); !slices.Equal(got, want) {
		t.Fatalf("after reopen: got %q, want %q", got, want)
	}
	if err := s.DeleteFreeze(ctx, "acme", "write_irreversible"); err != nil {
		t.Fatalf("DeleteFreeze: %v", err)
	}
	s = reopen(t, s)
	if got := listed(t, s); !slices.Equal(got, []string{want[0], want[2]}) {
		t.Fatalf("after delete and reopen: got %q", got)
	}
	mustConsistent(t, s)
}

func TestFreezeStoredShape(t *testing.T) {
	s := mustOpen(t, Options{})
	if err := s.PutFreeze(t.Context(), testFreeze("acme", "stripe.charges.create")); err != nil {
		t.Fatalf("PutFreeze: %v", err)
	}
	v := rawGet(t, s, bucketFreezes, []byte("acme\x00stripe.charges.create"))
	var got struct {
		V      int             `json:"v"`
		Freeze json.RawMessage `json:"freeze"`
	}
	if err := json.Unmarshal(v, &got); err != nil || got.V != 1 || len(got.Freeze) == 0 {
		t.Fatalf("stored value %s: want {\"v\":1,\"freeze\":{…}} (err %v)", v, err)
	}
}

func TestDeleteAbsentFreezeCommitsNothing(t *testing.T) {
	s := mustOpen(t, Options{})
	before := s.Stats().ReadOnly
	if err := s.DeleteFreeze(t.Context(), "acme", "never.frozen"); err != nil {
		t.Fatalf("DeleteFreeze: %v", err)
	}
	if got := s.Stats().ReadOnly; got != before+1 {
		t.Fatalf("read-only groups: got %d, want %d (deleting nothing must not commit)", got, before+1)
	}
}

// TestOpenAddsFreezesBucket opens a file written before the kill switch
// existed (no freezes bucket): Open adds the bucket, and the file keeps its
// schema version, so an older build can still open it.
func TestOpenAddsFreezesBucket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketFreezes) }); err != nil {
		t.Fatalf("drop freezes bucket: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen a file without the freezes bucket: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if got := listed(t, s); len(got) != 0 {
		t.Fatalf("ListFreezes: got %q, want none", got)
	}
	if err := s.PutFreeze(t.Context(), testFreeze("acme", "x")); err != nil {
		t.Fatalf("PutFreeze: %v", err)
	}
	mustConsistent(t, s)
}
