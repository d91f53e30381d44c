package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// Store is the part of the ledger's store the console reads. It never
// writes through it: every change goes through the API.
type Store interface {
	Get(ctx context.Context, tenant, key string) (ledger.Row, error)
	List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error)
	ListApprovals(ctx context.Context, q ledger.ApprovalQuery) (ledger.ApprovalPage, error)
	ListTools(ctx context.Context, tenant string) ([]ledger.Tool, error)
	ListFreezes(ctx context.Context) ([]ledger.Freeze, error)
}

// Identity is what a signed-in token may do (api.Server.Identify answers it).
type Identity struct {
	// Role is "admin", "approver" or "tenant" (a tenant token cannot sign in).
	Role string
	// Tenant is an approver's tenant; empty for an admin.
	Tenant string
	// Fingerprint names the token in logs; never the token.
	Fingerprint string
}

// History reads what the event stream holds of one run: the row's story
// beyond its current fields (StreamHistory is the RECON stream's).
type History interface {
	RunEvents(ctx context.Context, tenant, runID string) ([]ledger.Event, error)
}

// Options configure the console. Store, API, Identify and Tenants are required.
type Options struct {
	Store Store
	// API is the service's HTTP API: every action is a request to it, with
	// the signed-in person's token.
	API http.Handler
	// Identify maps a token to its identity (api.Server.Identify).
	Identify func(token string) (Identity, bool)
	// Tenants are the tenants an admin may look at (the configured ones).
	Tenants []string
	// History is the row timeline's source of events (nil: the row's own
	// fields only).
	History History
	// Live feeds /console/events (nil: no live updates; the pages still work).
	Live Subscriber
	// SubjectPrefix is the events' subject prefix (default "recon").
	SubjectPrefix string
	// Grace is the resolver's grace (config resolver.grace): an unknown row
	// untouched for longer needs attention.
	Grace time.Duration
	// QueuedAfter is how old a queued work item must be to need attention
	// (default one minute).
	QueuedAfter time.Duration
	// TraceURL links a row's trace id to a trace UI: {trace_id} is replaced
	// (config console.trace_url, e.g. http://jaeger:16686/trace/{trace_id}).
	TraceURL string
	// VendorLinks link a row's receipt to the vendor's dashboard, per vendor:
	// {receipt_id} is replaced (config console.vendor_links).
	VendorLinks map[string]string
	// Verification says how each vendor's webhooks are verified, for the
	// timeline's deliveries (from the endpoints' configuration).
	Verification map[string]string
	// SessionTTL is how long a sign-in lasts (default 8h).
	SessionTTL time.Duration
	// SessionKey is the secret the replicas share to seal session cookies
	// (config console.session_key, at least 32 characters): a sign-in at
	// one replica is valid at all. Empty: a random key per process, so
	// sessions are this replica's.
	SessionKey string
	// Revocations records sign-outs where every replica reads them (the
	// store's ledger.Revocations; nil: this replica's memory only).
	Revocations Revocations
	// SecureCookie marks the session cookie Secure even on plain HTTP (a
	// TLS-terminating proxy in front; config console.secure_cookie). A
	// request that arrived over TLS always gets a Secure cookie.
	SecureCookie bool
	// ScanLimit bounds the rows one needs-attention or run page reads per
	// tenant and status (default 2000), and a search's without a Finder.
	ScanLimit int
	// Finder searches by local id, receipt id and tool call id completely
	// (the store's ledger.Finder; nil: among the newest ScanLimit rows).
	Finder Finder
	// SearchTimeout bounds one search's store reads (default 10 s); a
	// search the deadline cut says so on the page.
	SearchTimeout time.Duration
	// Journal is the row journal the timeline adds (the store's
	// ledger.Journals; nil: none).
	Journal Journal
	Logger  *slog.Logger
	Now     func() time.Time
}

