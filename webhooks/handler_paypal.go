package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// paypalEndpoint wires a PayPal verifier (paypal.go) into the handler: the
// closer releases the verifier's idle connections.
func paypalEndpoint(ep PayPalEndpoint, opts PayPalOptions) (*endpoint, func(), error) {
	v, err := NewPayPalVerifier(ep, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("webhooks: paypal endpoint %q: %w", ep.Name, err)
	}
	e := &endpoint{name: ep.Name, tenant: ep.Tenant, vendor: "paypal"}
	e.accept = func(ctx context.Context, h http.Header, body []byte, _ time.Time) (Event, error) {
		// The verifier reads the same injected clock (PayPalOptions.Now).
		if err := v.Verify(ctx, h, body); err != nil {
			return Event{}, err
		}
		return DecodePayPal(body)
	}
	return e, v.Close, nil
}
