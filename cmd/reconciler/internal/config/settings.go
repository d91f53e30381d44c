package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentledger/reconciler/events"
)

// Setting is one value that has all three forms: a flag, an environment
// variable and a config-file key (docs/architecture.md §9). The names derive from the
// key: resolver.pending_ttl → --resolver-pending-ttl / RECONCILER_RESOLVER_PENDING_TTL.
type Setting struct {
	// Key is the config-file key, dotted for nested ones (resolver.grace).
	Key string
	// Usage is the line --help shows.
	Usage string
	// EnvOnly settings are secrets: a flag would show them to every user of
	// the machine in the process list, so they have no flag.
	EnvOnly bool
}

// Flag is the flag's name without dashes, "" for a secret.
func (s Setting) Flag() string {
	if s.EnvOnly {
		return ""
	}
	return strings.NewReplacer(".", "-", "_", "-").Replace(s.Key)
}

// Env is the environment variable.
func (s Setting) Env() string {
	return "RECONCILER_" + strings.ToUpper(strings.ReplaceAll(s.Key, ".", "_"))
}

// Environment variables that are not settings of the table below.
const (
	EnvConfig     = "RECONCILER_CONFIG"      // the config file, when --config is not given
	EnvToken      = "RECONCILER_TOKEN"       // the default tenant's token (see EnsureTokens)
	EnvAdminToken = "RECONCILER_ADMIN_TOKEN" // the admin token, of serve and of `reconciler ledger`
)

// settings lists the settings in the order --help shows them: §9's table
// with the NATS listener's TLS and the external NATS's credentials after
// --nats-listen, then --body-limit and --log-level; the rest are the config
// file's single values, so a container can set them without a file.
var settings = []Setting{
	{Key: "data", Usage: "directory of the bbolt file and the embedded NATS store"},
	{Key: "http", Usage: "listen address of the API, webhooks and /metrics"},
	{Key: "store", Usage: "bolt, or a postgres:// URL (many replicas, one database)"},
	{Key: "store_listen_url", Usage: "postgres: a postgres:// URL of the same database for the LISTEN connection, a session (the server, or a session-mode pool) when store goes through PgBouncer in transaction mode; empty: store"},
	{Key: "bolt_wal", Usage: "bolt: acknowledge writes after one fdatasync of a write-ahead log, bbolt committing in batches (false: a bbolt commit per group)"},
	{Key: "nats_url", Usage: "external NATS server with JetStream (comma-separated URLs); empty starts an embedded one"},
	{Key: "nats_listen", Usage: "listen address of the embedded NATS server; one other hosts can reach needs tenants' nats_nkeys"},
	{Key: "nats_listen_cert", Usage: "TLS certificate file (PEM) of the embedded NATS listener; with nats_listen_key, clients must use TLS"},
	{Key: "nats_listen_key", Usage: "private key file (PEM) of nats_listen_cert"},
	{Key: "nats_creds", Usage: "credentials file (JWT and seed) of the service on an external NATS, as the nats CLI's --creds"},
	{Key: "nats_nkey", Usage: "nkey seed file of the service on an external NATS, as --nkey (reconciler nats-creds --service writes one)"},
	{Key: "nats_ca", Usage: "CA file that verifies an external NATS server's certificate, as --tlsca"},
	{Key: "nats_cert", Usage: "TLS client certificate file for an external NATS, as --tlscert"},
	{Key: "nats_key", Usage: "TLS client key file for an external NATS, as --tlskey"},
	{Key: "body_limit", Usage: "largest request body: bytes, or with KiB/MiB/KB/MB"},
	{Key: "log_level", Usage: "debug, info, warn or error"},
	{Key: "inbox_retention", Usage: "how long vendor event ids are remembered (at least 72h)"},
	{Key: "retention.settled_rows", Usage: "delete succeeded/failed_poison rows this long after they settled (0: keep every row; at least every replay window and inbox_retention)"},
	{Key: "retention.archive_dir", Usage: "append each row to <dir>/rows-YYYY-MM-DD.jsonl (fsynced) before retention deletes it"},
	{Key: "resolver.interval", Usage: "how often the resolver looks for open rows"},
	{Key: "resolver.grace", Usage: "how long the resolver leaves a row alone after its last attempt"},
	{Key: "resolver.pending_ttl", Usage: "lease of an attempt in flight"},
	{Key: "events.stream", Usage: "JetStream stream of resolutions"},
	{Key: "events.work_stream", Usage: "JetStream stream of the outbox autonomy's work items (subjects <prefix>_work.<tenant>.<tool>)"},
	{Key: "events.subject_prefix", Usage: "subjects are <prefix>.<tenant>.<run_id>.<status>"},
	{Key: "events.replicas", Usage: "replicas of the stream in a NATS cluster, 1-5; keep: leave an existing stream's count"},
	{Key: "events.synced_after", Usage: "how long after its ack NATS has surely synced an event (the relay keeps it until then); auto: 3s embedded, 0s for a stream of 3+ replicas, else 2m30s (a stock server syncs every 2m)"},
	{Key: "events.degraded_depth", Usage: "/readyz answers degraded (200) while more events than this wait in the outbox; 0: never"},
	{Key: "events.max_bytes", Usage: "most each stream (events, work items) stores: bytes, or with KiB/MiB/GiB; /readyz says degraded past 90%"},
	{Key: "events.max_msg_size", Usage: "largest event or work item a stream takes"},
	{Key: "events.discard", Usage: "a full events stream: new refuses new events (they wait in the outbox), old drops its oldest"},
	{Key: "stripe.api_base", Usage: "Stripe API for lookups and replays"},
	{Key: "stripe.api_key", Usage: "Stripe secret key for lookups and replays", EnvOnly: true},
	{Key: "stripe.replay_window", Usage: "how long Stripe honours a key (720h for API v2)"},
	{Key: "stripe.search_lag", Usage: "a Stripe Search miss counts as absence only after this"},
	{Key: "paypal.api_base", Usage: "PayPal API"},
	{Key: "paypal.replay_window", Usage: "how long PayPal honours a PayPal-Request-Id (Payments v2: 45 days)"},
	{Key: "paypal.orders_replay_window", Usage: "the same for Orders v2 (/v2/checkout/orders…), and for a PayPal claim whose request is unknown or absent: 6h unless PayPal raised it"},
	{Key: "paypal.client_id", Usage: "PayPal REST client id (postback verification, lookups)"},
	{Key: "paypal.client_secret", Usage: "PayPal REST client secret", EnvOnly: true},
	{Key: "paging.pagerduty.url", Usage: "PagerDuty Events v2 endpoint"},
	{Key: "paging.pagerduty.routing_key", Usage: "PagerDuty routing key; set it to page through PagerDuty", EnvOnly: true},
	{Key: "paging.webhook.url", Usage: "generic JSON webhook pager (Slack/Opsgenie bridges)", EnvOnly: true},
	{Key: "approvals.ttl", Usage: "how long an approval request waits for a human before it expires"},
	{Key: "registry.strict", Usage: "true: refuse claims of tools not in the registry (422 unregistered_tool)"},
	{Key: "console.enabled", Usage: "serve the ops console at /console"},
	{Key: "console.trace_url", Usage: "trace UI link of a row's trace id in the console; {trace_id} is replaced"},
	{Key: "console.secure_cookie", Usage: "true: the console's session cookie is Secure on plain HTTP too (TLS ends at a proxy)"},
	{Key: "console.session_ttl", Usage: "how long a console sign-in lasts"},
	{Key: "console.session_key", Usage: "secret (32+ characters) every replica shares to seal console session cookies", EnvOnly: true},
	{Key: "console.search_timeout", Usage: "how long one console search may read the store"},
}

