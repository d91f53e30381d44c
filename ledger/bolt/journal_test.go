package bolt

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestJournalSurvivesReopen: journal entries and sign-outs, acknowledged,
// are in the file after a close and a reopen, with the write-ahead log (its
// records flushed into bbolt by Close) and without it; and the read path
// sees them through the log's layers before any flush.
func TestJournalSurvivesReopen(t *testing.T) {
	for _, noWAL := range []bool{false, true} {
		t.Run(map[bool]string{false: "wal", true: "nowal"}[noWAL], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			s, err := Open(path, Options{NoWAL: noWAL})
			if err != nil {
				t.Fatal(err)
			}
			row := mustClaim(t, s, claimReq("acme", "", "run-1", 1), t0).Row
			ctx := context.Background()
			for i := range 3 {
				note := ledger.JournalEntry{Kind: ledger.JournalResolver, Outcome: ledger.NoteNotFound, Detail: "pass", At: t0.Add(time.Duration(i) * time.Minute)}
				if err := s.Reschedule(ledger.WithJournal(ctx, note), row.Tenant, row.Key, t0.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			const sid = "session-0123456789abcdef"
			if err := s.RevokeSession(ctx, sid, t0.Add(time.Hour), t0); err != nil {
				t.Fatal(err)
			}
			if j, err := s.RowJournal(ctx, row.Tenant, row.Key); err != nil || len(j) != 3 {
				t.Fatalf("before close: %d entries, %v; want 3", len(j), err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(path, Options{NoWAL: noWAL})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			j, err := s.RowJournal(ctx, row.Tenant, row.Key)
			if err != nil || len(j) != 3 || j[0].Seq >= j[2].Seq || !j[2].At.Equal(t0.Add(2*time.Minute)) {
				t.Fatalf("after reopen: %+v, %v; want the 3 entries in order", j, err)
			}
			if ok, err := s.SessionRevoked(ctx, sid); err != nil || !ok {
				t.Fatalf("after reopen the sign-out is %v, %v; want kept", ok, err)
			}
			if err := s.CheckConsistency(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
