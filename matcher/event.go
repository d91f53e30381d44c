package matcher

import "time"

// Event is a verified vendor event, normalised: the fields the ledger needs,
// whatever the vendor's payload shape. webhooks.Event is this type.
type Event struct {
	// Vendor is stripe, paypal, or the vendor named by a Standard Webhooks
	// endpoint (resend, …).
	Vendor string
	// ID is the vendor's event id (evt_…, WH-…, the webhook-id header).
	ID string
	// Type is the vendor's event type (payment_intent.succeeded, …).
	Type string
	// ObjectID is the id of the object the event is about (pi_…, a capture id,
	// an email id); it becomes the row's receipt id.
	ObjectID string
	// LocalID is the metadata_local_id the runtime put in vendor metadata, if found.
	LocalID string
	// IdempotencyKey is the vendor's echo of the request's idempotency key
	// (Stripe request.idempotency_key), if any.
	IdempotencyKey string
	// Amount in minor units and Currency (lower case), when the object has them.
	Amount   *int64
	Currency string
	Livemode bool
	// Created is the vendor's time of the event (whole seconds for Stripe);
	// never used for ordering.
	Created time.Time
	// Received is when this process accepted the delivery (the injected
	// clock); it stamps the evidence and the inbox record.
	Received time.Time
	// Raw is the verified request body, unmodified. Never logged.
	Raw []byte
}
