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
	return MatchAction(tenant, ev, t.Lookup(ev.Vendor, ev.Type))
}

// MatchAction is Match with the action already decided (a table's Lookup,
// or a verifier's own reading of the event): the webhook handler decides
// it per delivery and would otherwise build a one-entry Table each time.
func MatchAction(tenant string, ev Event, a Action) ledger.Delivery {
	at := ev.Received
	if at.IsZero() {
		at = ev.Created
	}
	at = at.UTC()
	d := ledger.Delivery{
		Tenant:         tenant,
		Vendor:         ev.Vendor,
		EventID:        ev.ID,
		LocalID:        joinable(ev.LocalID),
		IdempotencyKey: joinable(ev.IdempotencyKey),
		At:             at,
	}
	var status ledger.Status
	switch a {
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
		ReceiptID:     joinable(ev.ObjectID),
		VendorEventID: ev.ID,
		Amount:        cloneAmount(ev.Amount),
		Currency:      strings.ToLower(joinable(ev.Currency)),
		At:            at,
	}
	return d
}

// joinable returns s when a row could hold it as a key, local id, receipt
// id or currency (1–255 printable ASCII), else "". Vendors fill these fields for other
// integrations too (PayPal's custom_id and invoice_id are free text), and a
// value no row could hold joins no row: it is dropped rather than refused,
// because a 400 would make the vendor retry a good event for days.
func joinable(s string) string {
	if ledger.ValidateKey(s) != nil {
		return ""
	}
	return s
}

func cloneAmount(a *int64) *int64 {
	if a == nil {
		return nil
	}
	v := *a
	return &v
}
