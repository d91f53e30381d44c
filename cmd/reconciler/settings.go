package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
)

// setting is one value that has all three forms: a flag, an environment
// variable and a config-file key (ARCHITECTURE §9). The names derive from the
// key: resolver.pending_ttl → --resolver-pending-ttl / RECONCILER_RESOLVER_PENDING_TTL.
type setting struct {
	key   string
	usage string
	// envOnly settings are secrets: a flag would show them to every user of
	// the machine in the process list, so they have no flag.
	envOnly bool
}

func (s setting) flag() string {
	if s.envOnly {
		return ""
	}
	return strings.NewReplacer(".", "-", "_", "-").Replace(s.key)
}

func (s setting) env() string {
	return "RECONCILER_" + strings.ToUpper(strings.ReplaceAll(s.key, ".", "_"))
}

// Environment variables that are not settings of the table below.
const (
	envConfig     = "RECONCILER_CONFIG"
	envToken      = "RECONCILER_TOKEN"
	envAdminToken = "RECONCILER_ADMIN_TOKEN"
)

// settings lists the settings in the order --help shows them. The first
// seven are §9's table plus --body-limit and --log-level; the rest are the
// config file's single values, so a container can set them without a file.
var settings = []setting{
	{key: "data", usage: "directory of the bbolt file and the embedded NATS store"},
	{key: "http", usage: "listen address of the API, webhooks and /metrics"},
	{key: "store", usage: "bolt, or a postgres:// URL (many replicas, one database)"},
	{key: "nats_url", usage: "external NATS server with JetStream (comma-separated URLs); empty starts an embedded one"},
	{key: "nats_listen", usage: "listen address of the embedded NATS server"},
	{key: "body_limit", usage: "largest request body: bytes, or with KiB/MiB/KB/MB"},
	{key: "log_level", usage: "debug, info, warn or error"},
	{key: "inbox_retention", usage: "how long vendor event ids are remembered (at least 72h)"},
	{key: "resolver.interval", usage: "how often the resolver looks for open rows"},
	{key: "resolver.grace", usage: "how long the resolver leaves a row alone after its last attempt"},
	{key: "resolver.pending_ttl", usage: "lease of an attempt in flight"},
	{key: "events.stream", usage: "JetStream stream of resolutions"},
	{key: "events.subject_prefix", usage: "subjects are <prefix>.<tenant>.<run_id>.<status>"},
	{key: "events.replicas", usage: "replicas of the stream in a NATS cluster, 1-5; keep: leave an existing stream's count"},
	{key: "stripe.api_base", usage: "Stripe API for lookups and replays"},
	{key: "stripe.api_key", usage: "Stripe secret key for lookups and replays", envOnly: true},
	{key: "stripe.replay_window", usage: "how long Stripe honours a key (720h for API v2)"},
	{key: "stripe.search_lag", usage: "a Stripe Search miss counts as absence only after this"},
	{key: "paypal.api_base", usage: "PayPal API"},
	{key: "paypal.replay_window", usage: "how long PayPal honours a PayPal-Request-Id (Payments v2: 45 days)"},
	{key: "paypal.orders_replay_window", usage: "the same for Orders v2 (/v2/checkout/orders…), and for a PayPal claim whose request is unknown or absent: 6h unless PayPal raised it"},
	{key: "paypal.client_id", usage: "PayPal REST client id (postback verification, lookups)"},
	{key: "paypal.client_secret", usage: "PayPal REST client secret", envOnly: true},
	{key: "paging.pagerduty.url", usage: "PagerDuty Events v2 endpoint"},
	{key: "paging.pagerduty.routing_key", usage: "PagerDuty routing key; set it to page through PagerDuty", envOnly: true},
	{key: "paging.webhook.url", usage: "generic JSON webhook pager (Slack/Opsgenie bridges)", envOnly: true},
}

// LoadConfig builds the effective configuration: defaults, then the config
// file, then the environment, then flags (flagValues: setting key → raw text,
// only for flags given on the command line). configPath is the file to read,
// "" for none. It returns the config and every problem found, joined; the
// config is only usable when the error is nil.
func LoadConfig(configPath string, getenv func(string) string, flagValues map[string]string) (Config, error) {
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

// ParseConfig is LoadConfig for a document already in memory (tests, fuzzing):
// defaults, then data, then validation. name is used in error positions.
func ParseConfig(name string, data []byte, getenv func(string) string) (Config, error) {
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
			if v := getenv(s.env()); v != "" {
				errs = append(errs, c.override(root, s, v, s.env()))
			}
		}
		if v, ok := flagValues[s.key]; ok && s.flag() != "" {
			errs = append(errs, c.override(root, s, v, "--"+s.flag()))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) override(root reflect.Value, s setting, value, where string) error {
	f, ok := fieldByPath(root, s.key)
	if !ok {
		return &ConfigError{Where: where, Path: s.key, Msg: "internal error: no such setting"}
	}
	if err := setScalar(f, value); err != nil {
		if s.envOnly {
			err = errors.New("invalid value")
		}
		c.origin.failed[s.key] = true
		return &ConfigError{Where: where, Path: s.key, Msg: err.Error()}
	}
	delete(c.origin.failed, s.key) // a good override replaces a bad file value
	c.origin.src[s.key] = where
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
