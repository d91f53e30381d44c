package postgres

import (
	"slices"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestFreezesShared checks what the kill switch needs of a shared database:
// a freeze written through one replica is listed by another, survives both
// closing, and a delete through either is seen by both.
func TestFreezesShared(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	ctx := t.Context()
	f := ledger.Freeze{Tenant: "acme", Target: "write_irreversible", Actor: "ops", Note: "incident", At: t0.Add(1500 * time.Microsecond)}
	if err := a.PutFreeze(ctx, f); err != nil {
		t.Fatalf("PutFreeze: %v", err)
	}
	ids := func(s *Store) []string {
		t.Helper()
		fs, err := s.ListFreezes(ctx)
		if err != nil {
			t.Fatalf("ListFreezes: %v", err)
		}
		var out []string
		for _, f := range fs {
			out = append(out, f.Tenant+"/"+f.Target+"@"+f.At.Format(time.RFC3339Nano))
		}
		return out
	}
	want := []string{"acme/write_irreversible@2026-03-01T12:00:00.0015Z"}
	if got := ids(b); !slices.Equal(got, want) {
		t.Fatalf("other replica lists %q, want %q", got, want)
	}
	_ = a.Close()
	_ = b.Close()
	c := openStore(t, u, Options{})
	if got := ids(c); !slices.Equal(got, want) {
		t.Fatalf("after reopening lists %q, want %q", got, want)
	}
	d := openStore(t, u, Options{})
	if err := d.DeleteFreeze(ctx, "acme", "write_irreversible"); err != nil {
		t.Fatalf("DeleteFreeze: %v", err)
	}
	if got := ids(c); len(got) != 0 {
		t.Fatalf("after a delete through another replica: %q", got)
	}
}
