package webhooks

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// VerifyOnlyRoute is the path RegisterStripeVerifyOnly serves, with and
// without a trailing /:endpoint, as /webhooks/stripe does.
const VerifyOnlyRoute = "/webhooks/stripe-verify-only"

// verifiedResult is the verify-only route's answer body result.
const verifiedResult = "verified"

// RegisterStripeVerifyOnly adds POST /webhooks/stripe-verify-only[/:endpoint]
// to e: the Stripe route's path up to and including the match (endpoint
// lookup, body read under the cap, signature, timestamp, decode,
// matcher.Match), then a 200 without calling the store. It exists for the
// load program (internal/httpload), which measures the durable route
// against this ceiling in the same server. `reconciler serve` never
// registers it: a 200 here stores nothing, so a vendor pointed at it would
// lose events.
func (h *Handler) RegisterStripeVerifyOnly(e *echo.Echo) {
	serve := h.verifyOnly(familyStripe)
	e.POST(VerifyOnlyRoute, serve)
	e.POST(VerifyOnlyRoute+"/:endpoint", serve)
}

// verifyOnly runs serve's admit — lookup, capped read, verification,
// decoding, matcher.Match, with the same answers and counts for a
// rejection — and then answers 200 without the store call, which is all
// the two routes differ by.
func (h *Handler) verifyOnly(family string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, ok, err := h.admit(c, family); !ok {
			return err
		}
		return c.JSON(http.StatusOK, ackBody{Result: verifiedResult})
	}
}