// Settings returns the settings in the order --help shows them.
func Settings() []Setting { return slices.Clone(settings) }

// Flags are the command-line forms of the settings: --config and one flag
// per setting that is not a secret. RegisterFlags defines them; after the
// FlagSet has parsed the command line, Load reads the configuration.
type Flags struct {
	path    string
	pathSet bool
	values  map[string]string // setting key → raw text, for flags given
}

// RegisterFlags defines --config and the settings' flags on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{values: map[string]string{}}
	fs.Func("config", "YAML config file", func(s string) error { f.path, f.pathSet = s, true; return nil })
	for _, s := range settings {
		if name := s.Flag(); name != "" {
			fs.Func(name, s.Usage, func(v string) error { f.values[s.Key] = v; return nil })
		}
	}
	return f
}

// Load is the package's Load with the flags given: the config file is
// --config, else $RECONCILER_CONFIG.
func (f *Flags) Load(getenv func(string) string) (Config, error) {
	path := f.path
	if !f.pathSet && getenv != nil {
		path = getenv(EnvConfig)
	}
	return Load(path, getenv, f.values)
}

// Load builds the effective configuration: defaults, then the config
// file, then the environment, then flags (flagValues: setting key → raw text,
// only for flags given on the command line). configPath is the file to read,
// "" for none. It returns the config and every problem found, joined; the
// config is only usable when the error is nil.
func Load(configPath string, getenv func(string) string, flagValues map[string]string) (Config, error) {
	c := Default()
	var errs []error
	if configPath != "" {
		data, err := os.ReadFile(configPath)
		if err != nil {
			return c, fmt.Errorf("read config: %w", err)
		}
		if err := c.decodeYAML(configPath, data, getenv); err != nil {
			if errors.Is(err, errTooLarge) {
				return c, sortErrors(err)
			}
			errs = append(errs, err)
		}
	}
	if err := c.applyOverrides(getenv, flagValues); err != nil {
		errs = append(errs, err)
	}
	c.fillIn()
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	return c, sortErrors(errs...)
}

