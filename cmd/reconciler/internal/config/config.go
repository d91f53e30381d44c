package config

import (
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/matcher"
	"github.com/agentledger/reconciler/resolver"
)

// Config is every setting of docs/architecture.md §9: the top-level settings that
// also have a flag and an environment variable, and the config file's tenants,
// tokens, webhook endpoints, paging and event-type tables.
//
// The yaml tag is the key in the config file; a `secret` tag marks a value that
// Redacted (and so every log line) replaces: "true" for the whole value, "url"
// for the password and credential query parameters of a URL, "endpoint" for
// everything of a URL but its scheme and host (Slack-style webhook URLs carry
// their secret in the path).
type Config struct {
	// File is the config file that was read ("" when none); --config / RECONCILER_CONFIG.
	File string `yaml:"-"`

	// Data holds the bbolt file and the embedded NATS store.
	Data string `yaml:"data"`
	// HTTP is the listen address of the API, the webhooks and /metrics.
	HTTP string `yaml:"http"`
	// Store is "bolt" or a postgres:// URL.
	Store string `yaml:"store" secret:"url"`
	// StoreListenURL, with a postgres store, is where its LISTEN connection
	// goes instead of Store: a session (the server, or a session-mode pool)
	// when Store goes through a transaction-mode pooler such as PgBouncer,
	// which keeps no session for LISTEN. Empty: Store.
	StoreListenURL string `yaml:"store_listen_url" secret:"url"`
	// BoltWAL puts the write-ahead log in front of the bbolt file (the
	// default): a write is acknowledged after one sequential fdatasync of
	// the log, and bbolt takes the writes in batches. false makes every
	// group its own bbolt commit, as before.
	BoltWAL bool `yaml:"bolt_wal"`
	// NATSURL names an external NATS server (comma-separated URLs); empty runs an embedded one.
	NATSURL string `yaml:"nats_url" secret:"url"`
	// NATSListen is where the embedded NATS server listens.
	NATSListen string `yaml:"nats_listen"`
	// NATSListenCert and NATSListenKey (PEM files) make the embedded
	// server's listener TLS only.
	NATSListenCert string `yaml:"nats_listen_cert"`
	NATSListenKey  string `yaml:"nats_listen_key"`
	// The service's credentials on an external NATS (NATSURL), files named
	// after the nats CLI's flags: --creds, --nkey, --tlsca, --tlscert, --tlskey.
	NATSCreds string `yaml:"nats_creds"`
	NATSNKey  string `yaml:"nats_nkey"`
	NATSCA    string `yaml:"nats_ca"`
	NATSCert  string `yaml:"nats_cert"`
	NATSKey   string `yaml:"nats_key"`
	// BodyLimit caps every request body, read before any JSON decoding.
	BodyLimit ByteSize `yaml:"body_limit"`
	// LogLevel is the minimum level logged.
	LogLevel slog.Level `yaml:"log_level"`

	// Tenants map bearer tokens to tenants. With none configured, serve
	// creates the tenant "default" (see EnsureTokens).
	Tenants []Tenant `yaml:"tenants"`
	// AdminTokens grant the admin API.
	AdminTokens []string `yaml:"admin_tokens" secret:"true"`

	Stripe   StripeConfig   `yaml:"stripe"`
	PayPal   PayPalConfig   `yaml:"paypal"`
	Standard StandardConfig `yaml:"standard"`
	// Webhooks are the endpoints served from a preset (or declared knobs):
	// POST /webhooks/{preset}/{name} (webhook_presets.go).
	Webhooks []WebhookEndpoint `yaml:"webhooks"`
	// Vendors are the vendor profiles (vendors.go, docs/vendors.md).
	Vendors VendorList   `yaml:"vendors"`
	Events  EventsConfig `yaml:"events"`

	// InboxRetention is how long vendor event ids are remembered for dedupe.
	InboxRetention time.Duration `yaml:"inbox_retention"`
	// Retention deletes settled rows (retention.go).
	Retention RetentionConfig `yaml:"retention"`

	Resolver  ResolverConfig  `yaml:"resolver"`
	Paging    PagingConfig    `yaml:"paging"`
	Approvals ApprovalsConfig `yaml:"approvals"`
	Registry  RegistryConfig  `yaml:"registry"`
	Console   ConsoleConfig   `yaml:"console"`

	// EventTypes extends the matcher's default table: vendor → event type → action.
	EventTypes map[string]map[string]matcher.Action `yaml:"event_types"`

	// origin says where each value came from, so an error names the line.
	origin *origin
}

