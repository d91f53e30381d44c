package memstore

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mustClaim(t *testing.T, s *Store, intent string, at time.Time) ledger.Row {
	t.Helper()
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(intent), ReplayWindow: time.Hour,
	}, ledger.DefaultPolicy(), at)
	if err != nil {
		t.Fatalf("NewClaim: %v", err)
	}
	res, err := s.Claim(t.Context(), c)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return res.Row
}

// snapshot deep-copies the state so a later comparison sees every change.
func snapshot(s *Store) state {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	st.rows = maps.Clone(st.rows)
	st.byLocalID = maps.Clone(st.byLocalID)
	st.keyTenants = maps.Clone(st.keyTenants)
	for k, v := range st.keyTenants {
		st.keyTenants[k] = slices.Clone(v)
	}
	st.due = slices.Clone(st.due)
	st.seen = maps.Clone(st.seen)
	for k, v := range st.seen {
		st.seen[k] = slices.Clone(v)
	}
	st.outbox = slices.Clone(st.outbox)
	st.inbox = maps.Clone(st.inbox)
	st.inboxOrder = slices.Clone(st.inboxOrder)
	st.orphans = maps.Clone(st.orphans)
	for k, v := range st.orphans {
		st.orphans[k] = slices.Clone(v)
	}
	return st
}

// populated returns a store with a row, an outbox record, inbox entries and
// a parked orphan, so every kind of write has something to overwrite.
func populated(t *testing.T) (*Store, ledger.Row) {
	t.Helper()
	s := New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = s.Close() })
	row := mustClaim(t, s, `{"n":1}`, t0)
	if _, _, err := s.Report(t.Context(), "acme", row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(time.Second)}); err != nil {
		t.Fatalf("Report: %v", err)
	}
	if _, err := s.Ingest(t.Context(), ledger.Delivery{
		Tenant: "acme", Vendor: "stripe", EventID: "evt_orphan", LocalID: "rl_00000000000000000000000000000000",
		Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded}, At: t0,
	}); err != nil {
		t.Fatalf("Ingest: %v", err)
	}
	return s, s.rows[rowID{"acme", row.Key}]
}

