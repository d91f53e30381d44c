package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/internal/httpbody"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/matcher"
)

// Ingester is the part of a ledger store the handlers need: Ingest commits
// the inbox record, the transition and the outbox record in one
// transaction, durably, before it returns.
type Ingester interface {
	Ingest(ctx context.Context, d ledger.Delivery) (ledger.IngestResult, error)
}

// Limits and defaults.
const (
	// DefaultBodyLimit caps a delivery's body (1 MiB).
	DefaultBodyLimit int64 = 1 << 20
	// DefaultIngestTimeout bounds the store call of one delivery; past it
	// the vendor gets a 503 and retries. Vendors wait 10-30 s at most.
	DefaultIngestTimeout = 10 * time.Second
)

// Options configure the webhook handlers. Store is required, and every
// endpoint needs a name, a tenant and at least one secret (PayPal: a
// webhook id).
type Options struct {
	Store    Ingester
	Stripe   []StripeEndpoint
	PayPal   []PayPalEndpoint
	Standard []StandardEndpoint
	// Presets are the endpoints of the webhooks: list, each from a preset
	// of presets/ or from its own knobs (PresetEndpoint).
	Presets []PresetEndpoint
	// PayPalOptions tune the PayPal verifiers (HTTP client, clock, tolerance).
	// A nil PayPalOptions.Now takes Now.
	PayPalOptions PayPalOptions
	// Types maps event types to actions: matcher.NewTable(the config's
	// event_types), which keeps the defaults (nil: matcher.DefaultTable()).
	Types matcher.Table
	// BodyLimit caps a body in bytes (default DefaultBodyLimit).
	BodyLimit int64
	// IngestTimeout bounds each store call (default DefaultIngestTimeout).
	IngestTimeout time.Duration
	// Registerer receives the metrics (nil: a private registry). Collectors
	// already registered under the same names (by the API) are reused.
	Registerer prometheus.Registerer
	// Logger receives one record per delivery (nil: discarded). Secrets,
	// signatures and bodies are never logged.
	Logger *slog.Logger
	// Now is the clock for timestamp checks and stored times (nil: time.Now).
	Now func() time.Time
	// Applied is told the tenant and key of every row a delivery changed
	// (api.Server.Signal: claims long-polling on the row decide again at
	// once). Nil: nobody is told.
	Applied func(tenant, key string)
	// Refetch names the vendors the resolver can ask for a row's state (a
	// vendor profile with a lookup). For them a delivery whose body the
	// signature does not cover (Mailgun) is a hint: it is recorded and
	// joined, applies no outcome, and makes its row due now
	// (ledger.Delivery.Recheck). Other vendors' unsigned bodies apply as
	// signed ones (weaker: docs/architecture.md §7a).
	Refetch map[string]bool
	// Recheck is called after a hint made an open row due (the resolver's
	// Wake), so the vendor is asked before the next pass. Nil: the next
	// pass finds it.
	Recheck func()
}

// Handler serves the webhook routes of every configured endpoint.
type Handler struct {
	store         Ingester
	types         matcher.Table
	limit         int64
	ingestTimeout time.Duration
	metrics       *metrics
	log           *slog.Logger
	now           func() time.Time
	applied       func(tenant, key string)
	refetch       map[string]bool
	recheck       func()
	// routes holds the endpoints of each route family (stripe, paypal,
	// standard, each preset's name, custom) by name.
	routes  map[string]map[string]*endpoint
	closers []func()
}

