package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/yamlnode"
	"github.com/agentledger/reconciler/ledger"
)

// Bounds that catch typos an operator would regret.
const (
	// minTokenLen: a bearer token for a payments ledger must not be guessable.
	minTokenLen = 16
	// minInboxRetention: vendors retry a webhook for about three days; an
	// inbox that forgets an event id sooner applies a retry twice.
	minInboxRetention = 72 * time.Hour
	maxBodyLimit      = 64 << 20

	maxValidationErrors = 1000
)

// fillIn completes values the file may leave out when they can only mean one
// thing: an endpoint's name is "default", its tenant is the only tenant, and
// a Standard Webhooks endpoint's vendor is its name.
func (c *Config) fillIn() {
	only := ""
	switch len(c.Tenants) {
	case 0:
		only = DefaultTenant
	case 1:
		only = c.Tenants[0].ID
	}
	fill := func(name, tenant *string) {
		if *name == "" {
			*name = "default"
		}
		if *tenant == "" {
			*tenant = only
		}
	}
	for i := range c.Stripe.Endpoints {
		e := &c.Stripe.Endpoints[i]
		fill(&e.Name, &e.Tenant)
	}
	for i := range c.PayPal.Endpoints {
		e := &c.PayPal.Endpoints[i]
		fill(&e.Name, &e.Tenant)
	}
	for i := range c.Standard.Endpoints {
		e := &c.Standard.Endpoints[i]
		fill(&e.Name, &e.Tenant)
		if e.Vendor == "" {
			e.Vendor = e.Name
		}
	}
	fillInWebhooks(c.Webhooks, fill)
}

