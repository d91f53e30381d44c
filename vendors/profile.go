package vendors

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentledger/reconciler/internal/yamlnode"
)

// Profile is one vendor's write API as the ledger and the resolver see it:
// one entry of the configuration's `vendors:` list, merged with its preset.
// The yaml tags are the configuration's keys.
type Profile struct {
	// Name is what claims and registry entries name as `vendor`.
	Name string `yaml:"name"`
	// Preset names the shipped preset the entry started from ("" none).
	Preset string `yaml:"preset"`
	// APIBase is prefixed to every lookup, retrieve and replay path.
	APIBase string `yaml:"api_base"`
	// APIKey is the credential a preset's Auth places ({api_key}).
	APIKey string `yaml:"api_key" secret:"true"`
	// Auth is the header that carries the credential on every call.
	Auth *Auth `yaml:"auth"`
	// Idempotency says where the vendor takes our key.
	Idempotency Idempotency `yaml:"idempotency"`
	// MaxKeyLen bounds the key sent to the vendor (VendorKey fits it).
	MaxKeyLen int `yaml:"max_key_len"`
	// KeyFormat is the alphabet of the key sent to the vendor.
	KeyFormat KeyFormat `yaml:"key_format"`
	// ReplayWindow is how long the vendor replays an answer for the same
	// key: 0 never (the default), Forever for ids the client chooses.
	ReplayWindow Window `yaml:"replay_window"`
	// ReceiptPath is where a create answer's JSON holds the object's id.
	ReceiptPath string `yaml:"receipt_path"`
	// ResultStatusPath and ResultStatusMap read the state of the object a
	// create answer (a replay's 2xx) returns; without them a 2xx is
	// succeeded.
	ResultStatusPath string            `yaml:"result_status_path"`
	ResultStatusMap  map[string]string `yaml:"result_status_map"`
	// ReplayOutcomes read a replay's answer before the defaults, in order.
	ReplayOutcomes []Outcome `yaml:"replay_outcomes"`
	// Lookup asks the vendor for objects carrying our local id.
	Lookup *Lookup `yaml:"lookup"`
	// Retrieve reads one object by the vendor's id (the row's receipt).
	Retrieve *Retrieve `yaml:"retrieve"`
	// RateLimit paces this vendor's calls from the resolver.
	RateLimit Rate `yaml:"rate_limit"`
	// Timeout bounds one vendor call (default DefaultTimeout).
	Timeout time.Duration `yaml:"timeout"`
}

// Auth is the header that authenticates every call. In a preset, Value
// holds {api_key} where the entry's api_key goes; {base64:…} encodes what
// it encloses (HTTP basic auth: "Basic {base64:api:{api_key}}").
type Auth struct {
	Header string `yaml:"header"`
	Value  string `yaml:"value" secret:"true"`
}

// Idempotency is where the vendor takes our key: exactly one of Header (a
// request header), Body (a dotted path in the JSON body), ClientID (a
// dotted path in the JSON body where the vendor takes the object's id from
// us: the id is the key, forever), or None.
type Idempotency struct {
	Header   string `yaml:"header"`
	Body     string `yaml:"body"`
	ClientID string `yaml:"client_id"`
	None     bool   `yaml:"none"`
}

// Placement kinds (Idempotency.Kind).
const (
	PlaceHeader   = "header"
	PlaceBody     = "body"
	PlaceClientID = "client_id"
	PlaceNone     = "none"
)

// Kind is the placement's kind; "" when none is set (a profile without an
// idempotency block: no placement, as none).
func (i Idempotency) Kind() string {
	switch {
	case i.Header != "":
		return PlaceHeader
	case i.Body != "":
		return PlaceBody
	case i.ClientID != "":
		return PlaceClientID
	case i.None:
		return PlaceNone
	}
	return ""
}

// Where is the header name or body path ("" for none).
func (i Idempotency) Where() string {
	switch i.Kind() {
	case PlaceHeader:
		return i.Header
	case PlaceBody:
		return i.Body
	case PlaceClientID:
		return i.ClientID
	}
	return ""
}

// String is "header Idempotency-Key", "body idempotency_key",
// "client_id input.id" or "none".
func (i Idempotency) String() string {
	k := i.Kind()
	if k == "" || k == PlaceNone {
		return PlaceNone
	}
	return k + " " + i.Where()
}

