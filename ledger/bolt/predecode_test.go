package bolt

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestIngestUsesCallerDecoding: a delivery's joined row, decoded by
// Ingest in the caller's goroutine, is used by the committer when the
// stored bytes are the ones decoded, and never when the row changed in
// between (the flow then sees the row as stored, as without the hint), nor
// twice (a flow owns the row it is given).
func TestIngestUsesCallerDecoding(t *testing.T) {
	ctx := context.Background()
	hits := func(s *Store) uint64 { return s.metrics.preDecoded.Load() }
	succeeded := func(lid, event, receipt string, at time.Time) ledger.Delivery {
		return ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: event, LocalID: lid, At: at,
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: receipt, VendorEventID: event, At: at}}
	}

	t.Run("row unchanged since the read", func(t *testing.T) {
		s := mustOpen(t, Options{})
		row := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row
		res, err := s.Ingest(ctx, succeeded(row.MetadataLocalID, "evt_1", "pi_1", t0.Add(time.Minute)))
		if err != nil || res.Outcome != ledger.IngestAccepted {
			t.Fatalf("ingest = %+v, %v", res, err)
		}
		if hits(s) != 1 {
			t.Fatalf("pre-decoded rows = %d, want 1", hits(s))
		}
		got, err := s.Get(ctx, "acme", row.Key)
		if err != nil || got.Status != ledger.StatusSucceeded || got.UpstreamReceiptID != "pi_1" {
			t.Fatalf("stored %s %q, %v; want succeeded pi_1", got.Status, got.UpstreamReceiptID, err)
		}
	})

	t.Run("row changed after the read: decoded afresh", func(t *testing.T) {
		// Two stores take the same writes; one's last delivery carries a
		// read made before the row changed. Both must end alike.
		var rows [2]ledger.Row
		var results [2]ledger.IngestResult
		for i, stale := range []bool{false, true} {
			s := mustOpen(t, Options{})
			row := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row
			lid := row.MetadataLocalID
			p := s.readAhead(ctx, lid)
			if p == nil {
				t.Fatal("readAhead found no row")
			}
			if _, err := s.Ingest(ctx, succeeded(lid, "evt_1", "pi_1", t0.Add(time.Minute))); err != nil {
				t.Fatal(err)
			}
			before := hits(s)
			ictx := ctx
			if stale {
				ictx = context.WithValue(ctx, preReadKey{}, p)
			}
			res, err := s.Flows.Ingest(ictx, succeeded(lid, "evt_2", "pi_2", t0.Add(2*time.Minute)))
			if err != nil {
				t.Fatal(err)
			}
			if hits(s) != before {
				t.Fatalf("stale=%v: a read of other bytes was used", stale)
			}
			results[i] = res
			if rows[i], err = s.Get(ctx, "acme", row.Key); err != nil {
				t.Fatal(err)
			}
		}
		if rows[1].UpstreamReceiptID != "pi_1" || !reflect.DeepEqual(rows[0], rows[1]) {
			t.Fatalf("with a stale read the row is\n%+v\nwithout\n%+v", rows[1], rows[0])
		}
		if results[0].Outcome != results[1].Outcome || !reflect.DeepEqual(results[0].Change, results[1].Change) {
			t.Fatalf("with a stale read the result is %+v, without %+v", results[1], results[0])
		}
	})

	t.Run("handed out once", func(t *testing.T) {
		s := mustOpen(t, Options{})
		req := claimReq("acme", "", "run_1", 1)
		req.Request = &ledger.Request{Method: "POST", Path: "/v1/payment_intents"}
		row := mustClaim(t, s, req, t0).Row
		lid := row.MetadataLocalID
		p := s.readAhead(ctx, lid)
		if p == nil || p.row.Request == nil {
			t.Fatalf("readAhead = %+v: want a row with a request", p)
		}
		want, err := decodeRow(p.v)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.write(ctx, func(tx *boltTx) error {
			tx.preRead = p
			first, err := tx.RowByLocalID(lid)
			if err != nil {
				return err
			}
			// The flow owns what it was given: changing it ...
			first.Status = ledger.StatusSucceeded
			first.Request.Method = "changed"
			// ... does not change what a second read sees.
			second, err := tx.RowByLocalID(lid)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(second, want) {
				t.Errorf("second read\n%+v\nwant\n%+v", second, want)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if hits(s) != 1 {
			t.Fatalf("pre-decoded rows = %d, want 1", hits(s))
		}
	})
}