// endpoint is one configured endpoint, whatever its scheme.
type endpoint struct {
	name, tenant string
	// vendor is the ledger vendor and the metrics label.
	vendor string
	// accept verifies a delivery and decodes it. Its errors wrap
	// ErrBadSignature, ErrStale, ErrUnparsable or ErrUpstream.
	accept func(ctx context.Context, h http.Header, body []byte, now time.Time) (Event, error)
	// acceptMany, when set, is used instead of accept: a preset endpoint
	// reads the method and the query too, and a batch holds several
	// events. Its errors wrap the same sentinels.
	acceptMany func(ctx context.Context, req *http.Request, body []byte, now time.Time) ([]verified, error)
	// ack is the answer to an accepted delivery (zero: {"result": …}).
	ack AckSpec
	// bodyUnsigned: the signature does not cover the event (Mailgun); the
	// log says so of every event, and where the vendor has a profile to
	// ask (Options.Refetch) each event is a hint (docs/architecture.md §7a).
	bodyUnsigned bool
	// log is the handler's logger with the endpoint's vendor, name and
	// tenant, built once in New: a logger's With formats its attributes,
	// which per delivery cost more than the record itself.
	log *slog.Logger
}

// Route families, the second element of the path.
const (
	familyStripe   = "stripe"
	familyPayPal   = "paypal"
	familyStandard = "standard"
)