// Places reports whether the vendor takes our key at all.
func (i Idempotency) Places() bool {
	k := i.Kind()
	return k != "" && k != PlaceNone
}

// Outcome reads one kind of replay answer: when Status (0: any), every
// BodyContains substring and Header ("Name: value", value a substring;
// "Name" alone: present) match, Then says what it means.
type Outcome struct {
	Status       int    `yaml:"status"`
	BodyContains string `yaml:"body_contains"`
	Header       string `yaml:"header"`
	Then         Then   `yaml:"then"`
}

// Then is what a replay answer means.
type Then string

// The meanings of a replay answer.
const (
	// ThenPage: a human must look (the key was used with another payload):
	// page once, leave the row unknown, never replay it again.
	ThenPage Then = "page"
	// ThenRetry: the vendor is still working on the first request, or did
	// not consume the key: replay again on a later pass.
	ThenRetry Then = "retry"
	// ThenSucceeded and ThenFailed settle the row.
	ThenSucceeded Then = "succeeded"
	ThenFailed    Then = "failed"
)

// UnmarshalText accepts the four meanings.
func (t *Then) UnmarshalText(b []byte) error {
	switch v := Then(strings.TrimSpace(string(b))); v {
	case ThenPage, ThenRetry, ThenSucceeded, ThenFailed:
		*t = v
		return nil
	}
	return fmt.Errorf("unknown outcome %q: want page, retry, succeeded or failed", yamlnode.Truncate(string(b), 40))
}

// Lookup is the request that asks the vendor for objects carrying our local
// id. {local_id} (the row's metadata_local_id) and {vendor_key} are
// replaced in URL (URL-encoded) and Body (JSON-string-escaped).
type Lookup struct {
	Method string `yaml:"method"`
	URL    string `yaml:"url"`
	Body   string `yaml:"body"`
	// ResultsPath is where the answer holds a JSON array of matches, or one
	// object (null or absent: no match); "$" is the whole answer.
	ResultsPath string `yaml:"results_path"`
	// FoundIDPath is the vendor's id inside one match.
	FoundIDPath string `yaml:"found_id_path"`
	// StatusPath and StatusMap read a match's state: vendor status →
	// succeeded, failed or pending. Without StatusPath a match is
	// succeeded; a status the map does not name is pending.
	StatusPath string            `yaml:"status_path"`
	StatusMap  map[string]string `yaml:"status_map"`
	// MinAge: a miss younger than this (since the last attempt) proves
	// nothing — the vendor's index may lag.
	MinAge time.Duration `yaml:"min_age"`
	// Retention: for a row older than this a miss proves nothing either
	// (the vendor forgot); page. 0: the vendor keeps objects for good.
	Retention time.Duration `yaml:"retention"`
	// LocalIDPath, for a vendor that cannot filter on our local id
	// (Mailgun's events): a match counts only when the value at this path
	// equals the row's metadata_local_id. The URL then lists a bounded
	// range ({first_seen_unix}) and every page is read.
	LocalIDPath string `yaml:"local_id_path"`
	// GroupPath: matches sharing the value at this path are one object
	// (the events of one Mailgun message). A group with a failed match is
	// failed, else one with a succeeded match is succeeded, else pending.
	GroupPath string `yaml:"group_path"`
	// NextPath is where an answer holds the absolute URL of the next page
	// (Mailgun's paging.next); pages are read until one has no results,
	// up to MaxPages (default DefaultMaxPages). More pages than that make
	// the lookup inconclusive (an error, never a miss).
	NextPath string `yaml:"next_path"`
	MaxPages int    `yaml:"max_pages"`
}

// DefaultMaxPages bounds a paged lookup when the profile names no max_pages.
const DefaultMaxPages = 10

// Retrieve reads one object by the vendor's id ({receipt_id}, the row's
// upstream_receipt_id). A 404 means no such object.
type Retrieve struct {
	Method     string            `yaml:"method"`
	URL        string            `yaml:"url"`
	StatusPath string            `yaml:"status_path"`
	StatusMap  map[string]string `yaml:"status_map"`
}

// Forever is the replay window of a vendor that takes our id as the
// object's id: the key never expires (100 years, so times stay ordinary).
const Forever = 100 * 365 * 24 * time.Hour