// Validate checks every setting and returns all problems, joined; each one
// names the line (or the variable or flag) it came from. Values that did not
// even decode were reported while loading and are not checked again.
func (c Config) Validate() error {
	v := &validator{o: c.origin}
	if v.o == nil {
		v.o = newOrigin("")
	}
	if strings.TrimSpace(c.Data) == "" {
		v.add("data", "must not be empty")
	}
	v.listenAddr("http", c.HTTP)
	v.listenAddr("nats_listen", c.NATSListen)
	if c.Store != "bolt" && !isPostgresURL(c.Store) {
		v.add("store", "want bolt or a postgres:// URL")
	}
	switch {
	case c.StoreListenURL == "":
	case !isPostgresURL(c.StoreListenURL):
		v.add("store_listen_url", "want a postgres:// URL")
	case !isPostgresURL(c.Store):
		v.add("store_listen_url", "is for a postgres store")
	}
	v.natsURL("nats_url", c.NATSURL)
	v.nats(c)
	if c.BodyLimit <= 0 || c.BodyLimit > maxBodyLimit {
		v.add("body_limit", "must be between 1B and %s, got %s", ByteSize(maxBodyLimit), c.BodyLimit)
	}
	if c.InboxRetention < minInboxRetention {
		v.add("inbox_retention", "must be at least %s (vendors retry for about 3 days), got %s", formatDuration(minInboxRetention), formatDuration(c.InboxRetention))
	}
	v.retention(c)
	v.positive("resolver.interval", c.Resolver.Interval)
	v.nonNegative("resolver.grace", c.Resolver.Grace)
	v.positive("resolver.pending_ttl", c.Resolver.PendingTTL)
	v.events(c.Events)
	v.streamLimits(c.Events)
	v.paging(c.Paging)
	v.positive("approvals.ttl", c.Approvals.TTL)

	tokens := map[string]string{}   // token → path of its first use
	natsKeys := map[string]string{} // nkey → path of its first use
	known := map[string]bool{}
	firstID := map[string]string{} // tenant id → path of its first use
	for i, t := range c.Tenants {
		p := fmt.Sprintf("tenants[%d]", i)
		if err := ledger.ValidateTenant(t.ID); err != nil {
			v.add(p+".id", "invalid tenant id %q: want 1-128 of [A-Za-z0-9_-] (it is a NATS subject token)", yamlnode.Truncate(t.ID, 40))
		} else if first, dup := firstID[t.ID]; dup {
			v.add(p+".id", "duplicate tenant id %q (first at %s)", t.ID, v.ref(first))
		} else {
			firstID[t.ID] = p + ".id"
		}
		known[t.ID] = true
		if len(t.Tokens) == 0 {
			v.add(p+".tokens", "tenant %q has no tokens", yamlnode.Truncate(t.ID, 40))
		}
		for j, tok := range t.Tokens {
			v.token(fmt.Sprintf("%s.tokens[%d]", p, j), tok, tokens)
		}
		for j, k := range t.NATSNKeys {
			v.natsKey(fmt.Sprintf("%s.nats_nkeys[%d]", p, j), k, natsKeys)
		}
		// Unique across every token, so no token that makes claims can
		// decide an approval.
		for j, tok := range t.ApproverTokens {
			v.token(fmt.Sprintf("%s.approver_tokens[%d]", p, j), tok, tokens)
		}
	}
	if len(c.Tenants) == 0 {
		known[DefaultTenant] = true // created by EnsureTokens
	}
	for j, tok := range c.AdminTokens {
		v.token(fmt.Sprintf("admin_tokens[%d]", j), tok, tokens)
	}

	v.httpURL("stripe.api_base", c.Stripe.APIBase, true)
	v.positive("stripe.replay_window", c.Stripe.ReplayWindow)
	v.nonNegative("stripe.search_lag", c.Stripe.SearchLag)
	names := map[string]string{}
	for i, e := range c.Stripe.Endpoints {
		p := fmt.Sprintf("stripe.endpoints[%d]", i)
		v.endpoint(p, e.Name, e.Tenant, names, known)
		v.secrets(p, e.Name, e.Secrets, nil)
		v.positive(p+".tolerance", e.Tolerance)
		if e.MetadataKey == "" {
			v.add(p+".metadata_key", "must not be empty")
		}
	}

	v.httpURL("paypal.api_base", c.PayPal.APIBase, true)
	v.positive("paypal.replay_window", c.PayPal.ReplayWindow)
	v.positive("paypal.orders_replay_window", c.PayPal.OrdersReplayWindow)
	names = map[string]string{}
	for i, e := range c.PayPal.Endpoints {
		p := fmt.Sprintf("paypal.endpoints[%d]", i)
		v.endpoint(p, e.Name, e.Tenant, names, known)
		v.paypalEndpoint(p, e, c.PayPal)
	}

	names = map[string]string{}
	for i, e := range c.Standard.Endpoints {
		p := fmt.Sprintf("standard.endpoints[%d]", i)
		v.endpoint(p, e.Name, e.Tenant, names, known)
		v.secrets(p, e.Name, e.Secrets, checkStandardSecret)
		v.positive(p+".tolerance", e.Tolerance)
		v.positive(p+".replay_window", e.ReplayWindow)
		if e.LocalIDPath == "" {
			v.add(p+".local_id_path", "must say where the sender echoes metadata_local_id (such as data.tags.metadata_local_id)")
		}
		if ledger.ValidateVendor(e.Vendor) != nil {
			v.add(p+".vendor", "invalid vendor %q: want 1-64 of [a-z0-9_-]", yamlnode.Truncate(e.Vendor, 40))
		}
	}

	v.webhooks(c.Webhooks, known, c.InboxRetention)
	v.vendors(c)
	v.console(c.Console)

	for _, vendor := range sortedKeys(c.EventTypes) {
		p := yamlnode.MapPath("event_types", vendor)
		if ledger.ValidateVendor(vendor) != nil {
			v.add(p, "invalid vendor %q: want 1-64 of [a-z0-9_-]", yamlnode.Truncate(vendor, 40))
		}
		for _, typ := range sortedKeys(c.EventTypes[vendor]) {
			if typ == "" {
				v.add(p, "empty event type")
			}
			if a := c.EventTypes[vendor][typ]; !a.Valid() {
				v.add(yamlnode.MapPath(p, typ), "invalid action %q: want succeeded, failed, progress or ignore", yamlnode.Truncate(string(a), 40))
			}
		}
	}
	return errors.Join(v.errs...)
}

type validator struct {
	o    *origin
	errs []error
}

func (v *validator) add(path, format string, args ...any) {
	if v.o.skip(path) || len(v.errs) >= maxValidationErrors {
		return // past the cap, a broken file costs no more work; sortErrors reports the first maxErrors
	}
	v.errs = append(v.errs, &Error{Where: v.o.where(path), Path: path, Msg: fmt.Sprintf(format, args...), line: v.o.lineOf(path)})
}

