package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// testIngestHints: a delivery whose body is not signed (Mailgun) is a
// hint (Delivery.Recheck: recorded, joined, no outcome, the row due now,
// in one transaction), and its signature token (Delivery.ReplayToken) is
// recorded with the event so a replay is refused at every replica.
func testIngestHints(t *testing.T, open Open) {
	hint := func(r ledger.Row, eventID string) ledger.Delivery {
		d := byLocalID(r, eventID, webhook("", "", "", 10*time.Second))
		d.Recheck = true
		return d
	}
	t.Run("a hint makes an open row due now and applies nothing", func(t *testing.T) {
		e := newEnv(t, open)
		before := seed(nil, timeout(time.Second))(e)
		if !before.NextCheckAt.After(at(10 * time.Second)) {
			t.Fatalf("setup: the unknown row is due at %v already", before.NextCheckAt)
		}
		events := len(e.pending())
		res, err := e.s.Ingest(e.ctx, hint(before, "ev-h1"))
		if err != nil || res.Outcome != ledger.IngestAccepted {
			t.Fatalf("Ingest = %v, %v; want accepted", res.Outcome, err)
		}
		got := e.get(before.Tenant, before.Key)
		want := before.Clone()
		want.NextCheckAt = at(10 * time.Second)
		sameRow(t, "hinted row", got, want)
		if n := len(e.pending()); n != events {
			t.Fatalf("a hint wrote %d outbox records", n-events)
		}
		rows, err := e.s.Due(e.ctx, at(10*time.Second), 10)
		if err != nil || len(rows) != 1 || rows[0].Key == "" || rows[0].Key != before.Key {
			t.Fatalf("Due = %d rows, %v; want the hinted row", len(rows), err)
		}
		if res, _ := e.s.Ingest(e.ctx, hint(before, "ev-h1")); res.Outcome != ledger.IngestDuplicate {
			t.Fatalf("the hint again: %s, want duplicate", res.Outcome)
		}
		e.consistent()
	})
	t.Run("a hint leaves a settled row alone", func(t *testing.T) {
		e := newEnv(t, open)
		before := seed(nil, response(200, "pi_1", time.Second))(e)
		if _, err := e.s.Ingest(e.ctx, hint(before, "ev-h2")); err != nil {
			t.Fatal(err)
		}
		sameRow(t, "settled row", e.get(before.Tenant, before.Key), before)
		e.consistent()
	})
	t.Run("a hint carries no status and no receipt", func(t *testing.T) {
		e := newEnv(t, open)
		row := seed(nil, timeout(time.Second))(e)
		for _, ev := range []ledger.Evidence{evSucceeded, webhook("", "pi_9", "", 10*time.Second)} {
			d := byLocalID(row, "ev-h3", ev)
			d.Recheck = true
			if _, err := e.s.Ingest(e.ctx, d); !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("Ingest = %v, want ErrInvalid", err)
			}
		}
	})
	t.Run("a replay token is refused on another event, at any caller", func(t *testing.T) {
		e := newEnv(t, open)
		a := seed(nil, timeout(time.Second))(e)
		b := seed(mods(withKey("order-b")), timeout(time.Second))(e)
		first := byLocalID(a, "ev-t1", evSucceeded)
		first.ReplayToken = "tok-1"
		if res, err := e.s.Ingest(e.ctx, first); err != nil || res.Outcome != ledger.IngestAccepted {
			t.Fatalf("first = %v, %v", res.Outcome, err)
		}
		if res, err := e.s.Ingest(e.ctx, first); err != nil || res.Outcome != ledger.IngestDuplicate {
			t.Fatalf("the same event and token = %v, %v; want duplicate", res.Outcome, err)
		}
		events := len(e.pending())
		glued := byLocalID(b, "ev-t2", evFailed)
		glued.ReplayToken = "tok-1"
		if _, err := e.s.Ingest(e.ctx, glued); !errors.Is(err, ledger.ErrReplayedToken) || !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("the token on another event = %v, want ErrReplayedToken", err)
		}
		if got := e.get(b.Tenant, b.Key); got.Status != ledger.StatusUnknown || len(e.pending()) != events {
			t.Fatalf("row b %s, outbox +%d: a refused delivery changed something", got.Status, len(e.pending())-events)
		}
		// Nothing of ev-t2 was kept: under its own token it is new.
		glued.ReplayToken = "tok-2"
		if res, err := e.s.Ingest(e.ctx, glued); err != nil || res.Outcome != ledger.IngestAccepted {
			t.Fatalf("ev-t2 with its own token = %v, %v; want accepted", res.Outcome, err)
		}
		// The token's record goes with the inbox.
		if _, err := e.s.PruneInbox(e.ctx, at(time.Hour)); err != nil {
			t.Fatal(err)
		}
		reused := byLocalID(b, "ev-t3", evProgress)
		reused.ReplayToken = "tok-1"
		if res, err := e.s.Ingest(e.ctx, reused); err != nil || res.Outcome != ledger.IngestAccepted {
			t.Fatalf("after pruning = %v, %v; want accepted", res.Outcome, err)
		}
		e.consistent()
	})
}