// New validates the options and builds the handlers.
func New(o Options) (*Handler, error) {
	if o.Store == nil {
		return nil, errors.New("webhooks: options: store is required")
	}
	if o.BodyLimit < 0 || o.IngestTimeout < 0 {
		return nil, errors.New("webhooks: options: negative limit")
	}
	h := &Handler{
		store: o.Store, types: o.Types, limit: o.BodyLimit, ingestTimeout: o.IngestTimeout,
		log: o.Logger, now: o.Now, applied: o.Applied, refetch: o.Refetch, recheck: o.Recheck,
		routes: map[string]map[string]*endpoint{familyStripe: {}, familyPayPal: {}, familyStandard: {}, FamilyCustom: {}},
	}
	if h.types == nil {
		h.types = matcher.DefaultTable()
	}
	if err := h.addPresets(o.Presets); err != nil {
		return nil, err
	}
	if h.limit == 0 {
		h.limit = DefaultBodyLimit
	}
	if h.ingestTimeout == 0 {
		h.ingestTimeout = DefaultIngestTimeout
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	reg := o.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var err error
	if h.metrics, err = newMetrics(reg); err != nil {
		return nil, fmt.Errorf("webhooks: metrics: %w", err)
	}
	for _, ep := range o.Stripe {
		if err := h.add(familyStripe, stripeEndpoint(ep)); err != nil {
			return nil, err
		}
	}
	for _, ep := range o.Standard {
		e, err := standardEndpoint(ep)
		if err != nil {
			return nil, err
		}
		if err := h.add(familyStandard, e); err != nil {
			return nil, err
		}
	}
	ppOpts := o.PayPalOptions
	if ppOpts.Now == nil {
		ppOpts.Now = h.now
	}
	for _, ep := range o.PayPal {
		e, closer, err := paypalEndpoint(ep, ppOpts)
		if err != nil {
			h.Close()
			return nil, err
		}
		h.closers = append(h.closers, closer)
		if err := h.add(familyPayPal, e); err != nil {
			h.Close()
			return nil, err
		}
	}
	for _, eps := range h.routes {
		for _, e := range eps {
			e.log = h.log.With(slog.String("vendor", e.vendor), slog.String("endpoint", e.name), slog.String("tenant", e.tenant))
		}
	}
	return h, nil
}

// Close releases what the verifiers hold (idle connections of PayPal's
// certificate client). The handlers stay usable.
func (h *Handler) Close() {
	for _, c := range h.closers {
		c()
	}
}

func (h *Handler) add(family string, e *endpoint) error {
	where := fmt.Sprintf("webhooks: %s endpoint %q", family, e.name)
	if e.name == "" || !validName(e.name) {
		return fmt.Errorf("%s: name must be 1-64 of [A-Za-z0-9_.-]", where)
	}
	if _, dup := h.routes[family][e.name]; dup {
		return fmt.Errorf("%s: configured twice", where)
	}
	if err := ledger.ValidateTenant(e.tenant); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := ledger.ValidateVendor(e.vendor); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if e.accept == nil && e.acceptMany == nil {
		return fmt.Errorf("%s: no secret", where)
	}
	h.routes[family][e.name] = e
	return nil
}

func validName(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func stripeEndpoint(ep StripeEndpoint) *endpoint {
	e := &endpoint{name: ep.Name, tenant: ep.Tenant, vendor: "stripe"}
	secrets := make([]string, 0, len(ep.Secrets))
	for _, s := range ep.Secrets {
		if s != "" {
			secrets = append(secrets, s)
		}
	}
	if len(secrets) == 0 {
		return e // add refuses it: no accept
	}
	e.accept = func(_ context.Context, h http.Header, body []byte, now time.Time) (Event, error) {
		if err := VerifyStripe(h.Get("Stripe-Signature"), body, secrets, ep.Tolerance, now); err != nil {
			return Event{}, err
		}
		return DecodeStripe(body, ep.MetadataKey)
	}
	return e
}

func standardEndpoint(ep StandardEndpoint) (*endpoint, error) {
	vendor := ep.Vendor
	if vendor == "" {
		vendor = ep.Name
	}
	e := &endpoint{name: ep.Name, tenant: ep.Tenant, vendor: vendor}
	var keys [][]byte
	for i, s := range ep.Secrets {
		key, err := ParseStandardSecret(s)
		if err != nil {
			// The secret itself is never quoted.
			return nil, fmt.Errorf("webhooks: standard endpoint %q: secret %d: %w", ep.Name, i+1, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return e, nil // add refuses it: no accept
	}
	e.accept = func(_ context.Context, h http.Header, body []byte, now time.Time) (Event, error) {
		sh, err := VerifyStandard(h, body, keys, ep.Tolerance, now)
		if err != nil {
			return Event{}, err
		}
		return DecodeStandard(body, sh.ID, vendor, ep.LocalIDPath)
	}
	return e, nil
}

// Register adds POST /webhooks/{stripe,paypal,standard}[/:endpoint] to e.
// The bare path serves a family's only endpoint and answers 404 when it
// has none or several, so a delivery never lands on a guessed tenant.
//
// The handlers write every answer themselves, including errors, so the
// webhook error shape does not depend on e's HTTPErrorHandler.
func (h *Handler) Register(e *echo.Echo) {
	for _, family := range []string{familyStripe, familyPayPal, familyStandard} {
		serve := h.serve(family)
		e.POST("/webhooks/"+family, serve)
		e.POST("/webhooks/"+family+"/:endpoint", serve)
	}
	// Preset endpoints are served by name only: POST /webhooks/<preset>/<name>
	// (custom for an endpoint with no preset). echo matches the static
	// families above first.
	e.POST("/webhooks/:preset/:endpoint", h.servePreset())
}

// servePreset serves the preset families, the family read from the path.
func (h *Handler) servePreset() echo.HandlerFunc {
	byFamily := map[string]echo.HandlerFunc{}
	for family := range h.routes {
		switch family {
		case familyStripe, familyPayPal, familyStandard:
			continue // served by their own routes only
		}
		byFamily[family] = h.serve(family)
	}
	return func(c echo.Context) error {
		if serve, ok := byFamily[c.Param("preset")]; ok {
			return serve(c)
		}
		nameDelivery(c.Request().Context())
		h.count(c.Request().Context(), "unknown", resultNotFound)
		return writeError(c, http.StatusNotFound, apierror.CodeNotFound, "no such webhook endpoint")
	}
}

func (h *Handler) lookup(family, name string) *endpoint {
	eps := h.routes[family]
	if name != "" {
		return eps[name]
	}
	if len(eps) != 1 {
		return nil
	}
	for _, e := range eps {
		return e
	}
	return nil
}

// admitted is a delivery that passed every check before the store: its
// endpoint, its verified events (one, or a batch's), the ledger deliveries
// built from them.
type admitted struct {
	ep  *endpoint
	evs []Event
	ds  []ledger.Delivery
	log *slog.Logger
}

// admit runs a delivery through the endpoint lookup, the capped body read,
// the endpoint's verification and decoding, and matcher.Match. On a
// rejection it writes the answer (and counts it) itself and returns false
// with the handler's error, which the route returns as is.
func (h *Handler) admit(c echo.Context, family string) (admitted, bool, error) {
	req := c.Request()
	ctx := req.Context()
	ep := h.lookup(family, c.Param("endpoint"))
	if ep == nil {
		h.count(ctx, family, resultNotFound)
		return admitted{}, false, writeError(c, http.StatusNotFound, apierror.CodeNotFound, "no such webhook endpoint")
	}
	log := ep.log

	body, err := h.readBody(c)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.count(ctx, ep.vendor, resultTooLarge)
			log.WarnContext(ctx, "webhook rejected", "result", resultTooLarge, "limit", h.limit)
			return admitted{}, false, writeError(c, http.StatusRequestEntityTooLarge, apierror.CodeBodyTooLarge, fmt.Sprintf("body exceeds %d bytes", h.limit))
		}
		h.count(ctx, ep.vendor, resultUnparsable)
		return admitted{}, false, writeError(c, http.StatusBadRequest, "unparsable", "body could not be read")
	}

	now := h.now()
	var vfs []verified
	if ep.acceptMany != nil {
		vfs, err = ep.acceptMany(ctx, req, body, now)
	} else {
		var ev Event
		ev, err = ep.accept(ctx, req.Header, body, now)
		vfs = []verified{{ev: ev}}
	}
	var ch *challengeReply
	if errors.As(err, &ch) {
		h.count(ctx, ep.vendor, resultChallenge)
		return admitted{}, false, c.String(http.StatusOK, ch.value)
	}
	if err != nil {
		return admitted{}, false, h.reject(c, log, ep, err)
	}
	a := admitted{ep: ep, log: log}
	for _, vf := range vfs {
		vf.ev.Vendor, vf.ev.Received = ep.vendor, now.UTC()
		a.evs = append(a.evs, vf.ev)
		d := match(ep.tenant, vf, h.types)
		d.ReplayToken = vf.token
		if ep.bodyUnsigned && h.refetch[ep.vendor] {
			d = hint(d)
		}
		a.ds = append(a.ds, d)
	}
	traceVerified(ctx, ep, a.evs[0])
	if len(a.ds) > 1 {
		// A batch is refused whole, before anything is stored, when one of
		// its events is one the ledger would refuse.
		for i, d := range a.ds {
			if err := d.Validate(); err != nil {
				return admitted{}, false, h.storeFailed(c, log, ep, a.evs[i], fmt.Errorf("element %d: %w", i, err))
			}
		}
	}
	return a, true, nil
}

func (h *Handler) serve(family string) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		nameDelivery(ctx)
		a, ok, err := h.admit(c, family)
		if !ok {
			return err
		}
		ep, log := a.ep, a.log
		// A batch's events are stored one by one, each durably; when one
		// fails the vendor retries the batch, and the events already stored
		// answer as duplicates.
		results := make([]string, len(a.ds))
		for i, d := range a.ds {
			res, err := h.ingest(ctx, log, ep, a.evs[i], d)
			if err != nil {
				return h.storeFailed(c, log, ep, a.evs[i], err)
			}
			results[i] = publicResult(res.Outcome)
		}
		if ep.ack.Body != "" {
			ct := ep.ack.ContentType
			if ct == "" {
				ct = echo.MIMETextPlainCharsetUTF8
			}
			return c.Blob(http.StatusOK, ct, []byte(ep.ack.Body))
		}
		if len(results) == 1 {
			if b, ok := ackJSON(c, results[0]); ok {
				return c.JSONBlob(http.StatusOK, b)
			}
		}
		ack := ackBody{Result: results[0]}
		if len(results) > 1 {
			ack.Result, ack.Results = batchResult(results), results
		}
		return c.JSON(http.StatusOK, ack)
	}
}

