package vendors

import (
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// Redacted is the placeholder of a secret in Redacted, String and logs.
const Redacted = "REDACTED"

// Redacted returns a copy with every secret replaced: api_key, the value of
// auth (a preset's template keeps its shape, "Bearer {api_key}"; any other
// value is replaced whole) and a password in api_base.
func (p Profile) Redacted() Profile {
	c := p.Clone()
	if c.APIKey != "" {
		c.APIKey = Redacted
	}
	if c.Auth != nil && c.Auth.Value != "" {
		if p.APIKey == "" || !strings.Contains(c.Auth.Value, "{api_key}") {
			c.Auth.Value = Redacted
		}
	}
	if u, err := url.Parse(c.APIBase); err == nil && u.User != nil {
		u.User = url.User(Redacted)
		c.APIBase = u.String()
	}
	return c
}

// Clone is a deep copy.
func (p Profile) Clone() Profile {
	c := p
	if p.Auth != nil {
		a := *p.Auth
		c.Auth = &a
	}
	c.ResultStatusMap = maps.Clone(p.ResultStatusMap)
	c.ReplayOutcomes = slices.Clone(p.ReplayOutcomes)
	if p.Lookup != nil {
		l := *p.Lookup
		l.StatusMap = maps.Clone(p.Lookup.StatusMap)
		c.Lookup = &l
	}
	if p.Retrieve != nil {
		r := *p.Retrieve
		r.StatusMap = maps.Clone(p.Retrieve.StatusMap)
		c.Retrieve = &r
	}
	return c
}

// String is a one-line summary with no secret: name, preset, placement,
// window and lookup.
func (p Profile) String() string {
	preset := p.Preset
	if preset == "" {
		preset = "-"
	}
	return fmt.Sprintf("%s (preset %s, key %s, window %s, lookup %s)", p.Name, preset, p.Idempotency, p.ReplayWindow, yesNo(p.Lookup != nil))
}

// GoString keeps %#v free of secrets too.
func (p Profile) GoString() string { return p.String() }

// LogValue logs the redacted profile's main fields.
func (p Profile) LogValue() slog.Value {
	r := p.Redacted()
	return slog.GroupValue(
		slog.String("name", r.Name), slog.String("preset", r.Preset), slog.String("api_base", r.APIBase),
		slog.String("idempotency", r.Idempotency.String()), slog.String("replay_window", r.ReplayWindow.String()),
		slog.Bool("lookup", r.Lookup != nil), slog.Bool("retrieve", r.Retrieve != nil),
	)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