// TestRollback: a transaction that fails after writing leaves no trace,
// whatever it wrote. The shared flows rarely fail after a write, so the
// suite cannot reach this; it is tested here, on the journal itself.
func TestRollback(t *testing.T) {
	writes := []struct {
		name  string
		write func(t *testing.T, tx *tx, row ledger.Row)
	}{
		{"update a row (settle it)", func(t *testing.T, tx *tx, row ledger.Row) {
			upd := row.Clone()
			upd.Status, upd.NextCheckAt = ledger.StatusSucceeded, time.Time{}
			must(t, tx.PutRow(&row, upd))
		}},
		{"insert a row", func(t *testing.T, tx *tx, row ledger.Row) {
			ins := row.Clone()
			ins.Key, ins.MetadataLocalID, ins.FirstSeenAt = "order-9", "rl_99999999999999999999999999999999", t0.Add(time.Hour)
			must(t, tx.PutRow(nil, ins))
		}},
		{"update a row twice", func(t *testing.T, tx *tx, row ledger.Row) {
			a := row.Clone()
			a.NextCheckAt = t0.Add(time.Hour)
			must(t, tx.PutRow(&row, a))
			b := a.Clone()
			b.Status = ledger.StatusFailedPoison
			must(t, tx.PutRow(&a, b))
		}},
		{"append outbox records", func(t *testing.T, tx *tx, row ledger.Row) {
			must(t, tx.AppendOutbox(ledger.Event{Key: row.Key, Status: "succeeded"}))
			must(t, tx.AppendOutbox(ledger.Event{Key: row.Key, Status: "escalated"}))
		}},
		{"put new and existing inbox records", func(t *testing.T, tx *tx, row ledger.Row) {
			must(t, tx.PutInbox("stripe", "evt_new", ledger.InboxRecord{FirstSeen: t0, Result: ledger.IngestAccepted}))
			must(t, tx.PutInbox("stripe", "evt_orphan", ledger.InboxRecord{FirstSeen: t0.Add(time.Hour), Result: ledger.IngestAccepted}))
		}},
		{"park and delete orphans", func(t *testing.T, tx *tx, row ledger.Row) {
			must(t, tx.PutOrphan(ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_2", LocalID: "rl_00000000000000000000000000000000"}))
			must(t, tx.PutOrphan(ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_3", LocalID: "rl_11111111111111111111111111111111"}))
			must(t, tx.DeleteOrphans("rl_00000000000000000000000000000000"))
		}},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			s, row := populated(t)
			before := snapshot(s)
			drainNotify(s)
			boom := errors.New("boom")
			err := s.update(t.Context(), func(tx *tx) error {
				w.write(t, tx, row)
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("update: got %v, want boom", err)
			}
			if got := snapshot(s); !reflect.DeepEqual(got, before) {
				t.Fatalf("state after rollback:\n got %+v\nwant %+v", got, before)
			}
			select {
			case <-s.Notify():
				t.Fatal("Notify signalled for a rolled-back transaction")
			default:
			}
			if err := s.CheckConsistency(t.Context()); err != nil {
				t.Fatalf("CheckConsistency after rollback: %v", err)
			}
			// The same writes commit when the transaction succeeds.
			if err := s.update(t.Context(), func(tx *tx) error { w.write(t, tx, row); return nil }); err != nil {
				t.Fatalf("update: %v", err)
			}
			if got := snapshot(s); reflect.DeepEqual(got, before) {
				t.Fatal("a committed transaction changed nothing")
			}
			if err := s.CheckConsistency(t.Context()); err != nil {
				t.Fatalf("CheckConsistency after commit: %v", err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func drainNotify(s *Store) {
	for {
		select {
		case <-s.Notify():
		default:
			return
		}
	}
}

// TestPutRowRefusesConflicts: the checks that keep a buggy flow from
// corrupting the indexes.
func TestPutRowRefusesConflicts(t *testing.T) {
	cases := []struct {
		name string
		put  func(tx *tx, row ledger.Row) error
		want error
	}{
		{"insert over an existing row", func(tx *tx, row ledger.Row) error { return tx.PutRow(nil, row) }, errConflict},
		{"update of a missing row", func(tx *tx, row ledger.Row) error {
			r := row.Clone()
			r.Key, r.MetadataLocalID = "missing", "rl_missing"
			return tx.PutRow(&r, r)
		}, errConflict},
		{"a local id held by another row", func(tx *tx, row ledger.Row) error {
			r := row.Clone()
			r.Key = "other"
			return tx.PutRow(nil, r)
		}, ledger.ErrFingerprintMismatch},
		{"an invalid status", func(tx *tx, row ledger.Row) error {
			r := row.Clone()
			r.Status = "settled"
			return tx.PutRow(&row, r)
		}, ledger.ErrInvalidStatus},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, row := populated(t)
			before := snapshot(s)
			err := s.update(t.Context(), func(tx *tx) error { return tc.put(tx, row) })
			if !errors.Is(err, tc.want) {
				t.Fatalf("PutRow: got %v, want %v", err, tc.want)
			}
			if got := snapshot(s); !reflect.DeepEqual(got, before) {
				t.Fatal("a refused PutRow changed the state")
			}
		})
	}
}

// TestCheckConsistencyFindsCorruption: the audit is only worth running if
// it notices a broken index.
func TestCheckConsistencyFindsCorruption(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(st *state, row ledger.Row)
		want    string
	}{
		{"open row missing from due", func(st *state, row ledger.Row) { st.due = nil }, "due index"},
		{"due entry at a stale time", func(st *state, row ledger.Row) { st.due[0].at = st.due[0].at.Add(time.Second) }, "due index"},
		{"settled row in due", func(st *state, row ledger.Row) {
			row.Status = ledger.StatusSucceeded
			st.rows[rowID{row.Tenant, row.Key}] = row
		}, "due index"},
		{"local id pointing elsewhere", func(st *state, row ledger.Row) { st.byLocalID[row.MetadataLocalID] = rowID{"acme", "x"} }, "local id index"},
		{"stray local id", func(st *state, row ledger.Row) { st.byLocalID["rl_x"] = rowID{"acme", "x"} }, "local id index"},
		{"key index missing a tenant", func(st *state, row ledger.Row) { delete(st.keyTenants, row.Key) }, "key index"},
		{"first_seen index missing a row", func(st *state, row ledger.Row) { delete(st.seen, row.Tenant) }, "first_seen index"},
		{"inbox order missing an entry", func(st *state, row ledger.Row) { st.inboxOrder = nil }, "inbox order"},
		{"outbox out of order", func(st *state, row ledger.Row) {
			st.outbox = append(st.outbox, ledger.OutboxRecord{Seq: 1})
		}, "outbox"},
		{"orphan under the wrong local id", func(st *state, row ledger.Row) {
			st.orphans["rl_elsewhere"] = []ledger.Delivery{{LocalID: "rl_x"}}
		}, "orphans"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, row := populated(t)
			if err := s.CheckConsistency(t.Context()); err != nil {
				t.Fatalf("CheckConsistency before corruption: %v", err)
			}
			s.mu.Lock()
			tc.corrupt(&s.state, row)
			s.mu.Unlock()
			err := s.CheckConsistency(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckConsistency: got %v, want a problem with the %s", err, tc.want)
			}
		})
	}
}

// TestNoAliasing: rows handed out are copies; changing them changes nothing.
func TestNoAliasing(t *testing.T) {
	s, row := populated(t)
	got, err := s.Get(t.Context(), row.Tenant, row.Key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	got.Request = &ledger.Request{Method: "POST"}
	got.Alerts = append(got.Alerts, ledger.Alert{Kind: ledger.AlertMismatch})
	got.Status = ledger.StatusSucceeded
	again, err := s.Get(t.Context(), row.Tenant, row.Key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !reflect.DeepEqual(again, row) {
		t.Fatalf("stored row changed through a returned copy: %+v", again)
	}
}
