package api

import (
	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
)

// compensationBody is the body of POST /v1/claims/{key}/compensations.
type compensationBody struct {
	Action string `json:"action"`
}

// compensate is POST /v1/claims/{key}/compensations: claim the derived key
// that undoes the original (refund a charge, void an invoice). It answers
// like a claim (201 proceed, 409 wait, 423 frozen, 200 otherwise); a second
// request finds the first compensation row. Refused with 409
// compensation_pending while the original is open, 422 compensation_failed
// when it failed. The store checks the original again in its transaction.
func (s *Server) compensate(c echo.Context) error {
	tenant := principalOf(c).tenant
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	var b compensationBody
	if err := s.bind(c, &b); err != nil {
		return err
	}
	if err := ledger.ValidateAction(b.Action); err != nil {
		return err
	}
	ctx := requestContext(c)
	orig, err := s.store.Get(ctx, tenant, key)
	if err != nil {
		return err
	}
	cl, err := ledger.NewCompensation(orig, b.Action, s.replayWindow(orig.Vendor, nil),
		s.frozen(tenant, orig.Tool, orig.ToolClass), s.policy, s.now())
	if err != nil {
		return err
	}
	// The compensation row is this claim's: a traceparent formatted from
	// the span context, so valid (or empty) as ledger.NewClaim requires.
	cl.Row.Traceparent = traceparentOf(ctx)
	if f := s.vendorKeyFor(orig.Vendor); f != nil {
		cl.Row.VendorKey = f(cl.Row.Key)
	}
	res, err := s.store.Claim(ctx, cl)
	if err != nil {
		return err
	}
	s.recordClaim(ctx, cl.Row, res)
	return writeClaimJSON(c, decisionStatus(res), newClaimResponse(res))
}
