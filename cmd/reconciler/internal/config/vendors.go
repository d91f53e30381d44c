package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/vendors"
)

// VendorList is the `vendors:` list: one vendor profile per entry, each
// merged with its preset (package vendors decodes, merges and validates
// it, naming file and line).
type VendorList []vendors.Profile

// decodeNode reads the list with vendors.Load: ${VAR} expanded as
// everywhere in the file, every problem a config *Error at its line.
func (l *VendorList) decodeNode(n *yaml.Node, o *origin, getenv func(string) string) []error {
	ps, err := vendors.Load(n, vendors.Options{
		File: o.file, Path: "vendors",
		Expand: func(s string) (string, error) {
			out, missing, err := expandEnv(s, getenv)
			if err != nil {
				return "", err
			}
			if len(missing) > 0 {
				return "", fmt.Errorf("${%s} is not set in the environment", missing[0])
			}
			return out, nil
		},
	})
	*l = ps
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range flatten(err) {
		var ve *vendors.Error
		if !errors.As(e, &ve) {
			out = append(out, e)
			continue
		}
		where := ve.Pos.String()
		if ve.Pos.File == "" && o.file != "" {
			where = o.at(ve.Pos.Line)
		}
		line := ve.Pos.Line
		if ve.Pos.File != o.file {
			line = n.Line // a preset's line: sort it with the list
		}
		out = append(out, &Error{Where: where, Path: ve.Path, Msg: ve.Msg, line: line})
	}
	return out
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Profile returns the vendor profile of name: a `vendors:` entry, else
// one read from a `standard:` webhook endpoint whose vendor it is (its
// replay_window, the Idempotency-Key header, no API: the resolver pages
// after the window), else false.
func (c Config) Profile(name string) (vendors.Profile, bool) {
	for _, p := range c.Vendors {
		if p.Name == name {
			return p, true
		}
	}
	for _, e := range c.Standard.Endpoints {
		if e.Vendor == name {
			return standardProfile(e), true
		}
	}
	return vendors.Profile{}, false
}

// Profiles lists every vendor profile: the `vendors:` entries, then the
// `standard:` endpoints' vendors that no entry names (once each).
func (c Config) Profiles() []vendors.Profile {
	out := append([]vendors.Profile(nil), c.Vendors...)
	seen := map[string]bool{}
	for _, p := range c.Vendors {
		seen[p.Name] = true
	}
	for _, e := range c.Standard.Endpoints {
		if e.Vendor == "" || seen[e.Vendor] {
			continue
		}
		seen[e.Vendor] = true
		out = append(out, standardProfile(e))
	}
	return out
}

// standardProfile is a `standard:` endpoint read as a profile: what it
// always meant, a window for claims and no lookup.
func standardProfile(e StandardEndpoint) vendors.Profile {
	return vendors.Profile{
		Name:         e.Vendor,
		Idempotency:  vendors.Idempotency{Header: "Idempotency-Key"},
		MaxKeyLen:    ledger.MaxKeyLen,
		KeyFormat:    vendors.FormatPrintable,
		ReplayWindow: vendors.Window(e.ReplayWindow),
	}
}

// VendorKey is api.Options.VendorKey: the key sent to vendor for a ledger
// key, by its profile (the key itself for a vendor without one: Stripe
// and PayPal take any ledger key).
func (c Config) VendorKey(vendor, key string) string {
	if p, ok := c.Profile(vendor); ok {
		return p.VendorKey(key)
	}
	return key
}

// profileWindow is a profiled vendor's replay window for claims.
func (c Config) profileWindow(vendor string) (time.Duration, bool) {
	p, ok := c.Profile(vendor)
	if !ok {
		return 0, false
	}
	return p.EffectiveWindow(), true
}

// validateVendors checks what spans the list and the rest of the file: a
// profile may not take the name of a vendor with code of its own.
func (v *validator) vendors(c Config) {
	for i, p := range c.Vendors {
		switch p.Name {
		case "stripe", "paypal":
			v.add(fmt.Sprintf("vendors[%d].name", i), "%s has its own block (%s:), not a profile", p.Name, p.Name)
		}
		for j, e := range c.Standard.Endpoints {
			if e.Vendor == p.Name && v.o.line(fmt.Sprintf("standard.endpoints[%d].replay_window", j)) > 0 &&
				vendors.Window(e.ReplayWindow) != p.ReplayWindow {
				v.add(fmt.Sprintf("standard.endpoints[%d].replay_window", j),
					"vendor %s has a profile (vendors[%d]) with replay_window %s: set it there only", p.Name, i, strings.TrimSpace(p.ReplayWindow.String()))
			}
		}
	}
}
