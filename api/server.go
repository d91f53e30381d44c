package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/ledger"
)

// Store is the part of a ledger.Store the API uses: the runtime-facing claims,
// the approval gate's decisions and reads, Apply for resolutions by hand and
// RedriveOrphans for the admin redrive.
type Store interface {
	ledger.Claims
	ledger.Approvals
	// Apply applies evidence to one row (here: a human's resolution).
	Apply(ctx context.Context, tenant, key string, ev ledger.Evidence) (ledger.Row, ledger.Change, error)
	// RedriveOrphans applies parked deliveries whose row exists now.
	RedriveOrphans(ctx context.Context) (ledger.RedriveResult, error)
}

// ReadyCheck is one readiness dependency (the store, NATS). Check must honour
// its context: /readyz gives each check ReadyTimeout. It returns nil when
// ready, a *Degraded when working but behind, any other error when not.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// Limits and defaults.
const (
	// DefaultBodyLimit caps a request body (1 MiB).
	DefaultBodyLimit int64 = 1 << 20
	// MaxWait is the longest a claim may long-poll with ?wait=.
	MaxWait = 30 * time.Second
	// DefaultPollInterval is how often a long-polling claim re-reads its row
	// to see changes made outside this process (webhooks on another replica,
	// the resolver); changes made through this Server wake it at once.
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultReadyTimeout bounds each readiness check.
	DefaultReadyTimeout = 2 * time.Second
	// DefaultBodyTimeout is how long a request's body may take to arrive
	// after its headers: DefaultBodyLimit at 35 KB/s, a poor mobile link.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultAnswerTimeout is how long the answer may take to be decided
	// and written, counted from the end of the body's time.
	DefaultAnswerTimeout = 30 * time.Second
)

// Options configure a Server. Store and at least one token are required.
type Options struct {
	Store Store
	// Tokens maps a bearer token to its tenant.
	Tokens map[string]string
	// AdminTokens may resolve rows by hand and read any tenant's rows.
	AdminTokens []string
	// ApproverTokens maps a bearer token to the tenant whose approval
	// requests it may read and decide (config tenants[].approver_tokens);
	// admin tokens may decide any tenant's.
	ApproverTokens map[string]string
	// ApprovalTTL is how long an approval request waits for a human
	// (config approvals.ttl; 0: ledger.DefaultApprovalTTL).
	ApprovalTTL time.Duration
	// BodyLimit caps a request body in bytes (default DefaultBodyLimit).
	BodyLimit int64
	// Policy is the store's policy (pending TTL, grace).
	Policy ledger.Policy
	// ReplayWindow says how long a vendor remembers an idempotency key
	// sent with req (nil when the claim stores no request); nil: 0, no replays.
	ReplayWindow func(vendor string, req *ledger.Request) time.Duration
	// VendorKey derives the key sent to vendor from a row's key (the
	// vendor profile's rule, vendors.Profile.VendorKey); it is stored on
	// the row as vendor_key. Nil: the key itself.
	VendorKey func(vendor, key string) string
	// Frozen is the kill switch: true when the tool or its class is frozen
	// for the tenant (nil: never frozen, or KillSwitch's Frozen).
	Frozen func(tenant, tool string, class ledger.ToolClass) bool
	// KillSwitch serves the admin freeze routes (freeze.go) and, when set,
	// is what claims ask instead of Frozen (set one or the other). Nil: the
	// routes answer 501.
	KillSwitch KillSwitch
	// Registry is the tool registry (tools.go): the /v1/tools routes and
	// the claims' tool_mismatch. Nil: the routes answer 501 and every tool
	// is served as unregistered.
	Registry Registry
	// StrictRegistry refuses claims of unregistered tools (422
	// unregistered_tool; config registry.strict).
	StrictRegistry bool
	// WakeRelay asks this process's outbox relay to publish now
	// (events.Relay.Wake); POST /v1/admin/redrive calls it. Nil: no relay
	// runs here, and the redrive says so.
	WakeRelay func()
	// Ready are the checks behind /readyz.
	Ready []ReadyCheck
	// Registerer receives the API's metrics and Gatherer serves /metrics.
	// Both nil: a private registry. Registerer alone must also be a Gatherer.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// TracerProvider receives the API's spans, one per request (tracing.go);
	// nil: no spans, and Handler is the echo alone.
	TracerProvider trace.TracerProvider
	// Backup serves GET /v1/admin/backup (backup.go); nil answers 501
	// (PostgreSQL: pg_dump).
	Backup Backuper
	// Logger receives request and decision logs (nil: discarded).
	Logger *slog.Logger
	// Now is the clock behind every stored time (nil: time.Now).
	Now func() time.Time
	// PollInterval is how often a long-polling claim re-reads its row
	// (default DefaultPollInterval).
	PollInterval time.Duration
	// ReadyTimeout bounds each readiness check (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// BodyTimeout and AnswerTimeout are each request's deadlines
	// (deadline.go; defaults DefaultBodyTimeout, DefaultAnswerTimeout).
	BodyTimeout, AnswerTimeout time.Duration
}