// ref names where path is, for "first at …" messages.
func (v *validator) ref(path string) string {
	if l := v.o.line(path); l > 0 {
		return "line " + strconv.Itoa(l)
	}
	return path
}

func (v *validator) positive(path string, d time.Duration) {
	if d <= 0 {
		v.add(path, "must be positive, got %s", formatDuration(d))
	}
}

func (v *validator) nonNegative(path string, d time.Duration) {
	if d < 0 {
		v.add(path, "must not be negative, got %s", formatDuration(d))
	}
}

func (v *validator) listenAddr(path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "bad listen address %q: want host:port", yamlnode.Truncate(addr, 80))
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(path, "bad listen address %q: port must be 0-65535", yamlnode.Truncate(addr, 80))
	}
	if strings.ContainsAny(host, " /") {
		v.add(path, "bad listen address %q: bad host", yamlnode.Truncate(addr, 80))
	}
}

// nats checks the NATS settings that belong to one mode: the embedded
// server's listener, or the credentials of an external one; and refuses an
// embedded server other hosts could reach while it has no users.
func (v *validator) nats(c Config) {
	external := []struct{ key, value string }{
		{"nats_creds", c.NATSCreds}, {"nats_nkey", c.NATSNKey}, {"nats_ca", c.NATSCA}, {"nats_cert", c.NATSCert}, {"nats_key", c.NATSKey},
	}
	if !c.EmbeddedNATS() {
		for _, k := range []struct{ key, value string }{{"nats_listen_cert", c.NATSListenCert}, {"nats_listen_key", c.NATSListenKey}} {
			if k.value != "" {
				v.add(k.key, "is for the embedded NATS server; an external one (nats_url) has TLS of its own (nats_ca verifies it)")
			}
		}
		if c.NATSCreds != "" && c.NATSNKey != "" {
			v.add("nats_nkey", "nats_creds and nats_nkey are exclusive: give one")
		}
		v.file("nats_creds", c.NATSCreds)
		v.seedFile("nats_nkey", c.NATSNKey)
		v.file("nats_ca", c.NATSCA)
		v.filePair("nats_cert", c.NATSCert, "nats_key", c.NATSKey)
		return
	}
	for _, k := range external {
		if k.value != "" {
			v.add(k.key, "is for an external NATS (nats_url); the service reaches its embedded server in-process")
		}
	}
	v.filePair("nats_listen_cert", c.NATSListenCert, "nats_listen_key", c.NATSListenKey)
	host, _, err := net.SplitHostPort(c.NATSListen)
	if err == nil && !c.NATSAuth() && !isLoopback(host) {
		v.add("nats_listen", "%s can be reached from other hosts and the embedded NATS server has no users, so anyone could publish and read every tenant's events: give the tenants nats_nkeys (reconciler nats-creds --tenant T makes one) or listen on 127.0.0.1",
			yamlnode.Truncate(c.NATSListen, 80))
	}
}

