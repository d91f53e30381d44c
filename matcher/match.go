package matcher

import (
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// Match builds the delivery that a store ingests for ev, received at an
// endpoint of tenant. The event's type decides the evidence: succeeded and
// failed carry a status, progress carries only the receipt id, and an
// ignored type only records the event id (Delivery.Ignore).
//
// The evidence is stamped with ev.Received (else ev.Created): the time the
// ledger learnt the fact, which keeps a row's timeline in our clock rather
// than the vendor's.
func Match(tenant string, ev Event, t Table) ledger.Delivery {
	at := ev.Received
	if at.IsZero() {
		at = ev.Created
	}
	at = at.UTC()
	d := ledger.Delivery{
		Tenant:         tenant,
		Vendor:         ev.Vendor,
		EventID:        ev.ID,
		LocalID:        ev.LocalID,
		IdempotencyKey: ev.IdempotencyKey,
		At:             at,
	}
	var status ledger.Status
	switch t.Lookup(ev.Vendor, ev.Type) {
	case Succeeded:
		status = ledger.StatusSucceeded
	case Failed:
		status = ledger.StatusFailedPoison
	case Progress:
		status = ""
	default:
		d.Ignore = true
		return d
	}
	d.Evidence = ledger.Evidence{
		Source:        ledger.SourceWebhook,
		Status:        status,
		ReceiptID:     ev.ObjectID,
		VendorEventID: ev.ID,
		Amount:        cloneAmount(ev.Amount),
		Currency:      strings.ToLower(ev.Currency),
		At:            at,
	}
	return d
}

func cloneAmount(a *int64) *int64 {
	if a == nil {
		return nil
	}
	v := *a
	return &v
}