// Server is the HTTP API. Build it with New; serve Handler().
type Server struct {
	store        Store
	auth         *authenticator
	bodyLimit    int64
	policy       ledger.Policy
	replayWindow func(vendor string, req *ledger.Request) time.Duration
	vendorKey    func(vendor, key string) string
	frozen       func(tenant, tool string, class ledger.ToolClass) bool
	kill         KillSwitch
	registry     Registry
	strict       bool
	approvalTTL  time.Duration
	wakeRelay    func()
	backuper     Backuper
	tenants      map[string]bool // tenants with a token (freeze.go)
	ready        []ReadyCheck
	readyTimeout time.Duration
	poll         time.Duration
	bodyTimeout  time.Duration
	answer       time.Duration
	gatherer     prometheus.Gatherer
	metrics      *metrics
	log          *slog.Logger
	now          func() time.Time
	watch        *watchers
	inFlight     inFlight // Idempotency-Key values being answered (idempotency.go)
	// stopWaits closes when the server shuts down (EndWaits): long polls
	// answer at once instead of holding the shutdown for up to MaxWait.
	stopWaits chan struct{}
	stopOnce  sync.Once
	e         *echo.Echo
	// handler serves e (dispatch), inside otelhttp's span when the API
	// traces.
	handler http.Handler
	tracing bool
	// routed is the server's middleware below observe and the route's
	// handler, built once (dispatch.go).
	routed echo.HandlerFunc
}

//go:embed openapi.yaml
var openAPISpec []byte

// OpenAPI returns the embedded OpenAPI document (also served at GET /openapi.yaml).
func OpenAPI() []byte { return append([]byte(nil), openAPISpec...) }

// New validates the options and builds the server with every route registered.
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("api: options: store is required")
	}
	auth, err := newAuthenticator(o.Tokens, o.AdminTokens, o.ApproverTokens)
	if err != nil {
		return nil, fmt.Errorf("api: options: %w", err)
	}
	if o.BodyLimit < 0 {
		return nil, errors.New("api: options: negative body limit")
	}
	for i, rc := range o.Ready {
		if rc.Name == "" || rc.Check == nil {
			return nil, fmt.Errorf("api: options: ready check %d needs a name and a func", i)
		}
	}
	s := &Server{
		store: o.Store, auth: auth, bodyLimit: o.BodyLimit, policy: o.Policy,
		replayWindow: o.ReplayWindow, vendorKey: o.VendorKey, frozen: o.Frozen, ready: o.Ready,
		readyTimeout: o.ReadyTimeout, poll: o.PollInterval, log: o.Logger, now: o.Now,
		bodyTimeout: o.BodyTimeout, answer: o.AnswerTimeout,
		wakeRelay: o.WakeRelay, registry: o.Registry, strict: o.StrictRegistry, approvalTTL: o.ApprovalTTL,
		backuper:  o.Backup,
		watch:     newWatchers(),
		stopWaits: make(chan struct{}),
		tracing:   o.TracerProvider != nil,
	}
	if o.ApprovalTTL < 0 {
		return nil, errors.New("api: options: negative approval ttl")
	}
	if o.StrictRegistry && o.Registry == nil {
		return nil, errors.New("api: options: a strict registry needs a Registry")
	}
	if err := s.useKillSwitch(o); err != nil {
		return nil, fmt.Errorf("api: options: %w", err)
	}
	if s.bodyLimit == 0 {
		s.bodyLimit = DefaultBodyLimit
	}
	if s.replayWindow == nil {
		s.replayWindow = func(string, *ledger.Request) time.Duration { return 0 }
	}
	if s.frozen == nil {
		s.frozen = func(string, string, ledger.ToolClass) bool { return false }
	}
	if s.readyTimeout <= 0 {
		s.readyTimeout = DefaultReadyTimeout
	}
	if s.poll <= 0 {
		s.poll = DefaultPollInterval
	}
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = DefaultBodyTimeout
	}
	if s.answer <= 0 {
		s.answer = DefaultAnswerTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	reg, gath := o.Registerer, o.Gatherer
	switch {
	case reg == nil && gath == nil:
		r := prometheus.NewRegistry()
		reg, gath = r, r
	case reg == nil:
		return nil, errors.New("api: options: a gatherer needs its registerer")
	case gath == nil:
		g, ok := reg.(prometheus.Gatherer)
		if !ok {
			return nil, errors.New("api: options: registerer is not a gatherer; set Gatherer")
		}
		gath = g
	}
	s.gatherer = gath
	if s.metrics, err = newMetrics(reg); err != nil {
		return nil, fmt.Errorf("api: metrics: %w", err)
	}
	if err := s.registerFrozen(reg); err != nil {
		return nil, fmt.Errorf("api: metrics: %w", err)
	}
	s.e = s.routes()
	s.routed = s.belowObserve
	s.handler = dispatch{s}
	if s.tracing {
		s.instrument(o.TracerProvider)
	}
	return s, nil
}

