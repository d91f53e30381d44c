package postgres

import (
	"bytes"
	"errors"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// TestIngestRoundTrips: a delivery's reads go as one pipeline with the
// BEGIN, its writes with the COMMIT — two round trips for a known row, a
// duplicate and an orphan (three, four and four before ingest.go) — and
// the answers are the flow's: accepted, duplicate (noted in the row's
// journal), orphan (parked, applied by the claim), a reused replay token
// refused, a join by the echoed key.
func TestIngestRoundTrips(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	target, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testkit.StartCutProxy(t, target.Host)
	// Statements go as text (no statement cache), so the count below can
	// leave out the notifier's NOTIFY, the pool's liveness pings and its
	// new connections.
	s := openStore(t, proxied(t, u, proxy.Addr())+"&default_query_exec_mode=exec", Options{Policy: ledger.DefaultPolicy(), MaxConns: 2})
	var sends atomic.Int64
	proxy.Arm(func(toServer bool, window []byte, fresh int) bool {
		chunk := window[fresh:]
		// A new pool connection's startup message: length, protocol 3.0.
		startup := len(chunk) >= 8 && bytes.Equal(chunk[4:8], []byte{0, 3, 0, 0})
		if toServer && !startup && !bytes.Contains(chunk, []byte("pg_notify")) && !bytes.Contains(chunk, []byte("-- ping")) {
			sends.Add(1)
		}
		return false
	})
	ctx := t.Context()
	row := claimOne(t, s, "acme", `{"n":1}`)
	keyed := claimOne(t, s, "acme", `{"n":2}`)
	succeeded := ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", At: t0.Add(time.Second)}
	delivery := func(event, localID string) ledger.Delivery {
		return ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: event, LocalID: localID, Evidence: succeeded, At: t0.Add(time.Second)}
	}
	orphanLocal := "lid-orphan-" + randHex(4)
	withToken := delivery("evt_token_1", "lid-nobody")
	withToken.ReplayToken = "tok-1"
	reusedToken := delivery("evt_token_2", "lid-nobody")
	reusedToken.ReplayToken = "tok-1"
	byKey := delivery("evt_by_key", "")
	byKey.IdempotencyKey = keyed.Key

	for _, tc := range []struct {
		name    string
		d       ledger.Delivery
		outcome ledger.IngestOutcome
		err     error
		// trips is the most round trips the call may take (0: not checked).
		trips int64
	}{
		{"a known row: accepted", delivery("evt_1", row.MetadataLocalID), ledger.IngestAccepted, nil, 2},
		{"the same event again: duplicate", delivery("evt_1", row.MetadataLocalID), ledger.IngestDuplicate, nil, 2},
		{"no row under the local id: orphan", delivery("evt_2", orphanLocal), ledger.IngestOrphan, nil, 2},
		{"a replay token, first seen", withToken, ledger.IngestOrphan, nil, 2},
		{"the token again with another event: refused", reusedToken, "", ledger.ErrReplayedToken, 0},
		{"no local id: joined by the echoed key", byKey, ledger.IngestAccepted, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sends.Load()
			res, err := s.Ingest(ctx, tc.d)
			trips := sends.Load() - before
			if !errors.Is(err, tc.err) || (tc.err == nil && res.Outcome != tc.outcome) {
				t.Fatalf("ingest: %q %v; want %q %v", res.Outcome, err, tc.outcome, tc.err)
			}
			if tc.trips > 0 && trips > tc.trips {
				t.Fatalf("%d round trips, want at most %d", trips, tc.trips)
			}
		})
	}

	if got, err := s.Get(ctx, "acme", row.Key); err != nil || got.Status != ledger.StatusSucceeded {
		t.Fatalf("the known row: %s %v; want succeeded", got.Status, err)
	}
	if got, err := s.Get(ctx, "acme", keyed.Key); err != nil || got.Status != ledger.StatusSucceeded {
		t.Fatalf("the row joined by key: %s %v; want succeeded", got.Status, err)
	}
	notes, err := s.RowJournal(ctx, "acme", row.Key)
	if err != nil {
		t.Fatal(err)
	}
	dup := 0
	for _, e := range notes {
		if e.Outcome == ledger.NoteDuplicate {
			dup++
		}
	}
	if dup != 1 {
		t.Fatalf("the row's journal notes %d duplicates, want 1: %+v", dup, notes)
	}
	var parked []ledger.Delivery
	if err := s.InTx(ctx, func(tx ledger.Tx) error {
		var err error
		parked, err = tx.Orphans(orphanLocal)
		return err
	}); err != nil || len(parked) != 1 || parked[0].EventID != "evt_2" {
		t.Fatalf("parked under %s: %+v %v; want evt_2", orphanLocal, parked, err)
	}
	if err := s.CheckConsistency(ctx); err != nil {
		t.Fatal(err)
	}
}