// Tenant is one customer of the service and the bearer tokens that act for it.
type Tenant struct {
	ID     string   `yaml:"id"`
	Tokens []string `yaml:"tokens" secret:"true"`
	// NATSNKeys are the public nkeys (U…) of the tenant's runtimes on the
	// embedded NATS server, several while one is rotated; the seeds stay
	// with the runtimes (`reconciler nats-creds`). Any tenant having one
	// switches the embedded server's authentication on.
	NATSNKeys []string `yaml:"nats_nkeys"`
	// ApproverTokens read and decide the tenant's approval requests
	// (docs/architecture.md §11); they make no claims, so the token that made a
	// claim is never one that can approve it.
	ApproverTokens []string `yaml:"approver_tokens" secret:"true"`
}

// StripeConfig holds the Stripe API (for the resolver) and its webhook endpoints.
type StripeConfig struct {
	APIBase string `yaml:"api_base"`
	APIKey  string `yaml:"api_key" secret:"true"`
	// ReplayWindow is how long Stripe remembers an idempotency key (24h for API v1 keys, 720h for v2).
	ReplayWindow time.Duration `yaml:"replay_window"`
	// SearchLag: a Search miss counts as absence only this long after the last attempt.
	SearchLag time.Duration    `yaml:"search_lag"`
	Endpoints []StripeEndpoint `yaml:"endpoints"`
}

// StripeEndpoint is one webhook endpoint: POST /webhooks/stripe/{name}.
type StripeEndpoint struct {
	Name   string `yaml:"name"`
	Tenant string `yaml:"tenant"`
	// Secrets are the whsec_ signing secrets; several while one is rotated.
	Secrets     []string      `yaml:"secrets" secret:"true"`
	Tolerance   time.Duration `yaml:"tolerance"`
	MetadataKey string        `yaml:"metadata_key"`
}

func (e *StripeEndpoint) setDefaults() {
	e.Tolerance = 5 * time.Minute
	e.MetadataKey = "metadata_local_id"
}

// PayPalConfig holds the PayPal API and its webhook endpoints.
type PayPalConfig struct {
	APIBase      string        `yaml:"api_base"`
	ReplayWindow time.Duration `yaml:"replay_window"`
	// OrdersReplayWindow is how long Orders v2 (/v2/checkout/orders…)
	// honours a PayPal-Request-Id: 6 h unless PayPal raised it for the
	// account (up to 72 h). ReplayWindow covers the other APIs.
	OrdersReplayWindow time.Duration `yaml:"orders_replay_window"`
	// ClientID and ClientSecret authenticate the postback verification and the resolver's calls.
	ClientID     string           `yaml:"client_id"`
	ClientSecret string           `yaml:"client_secret" secret:"true"`
	Endpoints    []PayPalEndpoint `yaml:"endpoints"`
}

// Verification modes of a PayPal endpoint.
const (
	PayPalVerifyOffline  = "offline"  // certificate + CRC32, no call to PayPal
	PayPalVerifyPostback = "postback" // POST /v1/notifications/verify-webhook-signature
)

// PayPalEndpoint is one webhook endpoint: POST /webhooks/paypal/{name}.
type PayPalEndpoint struct {
	Name   string `yaml:"name"`
	Tenant string `yaml:"tenant"`
	// WebhookID is part of the signed message; it plays the secret's role.
	WebhookID string `yaml:"webhook_id"`
	Verify    string `yaml:"verify"`
	// CertURLPrefixes is the allow-list for the attacker-supplied cert URL.
	CertURLPrefixes []string `yaml:"cert_url_prefixes"`
	CertCNSuffix    string   `yaml:"cert_cn_suffix"`
	// CAFile adds roots for fetching and chain-checking certificates (tests).
	CAFile string `yaml:"ca_file"`
}