// batchResult sums up a batch: accepted when any event was, else the
// first event's result.
func batchResult(results []string) string {
	if slices.Contains(results, string(ledger.IngestAccepted)) {
		return string(ledger.IngestAccepted)
	}
	return results[0]
}

// ingest stores one event, counts and logs it.
func (h *Handler) ingest(ctx context.Context, log *slog.Logger, ep *endpoint, ev Event, d ledger.Delivery) (ledger.IngestResult, error) {
	{
		ictx, cancel := context.WithTimeout(ctx, h.ingestTimeout)
		d.Verified = verifiedBy(ep)
		res, err := h.store.Ingest(ictx, d)
		cancel()
		if err != nil {
			return res, err
		}
		h.metrics.ingested(ep.vendor, res)
		traceResult(ctx, string(res.Outcome), res.Row)
		if res.Row != nil && h.applied != nil {
			h.applied(res.Row.Tenant, res.Row.Key)
		}
		if d.Recheck && res.Row != nil && res.Row.Status.Open() && h.recheck != nil {
			h.recheck()
		}
		// LogAttrs, on an array: no Attr is boxed into an any.
		var buf [8]slog.Attr
		attrs := append(buf[:0], slog.String("vendor_event_id", ev.ID), slog.String("type", ev.Type), slog.String("result", string(res.Outcome)))
		if ep.bodyUnsigned {
			attrs = append(attrs, slog.Bool("body_signed", false), slog.Bool("hint", d.Recheck))
		}
		if res.Row != nil {
			attrs = append(attrs, slog.String("key", res.Row.Key), slog.String("status", string(res.Row.Status)))
		}
		switch {
		case len(res.Change.Alerts) > 0:
			attrs = append(attrs, slog.Any("alerts", res.Change.Alerts))
			log.LogAttrs(ctx, slog.LevelWarn, "webhook ingested with alerts", attrs...)
		default:
			log.LogAttrs(ctx, slog.LevelInfo, "webhook ingested", attrs...)
		}
		return res, nil
	}
}

