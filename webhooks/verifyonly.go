package webhooks

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/matcher"
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

// verifyOnly runs serve's steps before Store.Ingest with the same functions
// (lookup, readBody, the endpoint's accept, matcher.Match, reject), so the
// two routes differ by the store call, its metrics and its log line only.
func (h *Handler) verifyOnly(family string) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		ep := h.lookup(family, c.Param("endpoint"))
		if ep == nil {
			return writeError(c, http.StatusNotFound, "not_found", "no such webhook endpoint")
		}
		log := h.log.With(slog.String("vendor", ep.vendor), slog.String("endpoint", ep.name), slog.String("tenant", ep.tenant))
		body, err := h.readBody(c)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return writeError(c, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("body exceeds %d bytes", h.limit))
			}
			return writeError(c, http.StatusBadRequest, "unparsable", "body could not be read")
		}
		now := h.now()
		ev, err := ep.accept(req.Context(), req.Header, body, now)
		if err != nil {
			return h.reject(c, log, ep, err)
		}
		ev.Vendor, ev.Received = ep.vendor, now.UTC()
		// The delivery is built, as serve builds it, and then dropped: the
		// store call is what this route leaves out.
		_ = matcher.Match(ep.tenant, ev, h.types)
		return c.JSON(http.StatusOK, ackBody{Result: verifiedResult})
	}
}