func (e *PayPalEndpoint) setDefaults() {
	e.Verify = PayPalVerifyOffline
	e.CertURLPrefixes = []string{"https://api.paypal.com/", "https://api.sandbox.paypal.com/"}
	e.CertCNSuffix = ".paypal.com"
}

// StandardConfig holds the Standard Webhooks senders (Resend and others).
type StandardConfig struct {
	Endpoints []StandardEndpoint `yaml:"endpoints"`
}

// StandardEndpoint is one Standard Webhooks sender: POST /webhooks/standard/{name}.
type StandardEndpoint struct {
	Name    string   `yaml:"name"`
	Tenant  string   `yaml:"tenant"`
	Secrets []string `yaml:"secrets" secret:"true"`
	// Tolerance bounds the webhook-timestamp in both directions.
	Tolerance time.Duration `yaml:"tolerance"`
	// LocalIDPath is the dotted JSON path where the sender echoes our metadata_local_id.
	LocalIDPath string `yaml:"local_id_path"`
	// Vendor is the ledger vendor of the rows this sender resolves (defaults to Name).
	Vendor       string        `yaml:"vendor"`
	ReplayWindow time.Duration `yaml:"replay_window"`
}

func (e *StandardEndpoint) setDefaults() {
	e.Tolerance = 5 * time.Minute
	e.ReplayWindow = 24 * time.Hour
}

// EventsConfig names the JetStream streams and the subject prefix of
// resolutions (and, with _work appended, of work items).
type EventsConfig struct {
	Stream string `yaml:"stream"`
	// WorkStream holds the outbox autonomy's work items (§11).
	WorkStream    string `yaml:"work_stream"`
	SubjectPrefix string `yaml:"subject_prefix"`
	// Replicas is the stream's replica count in a NATS cluster; "keep"
	// (0) keeps an existing stream's count and creates a new one with 1.
	Replicas StreamReplicas `yaml:"replicas"`
	// SyncedAfter is how long after its PubAck the NATS server has
	// certainly synced an event to disk; the relay keeps the outbox record
	// until then (events.RelayOptions.SyncedAfter). SyncedAfterAuto lets
	// serve derive it from the server it talks to.
	SyncedAfter SyncedAfter `yaml:"synced_after"`
	// DegradedDepth is the outbox backlog past which /readyz answers
	// degraded (still 200); 0 never does.
	DegradedDepth Count `yaml:"degraded_depth"`
	// MaxBytes and MaxMsgSize bound each stream; Discard is what the
	// events stream does when full (limits.go).
	MaxBytes   ByteSize `yaml:"max_bytes"`
	MaxMsgSize ByteSize `yaml:"max_msg_size"`
	Discard    Discard  `yaml:"discard"`
}

// ResolverConfig paces the periodic resolve job.
type ResolverConfig struct {
	Interval time.Duration `yaml:"interval"`
	// Grace leaves a row alone this long after its last attempt.
	Grace time.Duration `yaml:"grace"`
	// PendingTTL is the lease of an attempt in flight.
	PendingTTL time.Duration `yaml:"pending_ttl"`
}

// ApprovalsConfig paces the approval gate (§11).
type ApprovalsConfig struct {
	// TTL is how long an approval request waits for a human before it
	// expires (the claim then stops with approval_expired).
	TTL time.Duration `yaml:"ttl"`
}

// RegistryConfig says how claims of unregistered tools are served (§11).
type RegistryConfig struct {
	// Strict refuses them (422 unregistered_tool); off, they are served as
	// before the registry existed.
	Strict bool `yaml:"strict"`
}

