package webhooks

import (
	"bytes"
	"embed"
	"fmt"
	"io"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/matcher"
)

// Spec declares how a vendor signs and shapes its deliveries: a preset file
// in presets/, or the knobs of an endpoint that names no preset (or
// overrides some of its preset's). The engine that runs a Spec knows no
// vendor's name.
type Spec struct {
	// Scheme: hmac | ecdsa_p256_sha256 | basic_auth | standard_webhooks,
	// or twilio | adyen, the two schemes a template cannot express.
	Scheme string `yaml:"scheme"`
	// Hash of an hmac scheme: sha256 (default), sha1 or sha512.
	Hash string `yaml:"hash"`
	// KeyEncoding says how a secret becomes key bytes: utf8 (default),
	// hex, base64 or whsec (whsec_<base64>). ecdsa_p256_sha256 keys are
	// base64 DER public keys whatever it says.
	KeyEncoding string `yaml:"key_encoding"`
	// Signed is the template of the signed bytes (see template): {body},
	// v0:{ts}:{body}, {url}{body}, {method}{url}{body}{ts}, ….
	Signed    string        `yaml:"signed"`
	Signature SignatureSpec `yaml:"signature"`
	Timestamp TimestampSpec `yaml:"timestamp"`
	// Body is how the body decodes for {json:…}: json (default), form, or
	// auto (JSON when it starts with { or [, else a form).
	Body string `yaml:"body"`
	// Batch is the path of a batch's elements: "[]" for a top-level array,
	// "notificationItems[].NotificationRequestItem" for an array under a
	// key with each element's object under another. Empty: one event.
	Batch string `yaml:"batch"`
	// EventID, EventType and ObjectID are alternatives, tried in order;
	// the first whose placeholders all have values wins. {json:…} reads
	// the element in a batch.
	EventID   []string `yaml:"event_id"`
	EventType []string `yaml:"event_type"`
	ObjectID  []string `yaml:"object_id"`
	// LocalIDPath is where the delivery carries metadata_local_id back: a
	// dotted JSON path (relative to each element in a batch), or
	// query:<name>, a query parameter of the signed URL.
	LocalIDPath string `yaml:"local_id_path"`
	// Outcome reads the vendor's verdict from the payload.
	Outcome OutcomeSpec `yaml:"outcome"`
	// Replay caches a value of each delivery (Mailgun's signature token) for
	// the tolerance: the same value with another body is refused.
	Replay string `yaml:"replay"`
	// RejectEmptyBody refuses an empty body (default true).
	RejectEmptyBody *bool `yaml:"reject_empty_body"`
	// BodyUnsigned marks a scheme whose signature does not cover the
	// event (Mailgun): the body is a hint (docs/architecture.md §7a).
	BodyUnsigned bool    `yaml:"body_unsigned"`
	Ack          AckSpec `yaml:"ack"`
	// Challenge is the path of a verification handshake's challenge
	// (Slack's url_verification): a signed delivery carrying it is answered
	// with its value and stores nothing.
	Challenge string `yaml:"challenge"`
	// Types is the preset's default event table: event type → succeeded,
	// failed, progress or ignore. The config's event_types override it.
	Types map[string]matcher.Action `yaml:"types"`
	// Doc is the preset's one-line description (README table).
	Doc string `yaml:"doc"`
}

// SignatureSpec says where the signature is and how it is written.
type SignatureSpec struct {
	// Source: header:<Name> or json:<path>.
	Source string `yaml:"source"`
	// Encoding: hex or base64.
	Encoding string `yaml:"encoding"`
	// Prefix each signature carries (sha256=, v0=, v1,); an entry without
	// it is skipped.
	Prefix string `yaml:"prefix"`
	// Separator splits several signatures in one value (" " or ",").
	Separator string `yaml:"separator"`
}

// TimestampSpec says where the signed timestamp is.
type TimestampSpec struct {
	// Source: header:<Name> or json:<path>; empty when the scheme has none.
	Source string `yaml:"source"`
	// Unit: s (default), ms or iso8601.
	Unit string `yaml:"unit"`
	// Tolerance bounds the timestamp's age and its lead into the future.
	// Zero: not checked (the vendor documents no window).
	Tolerance time.Duration `yaml:"tolerance"`
}