// Parse is Load for a document already in memory (tests, fuzzing):
// defaults, then data, then validation. name is used in error positions.
func Parse(name string, data []byte, getenv func(string) string) (Config, error) {
	c := Default()
	var errs []error
	if err := c.decodeYAML(name, data, getenv); err != nil {
		if errors.Is(err, errTooLarge) {
			return c, sortErrors(err)
		}
		errs = append(errs, err)
	}
	c.fillIn()
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	return c, sortErrors(errs...)
}

// applyOverrides applies the environment and then the flags, which win.
// An empty environment variable counts as unset (the usual convention for
// `docker run -e X=`); an empty flag sets the value to empty.
func (c *Config) applyOverrides(getenv func(string) string, flagValues map[string]string) error {
	if c.origin == nil {
		c.origin = newOrigin("")
	}
	var errs []error
	root := reflect.ValueOf(c).Elem()
	for _, s := range settings {
		if getenv != nil {
			if v := getenv(s.Env()); v != "" {
				errs = append(errs, c.override(root, s, v, s.Env()))
			}
		}
		if v, ok := flagValues[s.Key]; ok && s.Flag() != "" {
			errs = append(errs, c.override(root, s, v, "--"+s.Flag()))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) override(root reflect.Value, s Setting, value, where string) error {
	f, ok := fieldByPath(root, s.Key)
	if !ok {
		return &Error{Where: where, Path: s.Key, Msg: "internal error: no such setting"}
	}
	if err := setScalar(f, value); err != nil {
		if s.EnvOnly {
			err = errors.New("invalid value")
		}
		c.origin.failed[s.Key] = true
		return &Error{Where: where, Path: s.Key, Msg: err.Error()}
	}
	delete(c.origin.failed, s.Key) // a good override replaces a bad file value
	c.origin.src[s.Key] = where
	return nil
}

// ByteSize is a size in bytes that reads "1MiB", "512KiB", "2MB" or "1048576".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"kB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// UnmarshalText parses a size.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("invalid size %q: want bytes or a whole number of KiB, MiB, GiB, KB, MB, GB", string(text))
	}
	*b = ByteSize(n * mult)
	return nil
}

// MarshalText writes the size the way UnmarshalText reads it.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// String writes 1048576 as "1MiB" and 1000 as "1000B".
func (b ByteSize) String() string {
	n := int64(b)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// SyncedAfter is events.synced_after: how long after its PubAck the NATS
// server has certainly synced a message, or SyncedAfterAuto.
type SyncedAfter time.Duration

// SyncedAfterAuto lets serve choose from the server it talks to: the
// embedded one's natsserver.SyncedAfter, 0 for an external stream of 3 or
// more replicas (its ack is a quorum's), else events.StockSyncedAfter.
const SyncedAfterAuto SyncedAfter = -1

// UnmarshalText reads "auto" or a Go duration from 0 to events.MaxSyncedAfter.
func (s *SyncedAfter) UnmarshalText(text []byte) error {
	v := strings.TrimSpace(string(text))
	if v == "auto" {
		*s = SyncedAfterAuto
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > events.MaxSyncedAfter {
		return fmt.Errorf("bad synced_after %q: want auto, or a Go duration from 0s to %s (the duplicates window is 1h)", v, events.MaxSyncedAfter)
	}
	*s = SyncedAfter(d)
	return nil
}

// MarshalText writes the duration, or "auto".
func (s SyncedAfter) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s SyncedAfter) String() string {
	if s == SyncedAfterAuto {
		return "auto"
	}
	return time.Duration(s).String()
}

// Count is a whole number of things, 0 or more.
type Count int

// UnmarshalText reads a non-negative integer.
func (c *Count) UnmarshalText(text []byte) error {
	n, err := strconv.Atoi(strings.TrimSpace(string(text)))
	if err != nil || n < 0 {
		return fmt.Errorf("bad count %q: want a whole number, 0 or more", string(text))
	}
	*c = Count(n)
	return nil
}

// MarshalText writes the number.
func (c Count) MarshalText() ([]byte, error) { return []byte(strconv.Itoa(int(c))), nil }

// StreamReplicas is the event stream's replica count: 1-5, or 0 ("keep")
// to leave an existing stream's count alone.
type StreamReplicas int

// UnmarshalText reads "keep" or 1-5.
func (r *StreamReplicas) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if s == "keep" || s == "" {
		*r = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 5 {
		return fmt.Errorf("bad replicas %q: want 1 to 5, or keep", s)
	}
	*r = StreamReplicas(n)
	return nil
}

// MarshalText writes the count, or "keep".
func (r StreamReplicas) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r StreamReplicas) String() string {
	if r == 0 {
		return "keep"
	}
	return strconv.Itoa(int(r))
}