// ConsoleConfig is the ops console at /console (docs/architecture.md §15).
type ConsoleConfig struct {
	// Enabled serves /console; off, the routes are the API's 404s.
	Enabled bool `yaml:"enabled"`
	// TraceURL links a row's trace id to a trace UI; {trace_id} is
	// replaced (Jaeger: http://jaeger:16686/trace/{trace_id}).
	TraceURL string `yaml:"trace_url"`
	// VendorLinks link a row's receipt to the vendor's dashboard, per
	// vendor; {receipt_id} is replaced.
	VendorLinks map[string]string `yaml:"vendor_links"`
	// SecureCookie marks the session cookie Secure on plain HTTP too (TLS
	// ends at a proxy in front); a request over TLS always gets one.
	SecureCookie bool `yaml:"secure_cookie"`
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// SessionKey is the secret every replica is given to seal session
	// cookies, so a sign-in at one is valid at all (sign-outs are kept in
	// the store). Empty: each replica makes its own; route stickily.
	SessionKey string `yaml:"session_key" secret:"true"`
	// SearchTimeout bounds one console search's read of the store.
	SearchTimeout time.Duration `yaml:"search_timeout"`
}

// PagingConfig says where a human is paged. With neither configured, pages
// are written to the log.
type PagingConfig struct {
	PagerDuty PagerDutyConfig `yaml:"pagerduty"`
	Webhook   WebhookConfig   `yaml:"webhook"`
}

// PagerDutyConfig is the Events v2 pager; it is enabled by a routing key.
type PagerDutyConfig struct {
	URL        string `yaml:"url"`
	RoutingKey string `yaml:"routing_key" secret:"true"`
}

// WebhookConfig is the generic JSON POST pager; it is enabled by a URL.
type WebhookConfig struct {
	URL string `yaml:"url" secret:"endpoint"`
}

// DefaultTenant is the tenant serve creates when the config names none.
const DefaultTenant = "default"

// Default returns the design's defaults: `reconciler serve` with nothing else
// runs a working single node.
func Default() Config {
	return Config{
		Data:           "./data",
		HTTP:           "127.0.0.1:8080",
		Store:          "bolt",
		BoltWAL:        true,
		NATSListen:     "127.0.0.1:4222",
		BodyLimit:      1 << 20,
		LogLevel:       slog.LevelInfo,
		InboxRetention: 168 * time.Hour,
		Stripe: StripeConfig{
			APIBase:      "https://api.stripe.com",
			ReplayWindow: 24 * time.Hour,
			SearchLag:    5 * time.Minute,
		},
		PayPal: PayPalConfig{
			APIBase:            "https://api-m.paypal.com",
			ReplayWindow:       72 * time.Hour,
			OrdersReplayWindow: 6 * time.Hour,
		},
		Events: EventsConfig{Stream: "RECON", WorkStream: "RECON_WORK", SubjectPrefix: "recon", SyncedAfter: SyncedAfterAuto, DegradedDepth: 10000,
			MaxBytes: DefaultStreamMaxBytes, MaxMsgSize: DefaultStreamMaxMsgSize, Discard: "new"},
		Resolver: ResolverConfig{Interval: 30 * time.Second, Grace: 60 * time.Second, PendingTTL: 15 * time.Minute},
		Paging: PagingConfig{
			PagerDuty: PagerDutyConfig{URL: "https://events.pagerduty.com/v2/enqueue"},
		},
		Approvals: ApprovalsConfig{TTL: ledger.DefaultApprovalTTL},
		Console:   ConsoleConfig{Enabled: true, SessionTTL: 8 * time.Hour, SearchTimeout: 10 * time.Second},
		origin:    newOrigin(""),
	}
}

// TokenTenants maps each tenant bearer token to its tenant id.
func (c Config) TokenTenants() map[string]string {
	m := make(map[string]string)
	for _, t := range c.Tenants {
		for _, tok := range t.Tokens {
			m[tok] = t.ID
		}
	}
	return m
}

// ApproverTokens maps each approver token to its tenant id
// (api.Options.ApproverTokens).
func (c Config) ApproverTokens() map[string]string {
	m := make(map[string]string)
	for _, t := range c.Tenants {
		for _, tok := range t.ApproverTokens {
			m[tok] = t.ID
		}
	}
	return m
}

// Policy is the ledger's timing policy (api.Options.Policy, the stores).
func (c Config) Policy() ledger.Policy {
	return ledger.Policy{PendingTTL: c.Resolver.PendingTTL, Grace: c.Resolver.Grace}
}

