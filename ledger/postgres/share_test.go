package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// TestClaimDueReplicas: two stores on one schema (two replicas) share the
// due rows; within a lease no row goes to both, and every due row goes to
// one of them.
func TestClaimDueReplicas(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	const n = 40
	want := map[string]bool{}
	for i := range n {
		want[claimOne(t, a, "acme", fmt.Sprintf(`{"n":%d}`, i)).Key] = true
	}
	settled := claimOne(t, a, "acme", `{"settled":true}`)
	if _, _, err := a.Report(t.Context(), "acme", settled.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: t0}); err != nil {
		t.Fatalf("Report: %v", err)
	}
	now := t0.Add(time.Hour)
	const lease = 10 * time.Minute

	// share runs both replicas until neither gets anything and returns who got what.
	share := func(now time.Time) map[string][]string {
		got := map[string][]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, s := range map[string]*Store{"a": a, "b": b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					rows, err := s.ClaimDue(context.Background(), now, 3, lease)
					if err != nil {
						t.Errorf("ClaimDue on %s: %v", name, err)
						return
					}
					if len(rows) == 0 {
						return
					}
					mu.Lock()
					for _, r := range rows {
						got[r.Key] = append(got[r.Key], name)
						if !r.NextCheckAt.Equal(now.Add(lease)) {
							t.Errorf("ClaimDue on %s: next_check_at %s, want now+lease %s", name, r.NextCheckAt, now.Add(lease))
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return got
	}
	check := func(what string, got map[string][]string) {
		t.Helper()
		for key, by := range got {
			if len(by) != 1 {
				t.Fatalf("%s: row %s went to %v within one lease", what, key, by)
			}
			if !want[key] {
				t.Fatalf("%s: row %s is not an open due row", what, key)
			}
		}
		if len(got) != n {
			t.Fatalf("%s: %d rows shared out, want %d", what, len(got), n)
		}
	}

	check("first pass", share(now))
	if again := share(now.Add(lease - time.Second)); len(again) != 0 {
		t.Fatalf("inside the lease: %d rows handed out again", len(again))
	}
	// Plain Due does not see leased rows as due either: their next check moved.
	if due, err := a.Due(t.Context(), now, 100); err != nil || len(due) != 0 {
		t.Fatalf("Due inside the lease: %d rows, err %v", len(due), err)
	}
	// A replica that died mid-lease: its rows come back when the lease ends.
	check("after the lease", share(now.Add(lease)))
	if err := a.CheckConsistency(t.Context()); err != nil {
		t.Fatalf("CheckConsistency: %v", err)
	}
}

// makeEvents writes rows×3 outbox records, interleaved across rows (so
// sequence order alternates keys): unknown, escalated, succeeded per row.
func makeEvents(t *testing.T, s *Store, rows int) (keys []string) {
	t.Helper()
	ctx := t.Context()
	for i := range rows {
		keys = append(keys, claimOne(t, s, "acme", fmt.Sprintf(`{"ev":%d}`, i)).Key)
	}
	for _, k := range keys {
		if _, _, err := s.Report(ctx, "acme", k, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(time.Second)}); err != nil {
			t.Fatalf("Report: %v", err)
		}
	}
	for _, k := range keys {
		if _, ok, err := s.Escalate(ctx, "acme", k, t0.Add(time.Hour)); err != nil || !ok {
			t.Fatalf("Escalate: %v %v", ok, err)
		}
	}
	for _, k := range keys {
		ev := ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusSucceeded, Actor: "ops", Note: "seen", At: t0.Add(2 * time.Hour)}
		if _, _, err := s.Apply(ctx, "acme", k, ev); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	return keys
}

// TestClaimEventsReplicas: two relays (two stores on one schema) share the
// outbox; every record is published exactly once and each row's records
// in commit order.
func TestClaimEventsReplicas(t *testing.T) {
	db := sharedDB(t)
	t.Run("two relays drain the outbox in per-key order", func(t *testing.T) {
		u := newSchema(t, db)
		a := openStore(t, u, Options{})
		b := openStore(t, u, Options{})
		keys := makeEvents(t, a, 12)
		now := t0.Add(3 * time.Hour)
		var (
			mu        sync.Mutex
			published []ledger.OutboxRecord
			wg        sync.WaitGroup
			by        = map[string]int{}
		)
		for name, s := range map[string]*Store{"a": a, "b": b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					recs, err := s.ClaimEvents(context.Background(), now, 4, time.Minute)
					if err != nil {
						t.Errorf("ClaimEvents on %s: %v", name, err)
						return
					}
					if len(recs) == 0 {
						left, err := s.PendingEvents(context.Background(), 1)
						if err != nil || len(left) == 0 {
							return
						}
						time.Sleep(time.Millisecond) // the other relay holds the rest
						continue
					}
					var seqs []uint64
					mu.Lock()
					for _, r := range recs {
						published = append(published, r)
						seqs = append(seqs, r.Seq)
					}
					by[name] += len(recs)
					mu.Unlock()
					if err := s.AckEvents(context.Background(), seqs...); err != nil {
						t.Errorf("AckEvents on %s: %v", name, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if len(published) != 3*len(keys) {
			t.Fatalf("published %d records, want %d", len(published), 3*len(keys))
		}
		seen := map[uint64]bool{}
		perKey := map[string][]string{}
		perKeySeq := map[string][]uint64{}
		for _, r := range published {
			if seen[r.Seq] {
				t.Fatalf("record %d published twice", r.Seq)
			}
			seen[r.Seq] = true
			perKey[r.Event.Key] = append(perKey[r.Event.Key], r.Event.Status)
			perKeySeq[r.Event.Key] = append(perKeySeq[r.Event.Key], r.Seq)
		}
		for _, k := range keys {
			if got, want := perKey[k], []string{"unknown", "escalated", "succeeded"}; !slices.Equal(got, want) {
				t.Fatalf("row %s published %v, want %v", k, got, want)
			}
			if !slices.IsSorted(perKeySeq[k]) {
				t.Fatalf("row %s published seqs %v out of order", k, perKeySeq[k])
			}
		}
		t.Logf("records per relay: %v", by)
	})
	t.Run("a later record waits for the earlier one's lease", func(t *testing.T) {
		u := newSchema(t, db)
		a := openStore(t, u, Options{})
		b := openStore(t, u, Options{})
		keys := makeEvents(t, a, 1)
		now := t0.Add(3 * time.Hour)
		const lease = time.Minute
		first, err := a.ClaimEvents(t.Context(), now, 1, lease)
		if err != nil || len(first) != 1 || first[0].Event.Status != "unknown" {
			t.Fatalf("ClaimEvents(1) on a: %+v, %v; want the unknown record of %s", first, err, keys[0])
		}
		// a has not acked: b gets nothing of that row, not even its later records.
		if got, err := b.ClaimEvents(t.Context(), now.Add(lease-time.Second), 10, lease); err != nil || len(got) != 0 {
			t.Fatalf("ClaimEvents on b within a's lease: %+v, %v; want nothing", got, err)
		}
		// a's lease ends unacked (a died): b takes over from the first record.
		got, err := b.ClaimEvents(t.Context(), now.Add(lease), 10, lease)
		if err != nil || len(got) != 3 || got[0].Seq != first[0].Seq {
			t.Fatalf("ClaimEvents on b after a's lease: %+v, %v; want all 3 from seq %d", got, err, first[0].Seq)
		}
		// Once acked, a record is gone for good.
		if err := b.AckEvents(t.Context(), got[0].Seq, got[1].Seq, got[2].Seq); err != nil {
			t.Fatalf("AckEvents: %v", err)
		}
		if left, err := a.ClaimEvents(t.Context(), now.Add(time.Hour), 10, lease); err != nil || len(left) != 0 {
			t.Fatalf("after ack: %+v, %v; want nothing", left, err)
		}
	})
	t.Run("a held record lets its row's later records go and comes back after its hold", func(t *testing.T) {
		u := newSchema(t, db)
		a := openStore(t, u, Options{})
		b := openStore(t, u, Options{})
		makeEvents(t, a, 1)
		now := t0.Add(3 * time.Hour)
		const lease, hold = time.Minute, 10 * time.Minute
		first, err := a.ClaimEvents(t.Context(), now, 1, lease)
		if err != nil || len(first) != 1 {
			t.Fatalf("ClaimEvents(1) on a: %+v, %v", first, err)
		}
		before, err := a.CountEvents(t.Context())
		if err != nil || before != 3 {
			t.Fatalf("CountEvents before the hold: %d, %v; want 3", before, err)
		}
		// a published the first record and holds it until the stream has
		// synced it: b may take the row's next records at once.
		if err := a.HoldEvents(t.Context(), now.Add(hold), first[0].Seq, first[0].Seq+1000); err != nil {
			t.Fatalf("HoldEvents: %v", err)
		}
		if n, err := a.CountEvents(t.Context()); err != nil || n != 2 {
			t.Fatalf("CountEvents after the hold: %d, %v; want 2 (the held record is published)", n, err)
		}
		rest, err := b.ClaimEvents(t.Context(), now, 10, lease)
		if err != nil || len(rest) != 2 || rest[0].Seq <= first[0].Seq {
			t.Fatalf("ClaimEvents on b during the hold: %+v, %v; want the 2 later records", rest, err)
		}
		if err := b.AckEvents(t.Context(), rest[0].Seq, rest[1].Seq); err != nil {
			t.Fatalf("AckEvents: %v", err)
		}
		// Neither relay gets the held record while the hold runs, even
		// after the claim's own lease.
		if got, err := b.ClaimEvents(t.Context(), now.Add(hold-time.Second), 10, lease); err != nil || len(got) != 0 {
			t.Fatalf("ClaimEvents within the hold: %+v, %v; want nothing", got, err)
		}
		// a died before deleting it: after the hold it is handed out again,
		// unheld, so it counts as waiting until it is published once more.
		again, err := b.ClaimEvents(t.Context(), now.Add(hold), 10, lease)
		if err != nil || len(again) != 1 || again[0].Seq != first[0].Seq {
			t.Fatalf("ClaimEvents after the hold: %+v, %v; want seq %d", again, err, first[0].Seq)
		}
		if n, err := b.CountEvents(t.Context()); err != nil || n != 1 {
			t.Fatalf("CountEvents after the hold: %d, %v; want 1", n, err)
		}
	})
}

// TestNotifyAcrossStores: a commit with outbox records in one replica wakes
// the relay of another (LISTEN/NOTIFY), including after the listener's
// connection was killed and re-established.
func TestNotifyAcrossStores(t *testing.T) {
	db := sharedDB(t)
	u := newSchema(t, db)
	appB := "recon_b_" + randHex(4)
	a := openStore(t, u, Options{})
	b := openStore(t, pgtest.WithParams(t, u, "application_name", appB), Options{})
	other := openStore(t, newSchema(t, db), Options{})

	commit := func(intent string) {
		t.Helper()
		row := claimOne(t, a, "acme", intent)
		if _, _, err := a.Report(t.Context(), "acme", row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(time.Second)}); err != nil {
			t.Fatalf("Report: %v", err)
		}
	}
	waitSignal := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no Notify signal", what)
		}
	}

	drainCh(b.Notify())
	commit(`{"n":1}`)
	waitSignal("other replica", b.Notify())

	// Kill b's listener; it reconnects and LISTENs again.
	admin := adminConn(t, u)
	terminate(t, admin, appB)
	testkit.Eventually(t, "b's listener to LISTEN again", func() bool {
		var n int
		err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, appB).Scan(&n)
		return err == nil && n == 1
	})
	drainCh(b.Notify())
	commit(`{"n":2}`)
	waitSignal("after the listener reconnected", b.Notify())

	// A store on another schema listens on another channel; by the time b
	// heard the commit, other would have too.
	select {
	case <-other.Notify():
		t.Fatal("a store on another schema was woken")
	default:
	}
}

func drainCh(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestClaimAfterClose: the sharing calls answer ErrUnavailable after Close,
// like the Store methods the suite checks.
func TestClaimAfterClose(t *testing.T) {
	s := openStore(t, newSchema(t, sharedDB(t)), Options{})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"ClaimDue", func() error { _, err := s.ClaimDue(t.Context(), t0, 10, time.Minute); return err }},
		{"ClaimEvents", func() error { _, err := s.ClaimEvents(t.Context(), t0, 10, time.Minute); return err }},
		{"HoldEvents", func() error { return s.HoldEvents(t.Context(), t0, 1) }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ledger.ErrUnavailable) {
				t.Fatalf("%s after Close: got %v, want ErrUnavailable", tc.name, err)
			}
		})
	}
}
