package matcher

import (
	"fmt"
	"maps"
)

// Action is what a vendor event type does to the row it joins.
type Action string

// The actions of docs/architecture.md §7.
const (
	// Succeeded: the side effect happened.
	Succeeded Action = "succeeded"
	// Failed: the vendor refused it (the row becomes failed_poison).
	Failed Action = "failed"
	// Progress: the object exists but has not settled; the receipt id is
	// stored and the status kept.
	Progress Action = "progress"
	// Ignore: the event id is recorded, nothing is joined.
	Ignore Action = "ignore"
)

// Valid reports whether a is one of the four actions.
func (a Action) Valid() bool {
	switch a {
	case Succeeded, Failed, Progress, Ignore:
		return true
	}
	return false
}

// ParseAction parses a configured action name.
func ParseAction(s string) (Action, error) {
	a := Action(s)
	if !a.Valid() {
		return "", fmt.Errorf("invalid event action %q: want succeeded, failed, progress or ignore", s)
	}
	return a, nil
}

// Table maps a vendor and an event type to an action. A type it does not
// name is ignored, so a vendor that adds event types never moves a row by
// surprise. Build one with NewTable; the zero value ignores everything.
type Table map[string]map[string]Action

// Lookup returns the action for an event type (Ignore when unknown).
func (t Table) Lookup(vendor, eventType string) Action {
	if a, ok := t[vendor][eventType]; ok {
		return a
	}
	return Ignore
}

// Set adds or replaces one entry.
func (t Table) Set(vendor, eventType string, a Action) {
	if t[vendor] == nil {
		t[vendor] = make(map[string]Action)
	}
	t[vendor][eventType] = a
}

// NewTable returns the default table extended (and overridden) by extra,
// the event_types section of the configuration. It refuses an invalid action.
func NewTable(extra map[string]map[string]Action) (Table, error) {
	t := DefaultTable()
	for vendor, types := range extra {
		for typ, a := range types {
			if !a.Valid() {
				return nil, fmt.Errorf("event_types.%s[%q]: invalid action %q", vendor, typ, a)
			}
			t.Set(vendor, typ, a)
		}
	}
	return t, nil
}

// DefaultTable returns a fresh copy of the defaults: the event types whose
// meaning for "did the side effect happen" is unambiguous. Types that only
// describe later life (disputes, refunds of a charge, opens and clicks) are
// left out and so ignored.
func DefaultTable() Table {
	t := make(Table, len(defaults))
	for vendor, types := range defaults {
		t[vendor] = maps.Clone(types)
	}
	return t
}

var defaults = Table{
	"stripe": {
		// The object a write created exists and its money moved (or will not).
		"payment_intent.succeeded":                 Succeeded,
		"payment_intent.payment_failed":            Failed,
		"payment_intent.canceled":                  Failed,
		"payment_intent.created":                   Progress,
		"payment_intent.processing":                Progress,
		"payment_intent.requires_action":           Progress,
		"payment_intent.amount_capturable_updated": Progress,
		"charge.succeeded":                         Succeeded,
		"charge.failed":                            Failed,
		"charge.pending":                           Progress,
		"refund.created":                           Succeeded,
		"customer.created":                         Succeeded,
		"invoice.created":                          Succeeded,
		"invoice.finalized":                        Succeeded,
		"invoice.paid":                             Succeeded,
		"invoice.payment_succeeded":                Succeeded,
		"invoice.finalization_failed":              Failed,
		"customer.subscription.created":            Succeeded,
		"payout.paid":                              Succeeded,
		"payout.failed":                            Failed,
		"transfer.created":                         Succeeded,
	},
	"paypal": {
		"PAYMENT.CAPTURE.COMPLETED":          Succeeded,
		"CHECKOUT.ORDER.COMPLETED":           Succeeded,
		"PAYMENT.CAPTURE.PENDING":            Progress,
		"CHECKOUT.ORDER.APPROVED":            Progress,
		"PAYMENT.CAPTURE.DENIED":             Failed,
		"PAYMENT.CAPTURE.DECLINED":           Failed,
		"CHECKOUT.PAYMENT-APPROVAL.REVERSED": Failed,
		"PAYMENT.CAPTURE.REFUNDED":           Ignore,
	},
	"resend": {
		"email.sent":             Succeeded,
		"email.delivered":        Succeeded,
		"email.scheduled":        Progress,
		"email.delivery_delayed": Progress,
		"email.bounced":          Failed,
		"email.failed":           Failed,
	},
}