// ReplayWindow is how long vendor honours a replay with the same key
// (api.Options.ReplayWindow); 0 for a vendor without one, whose open rows are
// then left to the resolver and humans rather than retried.
func (c Config) ReplayWindow(vendor string, req *ledger.Request) time.Duration {
	switch vendor {
	case "stripe":
		return c.Stripe.ReplayWindow
	case "paypal":
		if resolver.PayPalOrdersRequest(req) {
			return min(c.PayPal.ReplayWindow, c.PayPal.OrdersReplayWindow)
		}
		return c.PayPal.ReplayWindow
	}
	if w, ok := c.profileWindow(vendor); ok {
		return w
	}
	return 0
}

// BoltPath is the bbolt file used when Store is "bolt".
func (c Config) BoltPath() string { return filepath.Join(c.Data, "reconciler.db") }

// NATSDir is the embedded NATS server's JetStream store.
func (c Config) NATSDir() string { return filepath.Join(c.Data, "nats") }

// UsesBolt reports whether the embedded store is selected.
func (c Config) UsesBolt() bool { return c.Store == "bolt" }

// EmbeddedNATS reports whether serve starts its own NATS server.
func (c Config) EmbeddedNATS() bool { return c.NATSURL == "" }

// NATSAuth reports whether the embedded NATS server requires credentials:
// when some tenant has a NATS key. Without, it is open to whoever reaches
// it, which Validate allows on loopback only.
func (c Config) NATSAuth() bool {
	for _, t := range c.Tenants {
		if len(t.NATSNKeys) > 0 {
			return true
		}
	}
	return false
}

// NATSCredentials are the service's credentials on an external NATS.
func (c Config) NATSCredentials() events.Credentials {
	return events.Credentials{CredsFile: c.NATSCreds, NKeyFile: c.NATSNKey, CAFile: c.NATSCA, CertFile: c.NATSCert, KeyFile: c.NATSKey}
}

// LogValue logs the effective configuration with every secret redacted, so
// slog.Any("config", c) can never leak one.
func (c Config) LogValue() slog.Value {
	return slog.AnyValue(document(c.Redacted()))
}

// String is the redacted form too, for the same reason.
func (c Config) String() string { return fmt.Sprint(document(c.Redacted())) }

// GoString keeps %#v redacted as well.
func (c Config) GoString() string { return c.String() }

// clone copies the slices and maps so a caller may change the copy freely.
func (c Config) clone() Config {
	out := c
	out.Tenants = slices.Clone(c.Tenants)
	for i := range out.Tenants {
		out.Tenants[i].Tokens = slices.Clone(out.Tenants[i].Tokens)
		out.Tenants[i].NATSNKeys = slices.Clone(out.Tenants[i].NATSNKeys)
		out.Tenants[i].ApproverTokens = slices.Clone(out.Tenants[i].ApproverTokens)
	}
	out.AdminTokens = slices.Clone(c.AdminTokens)
	out.Stripe.Endpoints = slices.Clone(c.Stripe.Endpoints)
	for i := range out.Stripe.Endpoints {
		out.Stripe.Endpoints[i].Secrets = slices.Clone(out.Stripe.Endpoints[i].Secrets)
	}
	out.PayPal.Endpoints = slices.Clone(c.PayPal.Endpoints)
	for i := range out.PayPal.Endpoints {
		out.PayPal.Endpoints[i].CertURLPrefixes = slices.Clone(out.PayPal.Endpoints[i].CertURLPrefixes)
	}
	out.Standard.Endpoints = slices.Clone(c.Standard.Endpoints)
	for i := range out.Standard.Endpoints {
		out.Standard.Endpoints[i].Secrets = slices.Clone(out.Standard.Endpoints[i].Secrets)
	}
	out.Webhooks = cloneWebhooks(c.Webhooks)
	out.Vendors = make(VendorList, len(c.Vendors))
	for i, p := range c.Vendors {
		out.Vendors[i] = p.Clone()
	}
	out.Console.VendorLinks = maps.Clone(c.Console.VendorLinks)
	if c.EventTypes != nil {
		out.EventTypes = make(map[string]map[string]matcher.Action, len(c.EventTypes))
		for v, m := range c.EventTypes {
			out.EventTypes[v] = maps.Clone(m)
		}
	}
	return out
}
