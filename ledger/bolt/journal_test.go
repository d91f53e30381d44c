package bolt

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

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

// TestJournalCountTrims: a row keeps its newest MaxJournalPerRow entries
// through its count (sequence 0 under its prefix), never shows the count
// as an entry, and a row whose entries predate the count (a file written
// before it) is counted once and trimmed like any other.
func TestJournalCountTrims(t *testing.T) {
	const extra = 150
	for _, noWAL := range []bool{false, true} {
		t.Run(map[bool]string{false: "wal", true: "nowal"}[noWAL], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			s, err := Open(path, Options{NoWAL: noWAL})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			row := mustClaim(t, s, claimReq("acme", "", "run-1", 1), t0).Row
			note := func(i int) {
				t.Helper()
				n := ledger.JournalEntry{Kind: ledger.JournalResolver, Outcome: ledger.NoteNotFound, Detail: strconv.Itoa(i), At: t0}
				if err := s.Reschedule(ledger.WithJournal(ctx, n), row.Tenant, row.Key, t0.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			newest := func(want int) {
				t.Helper()
				j, err := s.RowJournal(ctx, row.Tenant, row.Key)
				if err != nil || len(j) != ledger.MaxJournalPerRow {
					t.Fatalf("%d entries, %v; want %d", len(j), err, ledger.MaxJournalPerRow)
				}
				for i, e := range j {
					if d := strconv.Itoa(want - ledger.MaxJournalPerRow + 1 + i); e.Detail != d {
						t.Fatalf("entry %d is %q, want %q (the newest %d in order)", i, e.Detail, d, ledger.MaxJournalPerRow)
					}
				}
			}
			for i := range ledger.MaxJournalPerRow + extra {
				note(i)
			}
			newest(ledger.MaxJournalPerRow + extra - 1)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			// As a file written before the count: the row's count removed,
			// 20 older entries put back under small sequences.
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			prefix := journalPrefix(row.Tenant, row.Key)
			err = db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketJournal)
				if c := b.Get(appendUint64(prefix, journalCountSeq)); len(c) != 8 || binary.BigEndian.Uint64(c) != ledger.MaxJournalPerRow {
					t.Errorf("the row's count is %x, want %d", c, ledger.MaxJournalPerRow)
				}
				if err := b.Delete(appendUint64(prefix, journalCountSeq)); err != nil {
					return err
				}
				for i := range 20 {
					v, err := marshal(ledger.JournalEntry{Seq: uint64(i + 1), Kind: ledger.JournalResolver, Detail: "old", At: t0})
					if err != nil {
						return err
					}
					if err := b.Put(appendUint64(prefix, uint64(i+1)), v); err != nil {
						return err
					}
				}
				return nil
			})
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			if s, err = Open(path, Options{NoWAL: noWAL}); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			note(1000)
			j, err := s.RowJournal(ctx, row.Tenant, row.Key)
			if err != nil || len(j) != ledger.MaxJournalPerRow || j[0].Detail == "old" || j[len(j)-1].Detail != "1000" {
				t.Fatalf("after the counted walk: %d entries (first %q), %v; want the newest %d", len(j), j[0].Detail, err, ledger.MaxJournalPerRow)
			}
			for range 5 {
				note(1001)
			}
			if j, err := s.RowJournal(ctx, row.Tenant, row.Key); err != nil || len(j) != ledger.MaxJournalPerRow {
				t.Fatalf("%d entries, %v; want %d", len(j), err, ledger.MaxJournalPerRow)
			}
			if err := s.CheckConsistency(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
