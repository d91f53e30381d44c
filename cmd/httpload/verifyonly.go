package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/webhooks"
)

// verifyOnlyRoute is the path of the verify-only target, with and without
// a trailing /{endpoint} as /webhooks/stripe has. `reconciler serve` never
// serves it: a 200 there stores nothing, so a vendor pointed at it would
// lose events.
const verifyOnlyRoute = "/webhooks/stripe-verify-only"

// verifiedResult is the verify-only route's answer: noIngest's outcome.
const verifiedResult = "verified"

// noIngest is the verify-only handler's store: it takes every delivery at
// once and keeps none, so the route costs what the Stripe route costs minus
// the store's work.
type noIngest struct{}

func (noIngest) Ingest(context.Context, ledger.Delivery) (ledger.IngestResult, error) {
	return ledger.IngestResult{Outcome: verifiedResult}, nil
}

// registerVerifyOnly adds POST verifyOnlyRoute[/:endpoint] to e: a
// webhooks handler built from o (the durable route's endpoints, clock and
// logger) over noIngest. That handler registers /webhooks/stripe itself, so
// it sits on an echo of its own and each request reaches it with its path
// turned back into /webhooks/stripe[/…] (as http.StripPrefix does); on e
// the request passes the same middleware as the durable route's.
func registerVerifyOnly(e *echo.Echo, o webhooks.Options) error {
	o.Store = noIngest{}
	// A private registry: its counts must not mix with the durable route's.
	o.Registerer = nil
	wh, err := webhooks.New(o)
	if err != nil {
		return fmt.Errorf("verify-only webhooks: %w", err)
	}
	inner := echo.New()
	wh.Register(inner)
	serve := func(c echo.Context) error {
		req := c.Request()
		r := new(http.Request)
		*r = *req
		r.URL = new(url.URL)
		*r.URL = *req.URL
		r.URL.Path = "/webhooks/stripe" + strings.TrimPrefix(req.URL.Path, verifyOnlyRoute)
		r.URL.RawPath = ""
		inner.ServeHTTP(c.Response(), r)
		return nil
	}
	e.POST(verifyOnlyRoute, serve)
	e.POST(verifyOnlyRoute+"/:endpoint", serve)
	return nil
}