// OutcomeSpec: where the vendor puts the outcome in the payload.
type OutcomeSpec struct {
	// Path of the value, relative to the element.
	Path string `yaml:"path"`
	// Failed values make the event a failure whatever its type maps to.
	Failed []string `yaml:"failed"`
	// Succeeded values make a progress or succeeded type a success.
	Succeeded []string `yaml:"succeeded"`
}

// AckSpec is the answer to an accepted delivery. Empty: the JSON
// {"result": …} every endpoint answers.
type AckSpec struct {
	Body        string `yaml:"body"`
	ContentType string `yaml:"content_type"`
}

// The schemes.
const (
	SchemeHMAC             = "hmac"
	SchemeECDSA            = "ecdsa_p256_sha256"
	SchemeBasicAuth        = "basic_auth"
	SchemeStandardWebhooks = "standard_webhooks"
	SchemeTwilio           = "twilio"
	SchemeAdyen            = "adyen"
)

//go:embed presets/*.yaml
var presetFiles embed.FS

var (
	presetsOnce sync.Once
	presets     map[string]Spec
	presetsErr  error
)

// Presets returns the embedded presets by name (a fresh copy).
func Presets() (map[string]Spec, error) {
	presetsOnce.Do(func() { presets, presetsErr = loadPresets() })
	if presetsErr != nil {
		return nil, presetsErr
	}
	out := make(map[string]Spec, len(presets))
	for k, v := range presets {
		out[k] = v.clone()
	}
	return out, nil
}

func loadPresets() (map[string]Spec, error) {
	files, err := presetFiles.ReadDir("presets")
	if err != nil {
		return nil, err
	}
	out := map[string]Spec{}
	for _, f := range files {
		name := strings.TrimSuffix(f.Name(), ".yaml")
		data, err := presetFiles.ReadFile(path.Join("presets", f.Name()))
		if err != nil {
			return nil, err
		}
		s, err := ParseSpec(data)
		if err != nil {
			return nil, fmt.Errorf("webhooks: preset %s: %w", f.Name(), err)
		}
		if _, err := s.compile("", nil); err != nil {
			return nil, fmt.Errorf("webhooks: preset %s: %w", f.Name(), err)
		}
		out[name] = s
	}
	return out, nil
}

// ParseSpec decodes a preset file, refusing unknown keys.
func ParseSpec(data []byte) (Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil && err != io.EOF {
		return Spec{}, err
	}
	return s, nil
}

func (s Spec) clone() Spec {
	s.EventID = slices.Clone(s.EventID)
	s.EventType = slices.Clone(s.EventType)
	s.ObjectID = slices.Clone(s.ObjectID)
	s.Outcome.Failed = slices.Clone(s.Outcome.Failed)
	s.Outcome.Succeeded = slices.Clone(s.Outcome.Succeeded)
	s.Types = maps.Clone(s.Types)
	return s
}

// overlay returns s with every non-zero knob of o in place of its own.
func (s Spec) overlay(o Spec) Spec {
	s = s.clone()
	str := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	str(&s.Scheme, o.Scheme)
	str(&s.Hash, o.Hash)
	str(&s.KeyEncoding, o.KeyEncoding)
	str(&s.Signed, o.Signed)
	str(&s.Signature.Source, o.Signature.Source)
	str(&s.Signature.Encoding, o.Signature.Encoding)
	str(&s.Signature.Prefix, o.Signature.Prefix)
	str(&s.Signature.Separator, o.Signature.Separator)
	str(&s.Timestamp.Source, o.Timestamp.Source)
	str(&s.Timestamp.Unit, o.Timestamp.Unit)
	if o.Timestamp.Tolerance != 0 {
		s.Timestamp.Tolerance = o.Timestamp.Tolerance
	}
	str(&s.Body, o.Body)
	str(&s.Batch, o.Batch)
	if len(o.EventID) > 0 {
		s.EventID = slices.Clone(o.EventID)
	}
	if len(o.EventType) > 0 {
		s.EventType = slices.Clone(o.EventType)
	}
	if len(o.ObjectID) > 0 {
		s.ObjectID = slices.Clone(o.ObjectID)
	}
	str(&s.LocalIDPath, o.LocalIDPath)
	if o.Outcome.Path != "" {
		s.Outcome = OutcomeSpec{Path: o.Outcome.Path, Failed: slices.Clone(o.Outcome.Failed), Succeeded: slices.Clone(o.Outcome.Succeeded)}
	}
	str(&s.Replay, o.Replay)
	if o.RejectEmptyBody != nil {
		v := *o.RejectEmptyBody
		s.RejectEmptyBody = &v
	}
	s.BodyUnsigned = s.BodyUnsigned || o.BodyUnsigned
	str(&s.Ack.Body, o.Ack.Body)
	str(&s.Ack.ContentType, o.Ack.ContentType)
	str(&s.Challenge, o.Challenge)
	for k, v := range o.Types {
		if s.Types == nil {
			s.Types = map[string]matcher.Action{}
		}
		s.Types[k] = v
	}
	return s
}