// hint turns the delivery of an event whose body is not authenticated
// into a recheck: the event id is recorded and the row joined, but no
// status and no receipt id from the body reach the row (a forged body
// could name another message); the resolver asks the vendor instead. An
// ignored type stays ignored.
func hint(d ledger.Delivery) ledger.Delivery {
	if d.Ignore {
		return d
	}
	d.Evidence = ledger.Evidence{Source: ledger.SourceWebhook, VendorEventID: d.EventID, At: d.At}
	d.Recheck = true
	return d
}

// publicResult is what the sender is told. An event naming another
// tenant's row reads as an orphan, so a sender cannot learn that a local
// id exists elsewhere; the log, the metric and the alert say what it was.
func publicResult(o ledger.IngestOutcome) string {
	if o == ledger.IngestForeignTenant {
		return string(ledger.IngestOrphan)
	}
	return string(o)
}

type ackBody struct {
	Result string `json:"result"`
	// Results are a batch's, one per event in order.
	Results []string `json:"results,omitempty"`
}

// ackJSON is the bytes c.JSON writes for ackBody{Result: result} (the
// encoder's trailing newline included), built without reflection, when
// they are certain to be those: echo's default serializer, no pretty
// printing (echo's Debug or a ?pretty query), and a result of characters
// JSON writes as they are. Otherwise false, and the caller uses c.JSON.
func ackJSON(c echo.Context, result string) ([]byte, bool) {
	e := c.Echo()
	switch e.JSONSerializer.(type) {
	case *echo.DefaultJSONSerializer, echo.DefaultJSONSerializer:
	default:
		return nil, false
	}
	if e.Debug || c.Request().URL.RawQuery != "" {
		return nil, false
	}
	for i := range len(result) {
		if b := result[i]; !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '_' || b == '-' || b == '.') {
			return nil, false
		}
	}
	const head, tail = `{"result":"`, "\"}\n"
	b := make([]byte, 0, len(head)+len(result)+len(tail))
	return append(append(append(b, head...), result...), tail...), true
}

// readBody reads the raw body once, under the cap: the signatures cover
// these exact bytes, so nothing may decode it first.
func (h *Handler) readBody(c echo.Context) ([]byte, error) {
	req := c.Request()
	if req.ContentLength > h.limit {
		return nil, &http.MaxBytesError{Limit: h.limit}
	}
	// MaxBytesReader fails past the cap; ReadUpTo's own bound (one byte
	// more) is never what stops it.
	return httpbody.ReadUpTo(http.MaxBytesReader(c.Response().Writer, req.Body, h.limit), h.limit+1, req.ContentLength)
}

