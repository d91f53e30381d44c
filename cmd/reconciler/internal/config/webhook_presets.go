package config

import (
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/agentledger/reconciler/internal/yamlnode"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/matcher"
)

// WebhookEndpoint is one endpoint of the webhooks: list, served at
// POST /webhooks/{preset}/{name} (POST /webhooks/custom/{name} without a
// preset). The preset, a data file of the webhooks package, says how the
// vendor signs; the knobs below the first block override it, or declare a
// vendor that has no preset. serve checks the preset and the knobs when it
// builds the endpoint (webhooks.New), naming the endpoint.
type WebhookEndpoint struct {
	Name   string `yaml:"name"`
	Preset string `yaml:"preset"`
	Tenant string `yaml:"tenant"`
	// Vendor is the vendor its rows name (default: the preset's name).
	Vendor string `yaml:"vendor"`
	// Secrets hold what the vendor's dashboard shows; several while one
	// rotates. The preset says the encoding.
	Secrets []string `yaml:"secrets" secret:"true"`
	// URL is the public URL the vendor calls and signs (Square, Twilio,
	// HubSpot): configured, never taken from the request's Host.
	URL         string        `yaml:"url"`
	LocalIDPath string        `yaml:"local_id_path"`
	Tolerance   time.Duration `yaml:"tolerance"`

	// The verifier's knobs (docs/architecture.md §7a).
	Scheme      string           `yaml:"scheme"`
	Hash        string           `yaml:"hash"`
	KeyEncoding string           `yaml:"key_encoding"`
	Signed      string           `yaml:"signed"`
	Signature   WebhookSignature `yaml:"signature"`
	Timestamp   WebhookTimestamp `yaml:"timestamp"`
	Body        string           `yaml:"body"`
	Batch       string           `yaml:"batch"`
	EventID     []string         `yaml:"event_id"`
	EventType   []string         `yaml:"event_type"`
	ObjectID    []string         `yaml:"object_id"`
	Outcome     WebhookOutcome   `yaml:"outcome"`
	Replay      string           `yaml:"replay"`
	// RejectEmptyBody refuses an empty body (default true).
	RejectEmptyBody bool       `yaml:"reject_empty_body"`
	Ack             WebhookAck `yaml:"ack"`
	Challenge       string     `yaml:"challenge"`
	// Types is the endpoint's default event table (event_types wins).
	Types map[string]matcher.Action `yaml:"types"`
}

// WebhookSignature says where a signature is and how it is written.
type WebhookSignature struct {
	Source    string `yaml:"source"`
	Encoding  string `yaml:"encoding"`
	Prefix    string `yaml:"prefix"`
	Separator string `yaml:"separator"`
}

// WebhookTimestamp says where the signed timestamp is (its tolerance is
// the endpoint's tolerance).
type WebhookTimestamp struct {
	Source string `yaml:"source"`
	Unit   string `yaml:"unit"`
}

// WebhookOutcome is where the vendor puts the outcome in the payload.
type WebhookOutcome struct {
	Path      string   `yaml:"path"`
	Failed    []string `yaml:"failed"`
	Succeeded []string `yaml:"succeeded"`
}

// WebhookAck is the body an accepted delivery is answered with.
type WebhookAck struct {
	Body        string `yaml:"body"`
	ContentType string `yaml:"content_type"`
}

func (e *WebhookEndpoint) setDefaults() {
	e.RejectEmptyBody = true
}

// webhookFamily is the route family of an endpoint.
func (e WebhookEndpoint) webhookFamily() string {
	if e.Preset == "" {
		return "custom"
	}
	return e.Preset
}

// webhookVendor is the vendor an endpoint's rows name.
func (e WebhookEndpoint) webhookVendor() string {
	if e.Vendor != "" {
		return e.Vendor
	}
	return e.Preset
}

// webhooks checks the webhooks: list as far as the configuration can: the
// preset's and the knobs' meaning is checked by serve when it builds the
// endpoints (a preset is a data file of the webhooks package).
func (v *validator) webhooks(eps []WebhookEndpoint, known map[string]bool, inboxRetention time.Duration) {
	names := map[string]map[string]string{} // family → name → path
	for i, e := range eps {
		p := fmt.Sprintf("webhooks[%d]", i)
		family := e.webhookFamily()
		if names[family] == nil {
			names[family] = map[string]string{}
		}
		switch family {
		case "stripe", "paypal", "standard":
			v.add(p+".preset", "%q has its own section (%s:), not a preset", family, family)
		}
		if e.Preset == "" && e.Scheme == "" {
			v.add(p+".preset", "endpoint %q names no preset and no scheme", yamlnode.Truncate(e.Name, 40))
		}
		v.endpoint(p, e.Name, e.Tenant, names[family], known)
		v.secrets(p, e.Name, e.Secrets, nil)
		if vendor := e.webhookVendor(); ledger.ValidateVendor(vendor) != nil {
			v.add(p+".vendor", "invalid vendor %q: want 1-64 of [a-z0-9_-] (set vendor: when the preset's name is not one)", yamlnode.Truncate(vendor, 40))
		}
		if e.URL != "" {
			if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				v.add(p+".url", "want the absolute http(s) URL the vendor calls")
			}
		}
		v.nonNegative(p+".tolerance", e.Tolerance)
		if e.Tolerance > inboxRetention {
			// The inbox forgets an event id, and a Mailgun token, after
			// inbox_retention: a delivery the tolerance still admits could
			// then be replayed.
			v.add(p+".tolerance", "%s is longer than inbox_retention (%s): an event id or signature token would be forgotten while its delivery is still accepted",
				formatDuration(e.Tolerance), formatDuration(inboxRetention))
		}
		for _, typ := range sortedKeys(e.Types) {
			if a := e.Types[typ]; !a.Valid() {
				v.add(yamlnode.MapPath(p+".types", typ), "invalid action %q: want succeeded, failed, progress or ignore", yamlnode.Truncate(string(a), 40))
			}
		}
	}
}

// cloneWebhooks copies the webhooks: list deeply.
func cloneWebhooks(eps []WebhookEndpoint) []WebhookEndpoint {
	out := slices.Clone(eps)
	for i := range out {
		e := &out[i]
		e.Secrets = slices.Clone(e.Secrets)
		e.EventID, e.EventType, e.ObjectID = slices.Clone(e.EventID), slices.Clone(e.EventType), slices.Clone(e.ObjectID)
		e.Outcome.Failed, e.Outcome.Succeeded = slices.Clone(e.Outcome.Failed), slices.Clone(e.Outcome.Succeeded)
		if e.Types != nil {
			types := make(map[string]matcher.Action, len(e.Types))
			for k, a := range e.Types {
				types[k] = a
			}
			e.Types = types
		}
	}
	return out
}

// fillInWebhooks: an endpoint's name is "default" and its tenant the only
// tenant, as for the other sections.
func fillInWebhooks(eps []WebhookEndpoint, fill func(name, tenant *string)) {
	for i := range eps {
		fill(&eps[i].Name, &eps[i].Tenant)
	}
}
