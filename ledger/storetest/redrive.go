package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// inTx is what a store embedding ledger.Flows offers (Flows.InTx): the
// suite builds with it a state the flows never leave behind.
type inTx interface {
	InTx(ctx context.Context, fn func(ledger.Tx) error) error
}

func testRedrive(t *testing.T, open Open) {
	e := newEnv(t, open)
	raw, ok := e.s.(inTx)
	if !ok {
		t.Fatalf("%T has no InTx: embed ledger.Flows", e.s)
	}
	redrive := func(wantIDs, wantParked, wantRows int) ledger.RedriveResult {
		t.Helper()
		res, err := e.s.RedriveOrphans(e.ctx)
		if err != nil {
			t.Fatalf("RedriveOrphans: %v", err)
		}
		if res.LocalIDs != wantIDs || res.StillParked != wantParked || len(res.Rows) != wantRows {
			t.Fatalf("RedriveOrphans: %d local ids, %d still parked, %d rows; want %d, %d, %d",
				res.LocalIDs, res.StillParked, len(res.Rows), wantIDs, wantParked, wantRows)
		}
		return res
	}
	redrive(0, 0, 0)

	// Deliveries parked under more local ids than one batch holds, none of
	// which has a row: every one is looked at once and stays parked.
	parked := ledger.RedriveBatch + 50
	for i := range parked {
		d := delivery(tenantA, fmt.Sprintf("evt_p%03d", i), -time.Minute, evSucceeded)
		d.LocalID = fmt.Sprintf("rl_parked_%03d", i)
		if res, err := e.s.Ingest(e.ctx, d); err != nil || res.Outcome != ledger.IngestOrphan {
			t.Fatalf("Ingest %s: got %q err %v, want orphan", d.EventID, res.Outcome, err)
		}
	}
	redrive(parked, parked, 0)
	if n := len(e.pending()); n != 0 {
		t.Fatalf("outbox: %d records after a redrive that applied nothing", n)
	}

	// A row beside deliveries parked under its local id. Claim applies
	// orphans in the transaction that inserts the row, so only a restore, a
	// repair or a bug leaves this; redrive applies them as Claim would have:
	// oldest first, the foreign tenant's alerting only.
	row := e.claim(baseRequest(), t0).Row
	stranded := []ledger.Delivery{
		byLocalID(row, "evt_s1", evProgress),
		byLocalID(row, "evt_s2", receipt(evSucceeded, "pi_2")),
		byLocalID(row, "evt_s3", evSucceeded),
	}
	stranded[0].At, stranded[1].At = at(time.Second), at(2*time.Second)
	stranded[2].Tenant = tenantB
	if err := raw.InTx(e.ctx, func(tx ledger.Tx) error {
		for _, d := range stranded {
			if err := tx.PutOrphan(d); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("park beside the row: %v", err)
	}
	res := redrive(parked+1, parked, 1)
	got := res.Rows[0]
	if len(got.Changes) != len(stranded) {
		t.Fatalf("redriven row: %d changes, want %d", len(got.Changes), len(stranded))
	}
	if a := got.Changes[2].Alerts; len(a) != 1 || a[0] != ledger.AlertForeignTenant {
		t.Fatalf("foreign delivery: alerts %v, want [foreign_tenant]", a)
	}
	stored := e.get(row.Tenant, row.Key)
	sameRow(t, "stored row vs redrive result", stored, got.Row)
	if stored.Status != ledger.StatusSucceeded || stored.UpstreamReceiptID != "pi_1" {
		t.Fatalf("row: status %s receipt %q, want succeeded pi_1 (the first receipt sticks)", stored.Status, stored.UpstreamReceiptID)
	}
	if n := len(e.pending()); n != 1 {
		t.Fatalf("outbox: %d records, want the one succeeded event", n)
	}
	// The applied deliveries are remembered and gone from the parking lot.
	for _, d := range stranded[:2] {
		if again, err := e.s.Ingest(e.ctx, d); err != nil || again.Outcome != ledger.IngestDuplicate {
			t.Fatalf("redelivery of %s: got %q err %v, want duplicate", d.EventID, again.Outcome, err)
		}
	}
	redrive(parked, parked, 0)
	e.consistent()
}