// isLoopback is natsserver.IsLoopback (which config may not import): an
// empty host is the embedded server's 127.0.0.1; any name but localhost
// counts as reachable from other hosts.
func isLoopback(host string) bool {
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// natsKey checks a tenant's public nkey, never quoting it: a seed pasted by
// mistake is a secret.
func (v *validator) natsKey(path, k string, seen map[string]string) {
	switch {
	case strings.HasPrefix(k, "S"):
		v.add(path, "this is an nkey seed, the runtime's secret: put its public key (U…) here")
		return
	case !nkeys.IsValidPublicUserKey(k):
		v.add(path, "not a public user nkey (U followed by 55 characters)")
		return
	}
	if first, dup := seen[k]; dup {
		v.add(path, "nkey used twice (also at %s)", v.ref(first))
		return
	}
	seen[k] = path
}

// file checks that a configured file is there; "" is unset.
func (v *validator) file(path, name string) bool {
	if name == "" {
		return false
	}
	fi, err := os.Stat(name)
	switch {
	case err != nil:
		v.add(path, "%v", err)
		return false
	case !fi.Mode().IsRegular():
		v.add(path, "%s is not a regular file", name)
		return false
	}
	return true
}

// filePair checks a certificate and its key: both or neither.
func (v *validator) filePair(certPath, cert, keyPath, key string) {
	switch {
	case cert != "" && key == "":
		v.add(certPath, "needs its key file too (%s)", keyPath)
	case cert == "" && key != "":
		v.add(keyPath, "needs its certificate file too (%s)", certPath)
	}
	v.file(certPath, cert)
	v.file(keyPath, key)
}

// seedFile checks that an nkey seed file holds a user seed, without ever
// quoting it.
func (v *validator) seedFile(path, name string) {
	if !v.file(path, name) {
		return
	}
	data, err := os.ReadFile(name)
	if err != nil {
		v.add(path, "%v", err)
		return
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	clear(data)
	if err != nil {
		v.add(path, "%s holds no user nkey seed (SU…)", name)
		return
	}
	kp.Wipe()
}

func isPostgresURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") && u.Opaque == ""
}

// natsURL checks a comma-separated server list without echoing it: it may
// carry a user's password or a token.
func (v *validator) natsURL(path, s string) {
	if s == "" {
		return
	}
	for i, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) {
			v.add(path, "URL %d of the list is not a nats://, tls://, ws:// or wss:// URL with a host", i+1)
		}
	}
}

// httpURL checks an absolute http(s) URL. show says whether the value may be
// quoted in the message (API bases may; a webhook URL can hold a secret).
func (v *validator) httpURL(path, s string, show bool) {
	u, err := url.Parse(s)
	if err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
		return
	}
	if show {
		v.add(path, "want an http(s) URL, got %q", yamlnode.Truncate(s, 80))
	} else {
		v.add(path, "want an http(s) URL")
	}
}

