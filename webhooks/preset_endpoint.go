package webhooks

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/matcher"
)

// PresetEndpoint is one endpoint of the webhooks: list, served at
// POST /webhooks/{Preset}/{Name} (POST /webhooks/custom/{Name} when it names
// no preset and declares its scheme with Spec alone).
type PresetEndpoint struct {
	Name   string
	Preset string
	Tenant string
	// Vendor is the ledger vendor of its rows (default: the preset's name).
	Vendor string
	// Secrets hold what the vendor's dashboard shows; several while one
	// rotates. The scheme says how they are read (Spec.KeyEncoding).
	Secrets []string
	// URL is the public URL the vendor calls and signs (Square, HubSpot,
	// Twilio): configured, never taken from the request's Host.
	URL string
	// LocalIDPath and Tolerance override the preset's.
	LocalIDPath string
	Tolerance   time.Duration
	// Spec overrides the preset's knobs (non-zero fields), or declares
	// the whole scheme of an endpoint with no preset.
	Spec Spec
}

// FamilyCustom is the route family of an endpoint that names no preset.
const FamilyCustom = "custom"

// verified is one event of a delivery and the action its payload forces,
// if any ("" lets the event table decide).
type verified struct {
	ev     Event
	action matcher.Action
	// token is the delivery's replay value (Mailgun's signature token),
	// recorded by the store beside the event (ledger.Delivery.ReplayToken)
	// so a replay is refused at every replica; "" for a batch.
	token string
}

// presetEndpoint builds the endpoint of one PresetEndpoint: its route
// family, and its vendor's default event table.
func presetEndpoint(pe PresetEndpoint, known map[string]Spec) (*endpoint, string, map[string]matcher.Action, error) {
	family := pe.Preset
	spec := Spec{}
	if family == "" {
		family = FamilyCustom
	} else {
		p, ok := known[pe.Preset]
		if !ok {
			return nil, "", nil, fmt.Errorf("webhooks: endpoint %q: unknown preset %q (known: %s)", pe.Name, pe.Preset, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		spec = p
	}
	spec = spec.overlay(pe.Spec)
	if pe.LocalIDPath != "" {
		spec.LocalIDPath = pe.LocalIDPath
	}
	if pe.Tolerance != 0 {
		spec.Timestamp.Tolerance = pe.Tolerance
	}
	vendor := pe.Vendor
	if vendor == "" {
		vendor = pe.Preset
	}
	where := fmt.Sprintf("webhooks: endpoint %q (%s)", pe.Name, family)
	if vendor == "" {
		return nil, "", nil, fmt.Errorf("%s: vendor: required when no preset is named", where)
	}
	secrets := pe.Secrets
	if secrets == nil {
		secrets = []string{}
	}
	v, err := spec.compile(pe.URL, secrets)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%s: %w", where, err)
	}
	e := &endpoint{name: pe.Name, tenant: pe.Tenant, vendor: vendor, ack: v.ack, bodyUnsigned: spec.BodyUnsigned}
	var cache *replayCache
	if len(v.replay) > 0 {
		cache = newReplayCache(v.tolerance)
	}
	e.acceptMany = func(_ context.Context, req *http.Request, body []byte, now time.Time) ([]verified, error) {
		return v.accept(req, body, now, cache)
	}
	return e, family, spec.Types, nil
}

// accept verifies one delivery and decodes its events (one per element of
// a batch). Any failure refuses the whole delivery.
func (v *verifier) accept(req *http.Request, body []byte, now time.Time, cache *replayCache) ([]verified, error) {
	if len(body) == 0 && v.rejectEmpty {
		return nil, fmt.Errorf("%w: empty body", ErrUnparsable)
	}
	r := &request{method: req.Method, header: req.Header, body: body}
	r.url, r.query = v.signedURL(req.URL.RawQuery)
	// The body is decoded before the signature is checked only when the
	// signature needs it (Mailgun's lives in it, Adyen signs each item), so
	// a forged body is said to be badly signed rather than unparsable.
	var doc any
	var elems []any
	decode := func() error {
		var err error
		if doc, err = v.decodeBody(body, r.query); err != nil {
			return err
		}
		r.doc = doc
		elems, err = v.batch.elements(doc)
		return err
	}
	early := v.needsDoc()
	if early {
		if err := decode(); err != nil {
			return nil, err
		}
	}
	r.ts = v.timestampOf(r)
	if err := v.verifySignature(r, elems, now); err != nil {
		return nil, err
	}
	// A timestamp in a header is checked before the body is decoded, so
	// an authentic but stale delivery is said to be stale whatever its
	// body; one in the body (Linear, Mailgun) once it is decoded.
	tsChecked := v.ts.header != ""
	if tsChecked {
		if err := v.checkTimestamp(r, now); err != nil {
			return nil, err
		}
	}
	if !early {
		if err := decode(); err != nil {
			return nil, err
		}
		r.ts = v.timestampOf(r)
	}
	if !tsChecked {
		if err := v.checkTimestamp(r, now); err != nil {
			return nil, err
		}
	}
	if v.challenge != "" {
		if c, ok := lookupScalar(doc, v.challenge); ok && c != "" {
			return nil, &challengeReply{value: c}
		}
	}
	var token string
	if cache != nil {
		var ok bool
		token, ok = v.replay.resolve(r, doc, 0)
		if !ok {
			return nil, fmt.Errorf("%w: no replay token", ErrBadSignature)
		}
		if !cache.check(token, r.bodySHA256(), now) {
			return nil, fmt.Errorf("%w: signature token seen before with another body", ErrBadSignature)
		}
	}
	out := make([]verified, 0, len(elems))
	for i, el := range elems {
		vf, err := v.event(r, el, i)
		if err != nil {
			if v.batch.on {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			return nil, err
		}
		if len(elems) == 1 {
			vf.token = token
		}
		out = append(out, vf)
	}
	return out, nil
}

func (r *request) bodySHA256() string {
	s, _ := part{kind: partBodySHA256}.value(r, nil, 0)
	return s
}

// decodeBody decodes the body for {json:…}: JSON, or a form as a map of
// each name's first value. An empty body (where allowed) is an empty
// object.
func (v *verifier) decodeBody(body []byte, query url.Values) (any, error) {
	if len(body) == 0 {
		return map[string]any{}, nil
	}
	format := v.body
	if v.scheme == SchemeTwilio && query.Get("bodySHA256") != "" {
		format = "json"
	}
	if format == "auto" {
		format = "form"
		if c := firstNonSpace(body); c == '{' || c == '[' {
			format = "json"
		}
	}
	if format == "form" {
		return decodeForm(body)
	}
	var doc any
	if err := decodeEvent(body, &doc); err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrUnparsable, err)
	}
	return doc, nil
}

