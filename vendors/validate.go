package vendors

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/agentledger/reconciler/internal/yamlnode"
	"github.com/agentledger/reconciler/ledger"
)

// placeholders each template may hold.
var (
	lookupVars   = []string{"{local_id}", "{vendor_key}", "{first_seen_unix}"}
	retrieveVars = []string{"{receipt_id}"}
	placeholder  = regexp.MustCompile(`\{[a-z_]+\}`)
	headerName   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// validate checks a merged profile; entry is what the configuration wrote
// (for the rules about what an entry may say without a preset). at locates
// a key.
func validate(p, entry Profile, at func(string) Pos) []*Error {
	var errs []*Error
	add := func(path, format string, args ...any) {
		errs = append(errs, &Error{Pos: at(path), Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if p.Name == "" {
		add("name", "is required")
	} else if ledger.ValidateVendor(p.Name) != nil {
		add("name", "%q is not a vendor name: want [a-z0-9_-], at most 64", yamlnode.Truncate(p.Name, 40))
	}
	if p.APIBase != "" {
		u, err := url.Parse(p.APIBase)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			add("api_base", "want an http(s) URL with a host and no query, such as https://api.example.com")
		}
	}
	if p.APIKey != "" {
		switch {
		case entry.Preset == "":
			add("api_key", "needs a preset, which says where the key goes; a vendor without one uses auth: {header, value}")
		case entry.Auth == nil && (p.Auth == nil || !strings.Contains(p.Auth.Value, "{api_key}")):
			// An entry that writes its own auth may keep api_key for
			// {api_key} in it; a preset's auth must take it.
			add("api_key", "the preset's auth does not take an api_key: set auth: {header, value} instead")
		}
	}
	if a := p.Auth; a != nil {
		if !headerName.MatchString(a.Header) {
			add("auth.header", "want a header name, such as Authorization")
		}
		if a.Value == "" {
			add("auth.value", "is required")
		}
		if strings.Contains(a.Value, "{api_key}") && p.APIKey == "" {
			add("api_key", "is required: the preset's auth places it")
		}
	}
	errs = append(errs, validateIdempotency(p, add)...)
	if p.ReplayWindow > 0 && !p.Idempotency.Places() {
		add("replay_window", "a replay window needs an idempotency placement (header, body or client_id): a vendor that takes no key cannot replay")
	}
	if p.ReceiptPath != "" && !validPath(p.ReceiptPath) {
		add("receipt_path", "want a dotted JSON path such as id or data.id")
	}
	if p.ResultStatusPath != "" && !validPath(p.ResultStatusPath) {
		add("result_status_path", "want a dotted JSON path")
	}
	if len(p.ResultStatusMap) > 0 && p.ResultStatusPath == "" {
		add("result_status_map", "needs result_status_path")
	}
	statusMap("result_status_map", p.ResultStatusMap, add)
	for i, o := range p.ReplayOutcomes {
		path := fmt.Sprintf("replay_outcomes[%d]", i)
		if o.Then == "" {
			add(path+".then", "is required: page, retry, succeeded or failed")
		}
		if o.Status != 0 && (o.Status < 100 || o.Status > 599) {
			add(path+".status", "want an HTTP status (100-599)")
		}
		if o.Status == 0 && o.BodyContains == "" && o.Header == "" {
			add(path, "matches every answer: give a status, body_contains or header")
		}
	}
	if len(p.ReplayOutcomes) > 0 && !p.CanReplay() {
		add("replay_outcomes", "read replay answers, but the vendor is never replayed (no placement or replay_window 0)")
	}
	if l := p.Lookup; l != nil {
		if !p.Callable() {
			add("lookup", "needs api_base")
		}
		method(l.Method, "lookup.method", add)
		if !strings.HasPrefix(l.URL, "/") {
			add("lookup.url", "want a path under api_base, starting with /")
		} else if !containsAny(l.URL+l.Body, lookupVars[:2]) && l.LocalIDPath == "" {
			add("lookup.url", "must contain {local_id} (or {vendor_key}), in the URL or the body; or name local_id_path")
		}
		if bad := unknownVars(l.URL, lookupVars); bad != "" {
			add("lookup.url", "unknown placeholder %s (known: {local_id}, {vendor_key}, {first_seen_unix})", bad)
		}
		for _, f := range []struct{ key, path string }{
			{"lookup.local_id_path", l.LocalIDPath}, {"lookup.group_path", l.GroupPath}, {"lookup.next_path", l.NextPath},
		} {
			if f.path != "" && !validPath(f.path) {
				add(f.key, "want a dotted JSON path")
			}
		}
		if l.MaxPages < 0 || l.MaxPages > 100 {
			add("lookup.max_pages", "want 1 to 100 (0: %d)", DefaultMaxPages)
		}
		if l.MaxPages > 0 && l.NextPath == "" {
			add("lookup.max_pages", "needs next_path")
		}
		switch {
		case l.ResultsPath == "" && l.FoundIDPath != "":
			add("lookup.found_id_path", "found_id_path without results_path: say where the matches are (results_path, $ for the whole answer)")
		case l.ResultsPath == "":
			add("lookup.results_path", "is required: where the answer holds the matches ($ for the whole answer)")
		case l.ResultsPath != "$" && !validPath(l.ResultsPath):
			add("lookup.results_path", "want a dotted JSON path, or $")
		}
		if l.FoundIDPath != "" && !validPath(l.FoundIDPath) {
			add("lookup.found_id_path", "want a dotted JSON path")
		}
		if l.StatusPath != "" && !validPath(l.StatusPath) {
			add("lookup.status_path", "want a dotted JSON path")
		}
		if len(l.StatusMap) > 0 && l.StatusPath == "" {
			add("lookup.status_map", "needs status_path")
		}
		statusMap("lookup.status_map", l.StatusMap, add)
		if l.Retention > 0 && l.Retention <= l.MinAge {
			add("lookup.retention", "must be longer than min_age")
		}
	}
	if r := p.Retrieve; r != nil {
		if !p.Callable() {
			add("retrieve", "needs api_base")
		}
		method(r.Method, "retrieve.method", add)
		if !strings.HasPrefix(r.URL, "/") {
			add("retrieve.url", "want a path under api_base, starting with /")
		} else if !strings.Contains(r.URL, "{receipt_id}") {
			add("retrieve.url", "must contain {receipt_id}")
		}
		if bad := unknownVars(r.URL, retrieveVars); bad != "" {
			add("retrieve.url", "unknown placeholder %s (known: {receipt_id})", bad)
		}
		if r.StatusPath != "" && !validPath(r.StatusPath) {
			add("retrieve.status_path", "want a dotted JSON path")
		}
		if len(r.StatusMap) > 0 && r.StatusPath == "" {
			add("retrieve.status_map", "needs status_path")
		}
		statusMap("retrieve.status_map", r.StatusMap, add)
	}
	if p.Timeout < 0 {
		add("timeout", "must not be negative")
	}
	return errs
}

func validateIdempotency(p Profile, add func(string, string, ...any)) []*Error {
	i := p.Idempotency
	n := 0
	for _, set := range []bool{i.Header != "", i.Body != "", i.ClientID != "", i.None} {
		if set {
			n++
		}
	}
	if n > 1 {
		add("idempotency", "give exactly one of header, body, client_id or none: true")
	}
	if i.Header != "" && !headerName.MatchString(i.Header) {
		add("idempotency.header", "want a header name, such as Idempotency-Key")
	}
	if i.Body != "" && !validPath(i.Body) {
		add("idempotency.body", "want a dotted JSON path, such as idempotency_key")
	}
	if i.ClientID != "" && !validPath(i.ClientID) {
		add("idempotency.client_id", "want a dotted JSON path, such as variables.input.id")
	}
	switch {
	case p.MaxKeyLen == 0:
	case p.KeyFormat == FormatUUID4 && p.MaxKeyLen < 36:
		add("max_key_len", "a uuid4 key is 36 characters")
	case p.MaxKeyLen < MinKeyLen:
		add("max_key_len", "want at least %d: shorter keys would collide", MinKeyLen)
	case p.MaxKeyLen > 4096:
		add("max_key_len", "want at most 4096")
	}
	return nil
}

func method(m, path string, add func(string, string, ...any)) {
	switch m {
	case "", http.MethodGet, http.MethodPost:
	default:
		add(path, "want GET or POST")
	}
}

func statusMap(path string, m map[string]string, add func(string, string, ...any)) {
	for k, v := range m {
		switch v {
		case "succeeded", "failed", "pending":
		default:
			add(yamlnode.MapPath(path, k), "want succeeded, failed or pending")
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// unknownVars returns the first {name} in s that is not among known.
func unknownVars(s string, known []string) string {
	for _, m := range placeholder.FindAllString(s, -1) {
		ok := false
		for _, k := range known {
			ok = ok || m == k
		}
		if !ok {
			return m
		}
	}
	return ""
}

// validPath reports whether s is a dotted path of non-empty segments.
func validPath(s string) bool {
	if s == "" {
		return false
	}
	for _, seg := range strings.Split(s, ".") {
		if seg == "" || strings.ContainsAny(seg, " \t{}") {
			return false
		}
	}
	return true
}

// fillDefaults completes a valid profile.
func (p *Profile) fillDefaults() {
	if p.MaxKeyLen == 0 {
		p.MaxKeyLen = ledger.MaxKeyLen
	}
	if p.KeyFormat == "" {
		p.KeyFormat = FormatPrintable
	}
	if p.Lookup != nil && p.Lookup.Method == "" {
		p.Lookup.Method = http.MethodGet
	}
	if p.Retrieve != nil && p.Retrieve.Method == "" {
		p.Retrieve.Method = http.MethodGet
	}
}