// Defaults.
const (
	DefaultSessionTTL    = 8 * time.Hour
	DefaultQueuedAfter   = time.Minute
	DefaultScanLimit     = 2000
	DefaultSearchTimeout = 10 * time.Second
	// MinSessionKeyLen is the shortest session key accepted.
	MinSessionKeyLen = 32
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves /console. Build it with New.
type Console struct {
	o        Options
	log      *slog.Logger
	now      func() time.Time
	pages    map[string]*template.Template
	sessions *sessions
	live     *hub
	mux      *http.ServeMux
	closeMu  sync.Mutex
	closed   bool
}

// New checks the options and builds the console; Start begins the live feed.
func New(o Options) (*Console, error) {
	switch {
	case o.Store == nil:
		return nil, errors.New("console: options: store is required")
	case o.API == nil:
		return nil, errors.New("console: options: the API handler is required")
	case o.Identify == nil:
		return nil, errors.New("console: options: Identify is required")
	case len(o.Tenants) == 0:
		return nil, errors.New("console: options: at least one tenant is required")
	}
	for _, t := range o.Tenants {
		if err := ledger.ValidateTenant(t); err != nil {
			return nil, fmt.Errorf("console: options: tenant %q: %w", t, err)
		}
	}
	for v, tmpl := range o.VendorLinks {
		if err := checkLinkTemplate(tmpl, "{receipt_id}"); err != nil {
			return nil, fmt.Errorf("console: options: vendor link of %s: %w", v, err)
		}
	}
	if o.SessionKey != "" && len(o.SessionKey) < MinSessionKeyLen {
		return nil, fmt.Errorf("console: options: the session key must be at least %d characters", MinSessionKeyLen)
	}
	if o.TraceURL != "" {
		if err := checkLinkTemplate(o.TraceURL, "{trace_id}"); err != nil {
			return nil, fmt.Errorf("console: options: trace url: %w", err)
		}
	}
	o.Tenants = slices.Sorted(slices.Values(o.Tenants))
	o.Tenants = slices.Compact(o.Tenants)
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = "recon"
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.QueuedAfter <= 0 {
		o.QueuedAfter = DefaultQueuedAfter
	}
	if o.ScanLimit <= 0 {
		o.ScanLimit = DefaultScanLimit
	}
	if o.SearchTimeout <= 0 {
		o.SearchTimeout = DefaultSearchTimeout
	}
	c := &Console{o: o, log: o.Logger, now: o.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	var err error
	if c.pages, err = parseTemplates(); err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	if c.sessions, err = newSessions(o, c.now, c.log); err != nil {
		return nil, fmt.Errorf("console: sessions: %w", err)
	}
	c.live = newHub()
	c.mux = c.routes()
	return c, nil
}

// checkLinkTemplate accepts an http(s) URL template holding the placeholder.
func checkLinkTemplate(tmpl, placeholder string) error {
	if !strings.HasPrefix(tmpl, "https://") && !strings.HasPrefix(tmpl, "http://") {
		return errors.New("want an http or https URL")
	}
	if !strings.Contains(tmpl, placeholder) {
		return fmt.Errorf("want the placeholder %s in it", placeholder)
	}
	return nil
}

// Start subscribes the live feed to the resolution events (a no-op without
// Options.Live). The subscription lasts until Close.
func (c *Console) Start() error {
	if c.o.Live == nil {
		return nil
	}
	return c.live.start(c.o.Live, c.o.SubjectPrefix, c.log)
}

// Close ends every live stream and the subscription feeding them. Requests
// after it still work; a new live stream ends at once.
func (c *Console) Close() {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.live.close()
}

// Handler serves every /console route.
func (c *Console) Handler() http.Handler { return c.mux }

func (c *Console) routes() *http.ServeMux {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/console/static/", http.FileServerFS(static))
	mux.Handle("GET /console/static/", secure(false, files))
	mux.Handle("GET /console", secure(true, http.RedirectHandler("/console/attention", http.StatusSeeOther)))
	mux.Handle("GET /console/{$}", secure(true, http.RedirectHandler("/console/attention", http.StatusSeeOther)))
	mux.Handle("GET /console/signin", secure(true, http.HandlerFunc(c.signInPage)))
	mux.Handle("POST /console/signin", secure(true, http.HandlerFunc(c.signIn)))
	mux.Handle("POST /console/signout", secure(true, c.form(c.signOut)))
	mux.Handle("GET /console/attention", secure(true, c.signedIn(c.attention)))
	mux.Handle("GET /console/row", secure(true, c.signedIn(c.rowPage)))
	mux.Handle("GET /console/run", secure(true, c.signedIn(c.runPage)))
	mux.Handle("GET /console/search", secure(true, c.signedIn(c.search)))
	mux.Handle("GET /console/tools", secure(true, c.signedIn(c.toolsPage)))
	mux.Handle("GET /console/events", secure(true, c.signedIn(c.events)))
	mux.Handle("POST /console/actions/resolve", secure(true, c.form(c.resolve)))
	mux.Handle("POST /console/actions/approve", secure(true, c.form(c.approve)))
	mux.Handle("POST /console/actions/deny", secure(true, c.form(c.deny)))
	mux.Handle("POST /console/actions/freeze", secure(true, c.form(c.freeze)))
	mux.Handle("POST /console/actions/unfreeze", secure(true, c.form(c.unfreeze)))
	mux.Handle("POST /console/actions/redrive", secure(true, c.form(c.redrive)))
	mux.Handle("/console/", secure(true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such console page", http.StatusNotFound)
	})))
	return mux
}

// csp is the console's Content-Security-Policy: nothing inline, nothing
// from elsewhere, no framing, forms post only here.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every console answer carries; private answers
// (everything but the static assets) are never stored by a cache.
func secure(private bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// Row keys and run ids ride in console URLs: no Referer carries them
		// to a trace UI or a vendor's dashboard. (no-referrer would make
		// browsers send Origin: null on our own forms, which sameOrigin refuses.)
		h.Set("Referrer-Policy", "same-origin")
		if private {
			h.Set("Cache-Control", "no-store")
		} else {
			h.Set("Cache-Control", "public, max-age=300")
		}
		next.ServeHTTP(w, r)
	})
}