// decodeForm decodes an application/x-www-form-urlencoded body into a map
// of each name's first value (twilio-go reads the first value too).
func decodeForm(body []byte) (map[string]any, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: form body: %v", ErrUnparsable, err)
	}
	out := make(map[string]any, len(form))
	for k, vals := range form {
		if len(vals) > 0 {
			out[k] = vals[0]
		}
	}
	return out, nil
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// event decodes one element into an Event and the action its payload
// forces.
func (v *verifier) event(r *request, el any, i int) (verified, error) {
	ev := Event{
		ID:       v.eventID.first(r, el, i),
		Type:     v.eventType.first(r, el, i),
		ObjectID: v.objectID.first(r, el, i),
		Raw:      r.body,
	}
	if ev.ID == "" {
		return verified{}, fmt.Errorf("%w: no event id", ErrUnparsable)
	}
	if ev.Type == "" {
		return verified{}, fmt.Errorf("%w: no event type", ErrUnparsable)
	}
	switch {
	case v.localQuery != "":
		ev.LocalID = r.query.Get(v.localQuery)
	case v.localID != "":
		ev.LocalID, _ = lookupScalar(el, v.localID)
	}
	if !isLocalID(ev.LocalID) {
		// The places presets read are shared with other integrations
		// (Adyen's merchantReference, Zendesk's external_id, a HubSpot
		// property's value): a value that is not one of ours joins no row
		// and is not parked as an orphan either.
		ev.LocalID = ""
	}
	var action matcher.Action
	if v.outcome.Path != "" {
		if val, ok := lookupScalar(el, v.outcome.Path); ok {
			switch {
			case slices.Contains(v.outcome.Failed, val):
				action = matcher.Failed
			case slices.Contains(v.outcome.Succeeded, val):
				action = matcher.Succeeded
			}
		}
	}
	return verified{ev: ev, action: action}, nil
}

// match builds the delivery of one verified event: the payload's failure
// wins whatever the type maps to; its success settles a type that maps
// to progress or succeeded, never an ignored one.
func match(tenant string, vf verified, t matcher.Table) ledger.Delivery {
	a := t.Lookup(vf.ev.Vendor, vf.ev.Type)
	switch {
	case vf.action == matcher.Failed:
		a = matcher.Failed
	case vf.action == matcher.Succeeded && (a == matcher.Progress || a == matcher.Succeeded):
		a = matcher.Succeeded
	}
	return matcher.MatchAction(tenant, vf.ev, a)
}

// addPresets builds the preset endpoints, adds their routes and their
// vendors' default event tables (below the configured event_types).
func (h *Handler) addPresets(eps []PresetEndpoint) error {
	known, err := Presets()
	if err != nil {
		return err
	}
	for name := range known {
		if _, taken := h.routes[name]; !taken {
			h.routes[name] = map[string]*endpoint{}
		}
	}
	h.types = cloneTable(h.types)
	for _, pe := range eps {
		e, family, types, err := presetEndpoint(pe, known)
		if err != nil {
			return err
		}
		if err := h.add(family, e); err != nil {
			return err
		}
		defaultTypes(h.types, e.vendor, types)
	}
	return nil
}

// cloneTable copies t, so the caller's table is not changed.
func cloneTable(t matcher.Table) matcher.Table {
	out := make(matcher.Table, len(t))
	for v, types := range t {
		out[v] = maps.Clone(types)
	}
	return out
}

// challengeReply is a verified handshake: answered 200 with value, nothing
// stored.
type challengeReply struct{ value string }

func (c *challengeReply) Error() string { return "verification handshake" }

// isLocalID reports whether s has the shape of a metadata_local_id the
// ledger mints: the prefix and 32 lower-case hex digits.
func isLocalID(s string) bool {
	hexPart, ok := strings.CutPrefix(s, ledger.LocalIDPrefix)
	if !ok || len(hexPart) != 32 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