// reject answers a delivery that failed verification or decoding. Nothing
// has been stored.
func (h *Handler) reject(c echo.Context, log *slog.Logger, ep *endpoint, err error) error {
	ctx := c.Request().Context()
	var status int
	var result, msg string
	switch {
	case errors.Is(err, ErrBadSignature):
		status, result, msg = http.StatusBadRequest, resultBadSignature, "signature does not match"
	case errors.Is(err, ErrStale):
		status, result, msg = http.StatusBadRequest, resultStale, "timestamp outside tolerance"
	case errors.Is(err, ErrUnparsable):
		status, result, msg = http.StatusBadRequest, resultUnparsable, "body or signature header cannot be parsed"
	case errors.Is(err, ErrUpstream):
		// PayPal's certificate could not be fetched: not the sender's fault,
		// so a 5xx makes PayPal retry later.
		status, result, msg = http.StatusServiceUnavailable, resultUnavailable, "verification unavailable, retry later"
		c.Response().Header().Set("Retry-After", "5")
	default:
		status, result, msg = http.StatusInternalServerError, resultError, "internal error"
	}
	h.count(ctx, ep.vendor, result)
	// The error texts of the verifiers name what failed, never a secret,
	// a signature or the body.
	log.WarnContext(ctx, "webhook rejected", "result", result, "err", err)
	return writeError(c, status, result, msg)
}

// storeFailed answers a verified delivery that the store did not take.
func (h *Handler) storeFailed(c echo.Context, log *slog.Logger, ep *endpoint, ev Event, err error) error {
	ctx := c.Request().Context()
	attrs := []any{slog.String("vendor_event_id", ev.ID), slog.String("type", ev.Type)}
	switch {
	case errors.Is(err, ledger.ErrReplayedToken):
		// Another replica (or this one, past its cache) recorded the token
		// with another event: a signature replayed onto a forged body.
		h.count(ctx, ep.vendor, resultBadSignature)
		log.WarnContext(ctx, "webhook rejected", append(attrs, "result", resultBadSignature, "err", err)...)
		return writeError(c, http.StatusBadRequest, resultBadSignature, "signature token already used")
	case errors.Is(err, ledger.ErrInvalid):
		h.count(ctx, ep.vendor, resultInvalid)
		log.WarnContext(ctx, "webhook refused by the ledger", append(attrs, "err", err)...)
		return writeError(c, http.StatusBadRequest, "invalid_delivery", invalidMessage(err))
	case errors.Is(err, ledger.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		h.count(ctx, ep.vendor, resultUnavailable)
		log.ErrorContext(ctx, "webhook not stored: store unavailable", append(attrs, "err", err)...)
		c.Response().Header().Set("Retry-After", "1")
		return writeError(c, http.StatusServiceUnavailable, apierror.CodeUnavailable, "store unavailable, retry later")
	case errors.Is(err, context.Canceled):
		// The sender hung up; it will retry, and nobody reads this answer.
		h.count(ctx, ep.vendor, resultUnavailable)
		return writeError(c, http.StatusServiceUnavailable, apierror.CodeUnavailable, "request canceled")
	}
	h.count(ctx, ep.vendor, resultError)
	log.ErrorContext(ctx, "webhook not stored", append(attrs, "err", err)...)
	return writeError(c, http.StatusInternalServerError, apierror.CodeInternal, "internal error")
}

// writeError answers with the error body the API answers with.
func writeError(c echo.Context, status int, code, msg string) error {
	return c.JSON(status, apierror.New(code, msg))
}

// invalidMessage is the text of the ledger's InvalidError in err, built from
// constant text and the sender's own input; what a store wrapped around it
// is not sent.
func invalidMessage(err error) string {
	var ie *ledger.InvalidError
	if !errors.As(err, &ie) {
		return ledger.ErrInvalid.Error()
	}
	return ie.Error()
}
