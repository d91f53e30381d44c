package webhooks

// verifiedBy says how a delivery was verified, for the row journal
// (ledger.Delivery.Verified): the endpoint whose verifier accepted it and,
// where the vendor signs less than the event, what it left unsigned. The
// console adds the scheme from the endpoint's configuration.
func verifiedBy(ep *endpoint) string {
	s := "signature checked by endpoint " + ep.name + " (" + ep.vendor + ")"
	if ep.bodyUnsigned {
		s += "; the vendor's signature does not cover the event body"
	}
	return s
}
