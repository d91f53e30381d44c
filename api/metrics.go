package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/internal/promreg"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentledger/reconciler/ledger"
)

// metrics are the API's Prometheus collectors; names and labels are the
// contract of docs/architecture.md §6a.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	claims      *prometheus.CounterVec
	transitions *prometheus.CounterVec
	alerts      *prometheus.CounterVec
	waiting     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	var err error
	if m.requests, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reconciler_http_requests_total", Help: "HTTP requests by echo route path and status code.",
	}, []string{"route", "code"})); err != nil {
		return nil, err
	}
	if m.duration, err = promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "reconciler_http_request_duration_seconds", Help: "HTTP request latency by echo route path and status code (long-polls included).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route", "code"})); err != nil {
		return nil, err
	}
	if m.claims, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reconciler_claims_total", Help: "Claim and compensation decisions by tenant and decision.",
	}, []string{"tenant", "decision"})); err != nil {
		return nil, err
	}
	if m.transitions, err = promreg.Register(reg, promreg.NewTransitions()); err != nil {
		return nil, err
	}
	if m.alerts, err = promreg.Register(reg, promreg.NewAlerts()); err != nil {
		return nil, err
	}
	if m.waiting, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "reconciler_claim_waiters", Help: "Claims long-polling (?wait=) an in-flight row right now.",
	})); err != nil {
		return nil, err
	}
	return m, nil
}

// change counts what a store call did to a row: its transition (by the
// source on its event, else the caller's) and its alerts.
func (m *metrics) change(ch ledger.Change, src ledger.Source) {
	if ch.Changed {
		if ch.Event != nil && ch.Event.Source != "" {
			src = ch.Event.Source
		}
		m.transitions.WithLabelValues(string(ch.From), string(ch.To), string(src)).Inc()
	}
	for _, k := range ch.Alerts {
		m.alerts.WithLabelValues(string(k)).Inc()
	}
}

func (s *Server) metricsHandler() echo.HandlerFunc {
	h := promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return echo.WrapHandler(h)
}

// routeOf is the echo route path of the request ("/v1/claims/:key"), never
// the raw URL, so the label's values are bounded by the registered routes.
func routeOf(c echo.Context) string {
	if p := c.Path(); p != "" {
		return p
	}
	return "unmatched"
}

// observe is the outermost middleware: it turns panics into errors, runs the
// error handler itself so the status it writes is the one counted, and
// records the request's metrics and one log line. The latency is measured
// on the process's monotonic clock, not the injected domain clock: it is
// about this process, not about the rows.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return s.observed(c, next) }
}

// observed is observe's work around next (dispatch calls it directly).
// The request's log line is at debug: its attributes are built only when
// the logger takes them.
func (s *Server) observed(c echo.Context, next echo.HandlerFunc) error {
	start := time.Now()
	if err := s.recoverCall(next, c); err != nil {
		c.Error(err)
	}
	elapsed := time.Since(start)
	status := c.Response().Status
	route, code := routeOf(c), statusCode(status)
	s.metrics.requests.WithLabelValues(route, code).Inc()
	s.metrics.duration.WithLabelValues(route, code).Observe(elapsed.Seconds())
	ctx := requestContext(c)
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	attrs := [5]slog.Attr{
		slog.String("method", c.Request().Method), slog.String("route", route),
		slog.Int("status", status), slog.Duration("duration", elapsed),
	}
	n := 4
	if p := principalOf(c); p.tenant != "" {
		attrs[n], n = slog.String("tenant", p.tenant), n+1
	} else if p.role == roleAdmin {
		attrs[n], n = slog.Bool("admin", true), n+1
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "http request", attrs[:n]...)
	return nil
}

// statusCodes are the metrics' code labels of the statuses a request can
// end with, made once: strconv.Itoa allocates for numbers of three digits.
var statusCodes = func() (codes [600]string) {
	for i := range codes {
		codes[i] = strconv.Itoa(i)
	}
	return codes
}()

// statusCode is status as a metrics label.
func statusCode(status int) string {
	if status >= 0 && status < len(statusCodes) {
		return statusCodes[status]
	}
	return strconv.Itoa(status)
}

func (s *Server) recoverCall(next echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler { // net/http aborts a response this way; let it
				panic(r)
			}
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return next(c)
}