// verifier is a compiled Spec: what one endpoint runs per delivery.
type verifier struct {
	scheme    string
	newHash   func() hashFunc
	keys      [][]byte
	ecdsaKeys []ecdsaKey
	basic     [][32]byte
	signed    template
	sig       sigSource
	ts        tsSource
	tolerance time.Duration
	body      string
	batch     batchPath
	eventID   alternatives
	eventType alternatives
	objectID  alternatives
	// localID is a JSON path, or localQuery a query parameter.
	localID, localQuery string
	outcome             OutcomeSpec
	replay              template
	rejectEmpty         bool
	url                 string
	ack                 AckSpec
	challenge           string
}

type sigSource struct {
	header, json      string
	encoding          string
	prefix, separator string
}

type tsSource struct {
	header, json string
	unit         string
}

// compile checks a Spec with the endpoint's url and secrets and builds its
// verifier. Errors name the knob; a secret is never quoted. With nil
// secrets it only checks the Spec (a preset file on its own).
func (s Spec) compile(rawURL string, secrets []string) (*verifier, error) {
	v := &verifier{scheme: s.Scheme, tolerance: s.Timestamp.Tolerance, body: s.Body, url: rawURL, ack: s.Ack, outcome: s.Outcome, challenge: s.Challenge}
	if v.body == "" {
		v.body = "json"
	}
	switch v.body {
	case "json", "form", "auto":
	default:
		return nil, fmt.Errorf("body: want json, form or auto, got %q", s.Body)
	}
	v.rejectEmpty = s.RejectEmptyBody == nil || *s.RejectEmptyBody
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("url: want the absolute http(s) URL the vendor calls")
		}
	}
	eventPart := func(k partKind) bool { return k != partBody && k != partTS && k != partURL && k != partMethod }
	var err error
	if v.eventID, err = parseAlternatives(s.EventID, eventPart); err != nil {
		return nil, fmt.Errorf("event_id: %w", err)
	}
	if len(v.eventID) == 0 {
		return nil, fmt.Errorf("event_id: need at least one template (the id the vendor keeps across retries)")
	}
	if v.eventType, err = parseAlternatives(s.EventType, eventPart); err != nil {
		return nil, fmt.Errorf("event_type: %w", err)
	}
	if len(v.eventType) == 0 {
		return nil, fmt.Errorf("event_type: need at least one template")
	}
	if v.objectID, err = parseAlternatives(s.ObjectID, eventPart); err != nil {
		return nil, fmt.Errorf("object_id: %w", err)
	}
	if q, ok := strings.CutPrefix(s.LocalIDPath, "query:"); ok {
		if q == "" {
			return nil, fmt.Errorf("local_id_path: query: needs a parameter name")
		}
		if s.Scheme != SchemeTwilio {
			// Only Twilio's scheme signs the query the request arrives with.
			return nil, fmt.Errorf("local_id_path: query:%s needs a scheme that signs the request's query (twilio)", q)
		}
		v.localQuery = q
	} else {
		v.localID = s.LocalIDPath
	}
	if v.batch, err = parseBatch(s.Batch); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	if s.Replay != "" {
		if v.replay, err = parseTemplate(s.Replay, eventPart); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
	}
	for _, a := range s.Types {
		if !a.Valid() {
			return nil, fmt.Errorf("types: invalid action %q: want succeeded, failed, progress or ignore", a)
		}
	}
	if v.ts, err = parseTSSource(s.Timestamp); err != nil {
		return nil, err
	}
	if v.tolerance < 0 {
		return nil, fmt.Errorf("tolerance: must not be negative")
	}
	if s.Timestamp.Source == "" && s.Scheme != SchemeStandardWebhooks {
		// "tolerance: where the scheme has a timestamp": on one without
		// (Square, GitHub) it has nothing to bound.
		v.tolerance = 0
	}
	if len(v.replay) > 0 && v.tolerance <= 0 {
		return nil, fmt.Errorf("replay: needs a timestamp and its tolerance (the cache keeps values that long)")
	}
	if err := v.compileScheme(s, secrets); err != nil {
		return nil, err
	}
	return v, nil
}