// Handler returns the HTTP handler serving every route (and, with a
// TracerProvider, tracing each request).
func (s *Server) Handler() http.Handler { return s.handler }

// Echo returns the echo instance, so other packages (webhooks) can add their
// routes; they get the same error handler and request metrics.
func (s *Server) Echo() *echo.Echo { return s.e }

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.deadlines)
	e.Use(s.observe)
	if s.tracing {
		e.Use(s.nameSpan)
	}
	e.Use(strictQuery)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", s.metricsHandler())
	e.GET("/openapi.yaml", s.openapi)

	// Authentication is per route, not per group: a group middleware in echo
	// v4 registers catch-all not-found routes, which would blur e.Routes().
	tenantOnly := s.authenticate(roleTenant)
	anyRole := s.authenticate(roleTenant | roleAdmin)
	adminOnly := s.authenticate(roleAdmin)
	readApprovals := s.authenticate(roleTenant | roleApprover | roleAdmin)
	decideApprovals := s.authenticate(roleApprover | roleAdmin)
	// The write routes take an Idempotency-Key (idempotency.go), checked
	// once the token has named the caller's tenant.
	// Each route's middleware is applied here, once (chain): echo would
	// apply it anew on every request.
	idem := s.idempotent
	e.POST("/v1/claims", chain(s.claim, tenantOnly, idem))
	e.GET("/v1/claims", chain(s.list, anyRole))
	e.GET("/v1/claims/:key", chain(s.get, anyRole))
	e.POST("/v1/claims/:key/outcome", chain(s.outcome, tenantOnly, idem))
	e.POST("/v1/claims/:key/compensations", chain(s.compensate, tenantOnly, idem))
	e.POST("/v1/claims/:key/start", chain(s.start, tenantOnly, idem))
	e.POST("/v1/claims/:key/resolve", chain(s.resolve, adminOnly, idem))
	e.POST("/v1/admin/redrive", chain(s.redrive, adminOnly, idem))
	e.GET("/v1/admin/backup", chain(s.backup, adminOnly))
	s.freezeRoutes(e, adminOnly, idem)
	s.toolRoutes(e, tenantOnly, anyRole)
	s.approvalRoutes(e, readApprovals, decideApprovals, idem)
	return e
}

// Signal wakes the claims long-polling on tenant's key, which then decide
// again at once: the webhooks handler calls it for every row a delivery
// changed (webhooks.Options.Applied).
func (s *Server) Signal(tenant, key string) { s.watch.signal(tenant, key) }

// EndWaits makes every long-polling claim (?wait=) answer now with what it
// knows (409 wait for a row still in flight), and later ones answer without
// waiting: a graceful shutdown then waits for requests, not for MaxWait.
// Register it with http.Server.RegisterOnShutdown. Safe to call twice.
func (s *Server) EndWaits() { s.stopOnce.Do(func() { close(s.stopWaits) }) }

func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", openAPISpec)
}