// Window is a replay window: a Go duration, or "forever".
type Window time.Duration

// UnmarshalText reads "24h", "0" or "forever".
func (w *Window) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "forever" {
		*w = Window(Forever)
		return nil
	}
	if s == "0" {
		*w = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("invalid window %q: want a Go duration such as 24h, 0 or forever", yamlnode.Truncate(s, 40))
	}
	*w = Window(d)
	return nil
}

// Duration is the window as a duration (Forever for forever).
func (w Window) Duration() time.Duration { return time.Duration(w) }

// IsForever reports whether the key never expires.
func (w Window) IsForever() bool { return time.Duration(w) >= Forever }

func (w Window) String() string {
	switch {
	case w.IsForever():
		return "forever"
	case w == 0:
		return "0"
	}
	return shortDuration(time.Duration(w))
}

// Rate is a pace: N calls per Per ("10/s", "100/m", "6/min", "1000/h").
// The zero Rate is DefaultRate.
type Rate struct {
	N   float64
	Per time.Duration
}

// DefaultRate paces a vendor whose profile names none.
var DefaultRate = Rate{N: 5, Per: time.Second}

// UnmarshalText reads "N/unit".
func (r *Rate) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	n, unit, ok := strings.Cut(s, "/")
	if !ok {
		return fmt.Errorf("invalid rate %q: want N/s, N/m or N/h", yamlnode.Truncate(s, 40))
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
	if err != nil || v <= 0 || v > 1e6 {
		return fmt.Errorf("invalid rate %q: want a positive number of calls, such as 10/s", yamlnode.Truncate(s, 40))
	}
	var per time.Duration
	switch strings.TrimSpace(unit) {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	default:
		return fmt.Errorf("invalid rate %q: the unit is s, m or h", yamlnode.Truncate(s, 40))
	}
	*r = Rate{N: v, Per: per}
	return nil
}

// PerSecond is the rate in calls per second (DefaultRate when zero).
func (r Rate) PerSecond() float64 {
	if r.N <= 0 || r.Per <= 0 {
		r = DefaultRate
	}
	return r.N / r.Per.Seconds()
}

func (r Rate) String() string {
	if r.N <= 0 || r.Per <= 0 {
		return DefaultRate.String()
	}
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}[r.Per]
	return strconv.FormatFloat(r.N, 'f', -1, 64) + "/" + unit
}

// DefaultTimeout bounds one vendor call when the profile names none.
const DefaultTimeout = 10 * time.Second

// CallTimeout is the profile's timeout, or DefaultTimeout.
func (p Profile) CallTimeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultTimeout
}

// Callable reports whether the resolver can call the vendor: it has an API
// base. A profile read from a `standard:` webhook block has none: it gives
// claims their replay window, and the resolver pages after it.
func (p Profile) Callable() bool { return p.APIBase != "" }

// CanReplay reports whether the resolver may replay a stored request to the
// vendor: it takes our key and remembers it for a while.
func (p Profile) CanReplay() bool {
	return p.Idempotency.Places() && p.ReplayWindow > 0
}

// EffectiveWindow is the replay window a claim gets: 0 for a vendor that
// takes no key, whatever the profile says (validation refuses that).
func (p Profile) EffectiveWindow() time.Duration {
	if !p.Idempotency.Places() {
		return 0
	}
	return p.ReplayWindow.Duration()
}

// AuthHeader is the header name and value to send, with {api_key}
// replaced; empty when the profile authenticates no call.
func (p Profile) AuthHeader() (name, value string) {
	if p.Auth == nil || p.Auth.Header == "" {
		return "", ""
	}
	return p.Auth.Header, expandBase64(strings.ReplaceAll(p.Auth.Value, "{api_key}", p.APIKey))
}

// expandBase64 replaces each {base64:X} of s with the standard base64 of
// X. X runs to the last closing brace, so a key may hold braces.
func expandBase64(s string) string {
	const open = "{base64:"
	i := strings.Index(s, open)
	if i < 0 {
		return s
	}
	j := strings.LastIndex(s, "}")
	if j < i+len(open) {
		return s
	}
	return s[:i] + base64.StdEncoding.EncodeToString([]byte(s[i+len(open):j])) + s[j+1:]
}

func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