func (v *validator) token(path, tok string, seen map[string]string) {
	switch {
	case tok == "":
		v.add(path, "empty token")
		return
	case len(tok) < minTokenLen:
		v.add(path, "token is shorter than %d characters", minTokenLen)
	case !printable(tok):
		v.add(path, "token must be printable ASCII without spaces")
	}
	if first, dup := seen[tok]; dup {
		v.add(path, "token used twice (also at %s)", v.ref(first))
		return
	}
	seen[tok] = path
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// endpoint checks an endpoint's name (a URL path segment, unique per
// vendor) and that it names a configured tenant.
func (v *validator) endpoint(p, name, tenant string, names map[string]string, known map[string]bool) {
	if ledger.ValidateTenant(name) != nil || len(name) > 64 {
		v.add(p+".name", "invalid endpoint name %q: want 1-64 of [A-Za-z0-9_-] (it is a URL path segment)", yamlnode.Truncate(name, 40))
	} else if first, dup := names[name]; dup {
		v.add(p+".name", "duplicate endpoint name %q (first at %s)", name, v.ref(first))
	} else {
		names[name] = p + ".name"
	}
	switch {
	case tenant == "":
		v.add(p+".tenant", "endpoint %q names no tenant (needed when several tenants are configured)", yamlnode.Truncate(name, 40))
	case !known[tenant]:
		v.add(p+".tenant", "endpoint %q names unknown tenant %q", yamlnode.Truncate(name, 40), yamlnode.Truncate(tenant, 40))
	}
}

// secrets checks an endpoint's signing secrets without ever quoting one.
func (v *validator) secrets(p, name string, secrets []string, check func(string) error) {
	if len(secrets) == 0 {
		v.add(p+".secrets", "endpoint %q has no secret", yamlnode.Truncate(name, 40))
		return
	}
	for j, s := range secrets {
		sp := fmt.Sprintf("%s.secrets[%d]", p, j)
		if strings.TrimSpace(s) == "" {
			v.add(sp, "empty secret")
			continue
		}
		if check != nil {
			if err := check(s); err != nil {
				v.add(sp, "%v", err)
			}
		}
	}
}

// checkStandardSecret: Standard Webhooks keys are "whsec_" + base64 of the key bytes.
func checkStandardSecret(s string) error {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return errors.New("secret must start with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) == 0 {
		return errors.New("secret after whsec_ is not base64")
	}
	return nil
}

func (v *validator) paypalEndpoint(p string, e PayPalEndpoint, pc PayPalConfig) {
	if strings.TrimSpace(e.WebhookID) == "" {
		v.add(p+".webhook_id", "endpoint %q has no webhook_id (the id PayPal signs every event with)", yamlnode.Truncate(e.Name, 40))
	}
	switch e.Verify {
	case PayPalVerifyOffline:
		if len(e.CertURLPrefixes) == 0 {
			v.add(p+".cert_url_prefixes", "offline verification needs at least one allowed certificate URL prefix")
		}
		for j, pre := range e.CertURLPrefixes {
			// The cert URL comes from the request: a prefix without a path
			// ("https://api.paypal.com") would also admit api.paypal.com.evil.example.
			u, err := url.Parse(pre)
			if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || !strings.HasSuffix(u.Path, "/") {
				v.add(fmt.Sprintf("%s.cert_url_prefixes[%d]", p, j), "want an https:// URL ending in / (such as https://api.paypal.com/), got %q", yamlnode.Truncate(pre, 80))
			}
		}
		if len(e.CertCNSuffix) < 2 || e.CertCNSuffix[0] != '.' {
			v.add(p+".cert_cn_suffix", "want a domain suffix starting with a dot (such as .paypal.com), got %q", yamlnode.Truncate(e.CertCNSuffix, 80))
		}
	case PayPalVerifyPostback:
		if pc.ClientID == "" || pc.ClientSecret == "" {
			v.add(p+".verify", "postback verification needs paypal.client_id and paypal.client_secret")
		}
	default:
		v.add(p+".verify", "want offline or postback, got %q", yamlnode.Truncate(e.Verify, 40))
	}
	v.file(p+".ca_file", e.CAFile)
}

func (v *validator) events(e EventsConfig) {
	if ledger.ValidateTenant(e.Stream) != nil {
		v.add("events.stream", "invalid stream name %q: want 1-128 of [A-Za-z0-9_-]", yamlnode.Truncate(e.Stream, 40))
	}
	if ledger.ValidateTenant(e.WorkStream) != nil {
		v.add("events.work_stream", "invalid stream name %q: want 1-128 of [A-Za-z0-9_-]", yamlnode.Truncate(e.WorkStream, 40))
	} else if e.WorkStream == e.Stream {
		v.add("events.work_stream", "must not be the events stream %q: work items need a work-queue stream of their own", e.Stream)
	}
	if events.ValidSubjectPrefix(e.SubjectPrefix) != nil {
		v.add("events.subject_prefix", "invalid subject prefix %q: want dot-separated tokens of [A-Za-z0-9_-]", yamlnode.Truncate(e.SubjectPrefix, 40))
	}
}

func (v *validator) paging(p PagingConfig) {
	if p.PagerDuty.RoutingKey != "" || p.PagerDuty.URL != "" {
		v.httpURL("paging.pagerduty.url", p.PagerDuty.URL, true)
	}
	if p.Webhook.URL != "" {
		v.httpURL("paging.webhook.url", p.Webhook.URL, false)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// console checks the console's link templates: an http(s) URL holding its
// placeholder.
func (v *validator) console(c ConsoleConfig) {
	v.positive("console.session_ttl", c.SessionTTL)
	v.positive("console.search_timeout", c.SearchTimeout)
	if c.SessionKey != "" && len(c.SessionKey) < 32 {
		v.add("console.session_key", "must be at least 32 characters (it keys every session cookie)")
	}
	link := func(path, tmpl, placeholder string) {
		v.httpURL(path, strings.ReplaceAll(tmpl, placeholder, "x"), true)
		if !strings.Contains(tmpl, placeholder) {
			v.add(path, "must hold %s, which the console replaces", placeholder)
		}
	}
	if c.TraceURL != "" {
		link("console.trace_url", c.TraceURL, "{trace_id}")
	}
	for _, vendor := range sortedKeys(c.VendorLinks) {
		p := yamlnode.MapPath("console.vendor_links", vendor)
		if ledger.ValidateVendor(vendor) != nil {
			v.add(p, "invalid vendor %q: want 1-64 of [a-z0-9_-]", yamlnode.Truncate(vendor, 40))
		}
		link(p, c.VendorLinks[vendor], "{receipt_id}")
	}
}
