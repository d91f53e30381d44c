package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// The API's spans (docs/architecture.md §12). With Options.TracerProvider
// set, otelhttp wraps the whole echo (webhook routes included): one server
// span per request, with the HTTP semantic conventions, continuing an
// incoming W3C traceparent on /v1 routes — the callers there hold a
// tenant's token, so a claim's span is a child of the agent's tool span —
// and starting a new trace, linked to whatever the sender sent, on every
// other route (the webhooks face the internet). A malformed or oversized
// traceparent is ignored, never an error. Probes and /metrics get no span.
// Once echo has routed the request, the span is named after what it does
// (claim, outcome, resolve, approval; METHOD route for the rest) and the
// handlers add the row's attributes (internal/tracing).
//
// Without a TracerProvider none of it runs: Handler is the echo alone, and
// each annotation is one SpanFromContext that finds no span.
//
// otelhttp rather than the contrib otelecho middleware: otelecho v0.60.0,
// its newest release, still builds with echo v4.16.5 and otel v1.47, but
// it records the semantic conventions of v1.20 (http.method,
// http.status_code) where otelhttp v0.72 records v1.43's
// (http.request.method, http.response.status_code), so the service's
// server spans and its outbound client spans would disagree; it puts a
// handler's err.Error() on the span (echo.error), internal text this API
// never sends anywhere; and it has no public-endpoint option, so any
// webhook sender could parent its span in any trace.

// spanNames are the §12 operation names of the API's routes; other routes
// are named "METHOD route".
var spanNames = map[string]string{
	"POST /v1/claims":                    "claim",
	"POST /v1/claims/:key/start":         "claim",
	"POST /v1/claims/:key/compensations": "claim",
	"POST /v1/claims/:key/outcome":       "outcome",
	"POST /v1/claims/:key/resolve":       "resolve",
	"POST /v1/approvals/:id/approve":     "approval",
	"POST /v1/approvals/:id/deny":        "approval",
}

// Span attributes of the API beyond internal/tracing's.
const (
	keyErrorCode   = attribute.Key("reconciler.error.code")
	keyOutcomeKind = attribute.Key("reconciler.outcome.kind")
	keyStopCode    = attribute.Key("reconciler.code")
)

// instrument wraps the handler (dispatch) in otelhttp's (see above).
func (s *Server) instrument(tp trace.TracerProvider) {
	s.handler = otelhttp.NewHandler(s.handler, "reconciler",
		otelhttp.WithTracerProvider(tp),
		// OpenTelemetry metrics would repeat the Prometheus ones, which are
		// the contract (§6a); a global meter provider set later must not
		// start them.
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithPublicEndpointFn(func(r *http.Request) bool { return !strings.HasPrefix(r.URL.Path, "/v1/") }),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				return false
			}
			return true
		}),
	)
}

// nameSpan names the request's span once echo has routed it, and records
// its route (echo's, not the URL: bounded and free of keys).
func (s *Server) nameSpan(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		s.nameSpanOf(c)
		return next(c)
	}
}

// nameSpanOf is nameSpan's work (dispatch calls it directly).
func (s *Server) nameSpanOf(c echo.Context) {
	span := trace.SpanFromContext(requestContext(c))
	if !span.IsRecording() {
		return
	}
	route := routeOf(c)
	name := c.Request().Method + " " + route
	if n, ok := spanNames[name]; ok {
		name = n
	}
	span.SetName(name)
	span.SetAttributes(semconv.HTTPRoute(route))
}

// traceparentOf is the W3C traceparent of the request's span, which a
// claim stores on the row it inserts; "" when the API does not trace.
func traceparentOf(ctx context.Context) string {
	return tracing.Traceparent(trace.SpanContextFromContext(ctx))
}

// traceClaim puts a claim's answer on its span: the row's attributes
// (the row a frozen tool would have had, when none was inserted), the
// decision and its code, and a link to the row's own claim when this is
// a later one.
func traceClaim(ctx context.Context, row ledger.Row, res ledger.ClaimResult) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if res.Row.Key != "" {
		row = res.Row
	}
	decision := tracing.KeyDecision.String(string(res.Decision))
	if res.Code == "" {
		tracing.Annotate(span, row, decision)
		return
	}
	tracing.Annotate(span, row, decision, keyStopCode.String(res.Code))
}

// traceRow puts a row the request changed on its span, with attrs.
func traceRow(ctx context.Context, row ledger.Row, attrs ...attribute.KeyValue) {
	tracing.Annotate(trace.SpanFromContext(ctx), row, attrs...)
}

// traceError records the error code a request answered with (never its
// message, which may quote the caller's input).
func traceError(ctx context.Context, code string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(keyErrorCode.String(code))
	}
}