func parseTSSource(t TimestampSpec) (tsSource, error) {
	var ts tsSource
	ts.unit = t.Unit
	if ts.unit == "" {
		ts.unit = "s"
	}
	switch ts.unit {
	case "s", "ms", "iso8601":
	default:
		return ts, fmt.Errorf("timestamp.unit: want s, ms or iso8601, got %q", t.Unit)
	}
	if t.Source == "" {
		return ts, nil
	}
	kind, arg, _ := strings.Cut(t.Source, ":")
	switch {
	case kind == "header" && arg != "":
		ts.header = arg
	case kind == "json" && arg != "":
		ts.json = arg
	default:
		return ts, fmt.Errorf("timestamp.source: want header:<Name> or json:<path>, got %q", t.Source)
	}
	return ts, nil
}

// batchPath locates a batch's elements: array is the path to the array
// ("" for the top level), item the path inside each element ("" for the
// element itself).
type batchPath struct {
	on          bool
	array, item string
}

func parseBatch(s string) (batchPath, error) {
	if s == "" {
		return batchPath{}, nil
	}
	array, item, ok := strings.Cut(s, "[]")
	if !ok || strings.Contains(item, "[]") {
		return batchPath{}, fmt.Errorf("want <path>[]<.path> with one [], got %q", s)
	}
	item = strings.TrimPrefix(item, ".")
	if strings.HasPrefix(item, ".") || strings.HasSuffix(array, ".") && len(array) == 1 {
		return batchPath{}, fmt.Errorf("malformed path %q", s)
	}
	return batchPath{on: true, array: strings.TrimSuffix(array, "."), item: item}, nil
}

// maxBatch bounds the events of one delivery (SendGrid sends up to a few
// thousand small ones; the body limit bounds them anyway).
const maxBatch = 10000

// elements returns a batch's elements; a delivery that is not a batch is
// its own single element.
func (b batchPath) elements(doc any) ([]any, error) {
	if !b.on {
		return []any{doc}, nil
	}
	node := doc
	if b.array != "" {
		node = lookupNode(doc, b.array)
	}
	arr, ok := node.([]any)
	if _, obj := node.(map[string]any); obj && b.array == "" && b.item == "" {
		// A top-level batch of one sent as a bare object.
		arr, ok = []any{node}, true
	}
	if !ok {
		return nil, fmt.Errorf("%w: batch: no array at %q", ErrUnparsable, b.array)
	}
	if len(arr) == 0 || len(arr) > maxBatch {
		return nil, fmt.Errorf("%w: batch of %d elements (want 1-%d)", ErrUnparsable, len(arr), maxBatch)
	}
	out := make([]any, len(arr))
	for i, el := range arr {
		if b.item != "" {
			el = lookupNode(el, b.item)
		}
		if _, ok := el.(map[string]any); !ok {
			return nil, fmt.Errorf("%w: batch element %d is not an object", ErrUnparsable, i)
		}
		out[i] = el
	}
	return out, nil
}

// lookupNode returns the node at a dotted path, or nil.
func lookupNode(doc any, p string) any {
	node := doc
	for step := range strings.SplitSeq(p, ".") {
		switch n := node.(type) {
		case map[string]any:
			node = n[step]
		case []any:
			node = arrayStep(n, step)
		default:
			return nil
		}
	}
	return node
}

// defaultTypes adds a preset's event table under vendor to t, below what t
// already names (the config's event_types win).
func defaultTypes(t matcher.Table, vendor string, types map[string]matcher.Action) {
	for typ, a := range types {
		if _, set := t[vendor][typ]; !set {
			t.Set(vendor, typ, a)
		}
	}
}
