package resolver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/vendors"
)

// Profiled is the lookup of a vendor described by a profile
// (vendors.Profile): the generic engine of docs/architecture.md §7b. It
// knows no vendor's name; everything vendor-specific is the profile's data.
//
//   - Retrieve: the profile's retrieve request with {receipt_id}; 404 is
//     no such object; the status path and map decide.
//   - Find: the profile's lookup with {local_id} (and {vendor_key}); no
//     match (or 404) is a miss, one match settles, more than one is a
//     duplicate that already happened (Finding.Duplicate: page, never
//     replay). Without a lookup block it returns ErrNoLookup.
//   - Replay: the row's stored request sent again to api_base with the
//     row's vendor_key inserted where the profile's idempotency placement
//     says (a header, a JSON or form body path); the answer is read by the
//     profile's replay_outcomes first, then: 2xx the first result, 429 and
//     5xx a vendor *Error, any other answer a page.
//
// Calls are paced by the profile's rate_limit and time-boxed by its
// timeout. SearchLag and Retention give the resolver the lookup's
// min_age and retention.
type Profiled struct {
	p      vendors.Profile
	base   string
	client *http.Client
	lim    *rate.Limiter
}

var (
	_ Lookup   = (*Profiled)(nil)
	_ Lagged   = (*Profiled)(nil)
	_ Retained = (*Profiled)(nil)
)

// Lagged is a Lookup whose misses count as absence only SearchLag after the
// row's last attempt, instead of Options.SearchLag (0: at once).
type Lagged interface{ SearchLag() time.Duration }

// Retained is a Lookup whose vendor forgets objects: for a row older than
// Retention (0: never) a miss proves nothing and the row is paged.
type Retained interface{ Retention() time.Duration }

// maxVendorBody caps what is read of a vendor's answer.
const maxVendorBody = 1 << 20

// NewProfiled returns the lookup of a profile that can be called (an
// api_base). client nil: a new http.Client (each call has its own
// deadline).
func NewProfiled(p vendors.Profile, client *http.Client) (*Profiled, error) {
	if !p.Callable() {
		return nil, fmt.Errorf("vendor %s: no api_base, nothing to call", p.Name)
	}
	if client == nil {
		client = &http.Client{}
	}
	return &Profiled{p: p, base: strings.TrimRight(p.APIBase, "/"), client: client, lim: newLimiter(p.RateLimit.PerSecond())}, nil
}

// Profile is the profile this lookup runs.
func (l *Profiled) Profile() vendors.Profile { return l.p }

// SearchLag is the lookup's min_age.
func (l *Profiled) SearchLag() time.Duration {
	if l.p.Lookup == nil {
		return 0
	}
	return l.p.Lookup.MinAge
}

// Retention is the lookup's retention.
func (l *Profiled) Retention() time.Duration {
	if l.p.Lookup == nil {
		return 0
	}
	return l.p.Lookup.Retention
}

// Retrieve implements Lookup. Without a retrieve block it finds nothing
// (and calls nothing), so the resolver goes on to Find.
func (l *Profiled) Retrieve(ctx context.Context, row ledger.Row) (Finding, error) {
	r := l.p.Retrieve
	if r == nil || row.UpstreamReceiptID == "" {
		return Finding{}, nil
	}
	op := l.p.Name + " retrieve"
	path := vendors.ExpandURL(r.URL, vendors.Vars{ReceiptID: row.UpstreamReceiptID, LocalID: row.MetadataLocalID, VendorKey: row.WireKey()})
	ans, err := l.call(ctx, op, r.Method, path, nil, nil)
	if err != nil {
		return Finding{}, err
	}
	switch {
	case ans.status == http.StatusNotFound:
		return Finding{Detail: op + ": not found"}, nil
	case ans.status < 200 || ans.status > 299:
		return Finding{}, &Error{Op: op, HTTPStatus: ans.status, Err: errors.New("unexpected answer")}
	}
	doc, err := vendors.DecodeJSON(ans.body)
	if err != nil {
		return Finding{}, &Error{Op: op, HTTPStatus: ans.status, Err: errors.New("answer is not JSON")}
	}
	st, raw := readStatus(doc, r.StatusPath, r.StatusMap)
	return Finding{Found: true, Status: st, ReceiptID: row.UpstreamReceiptID, Detail: op + " " + raw}, nil
}

// Find implements Lookup. A paged lookup (next_path) reads every page; a
// lookup with local_id_path keeps only the matches carrying the row's
// local id, and one with group_path counts the matches sharing a value
// there as one object (findings.go).
func (l *Profiled) Find(ctx context.Context, row ledger.Row) (Finding, error) {
	lk := l.p.Lookup
	if lk == nil {
		return Finding{}, ErrNoLookup
	}
	op := l.p.Name + " lookup"
	vars := vendors.Vars{LocalID: row.MetadataLocalID, VendorKey: row.WireKey(), ReceiptID: row.UpstreamReceiptID, FirstSeen: row.FirstSeenAt}
	var body []byte
	h := http.Header{}
	if lk.Body != "" {
		body = []byte(vendors.ExpandBody(lk.Body, vars))
		h.Set("Content-Type", "application/json")
	}
	path := vendors.ExpandURL(lk.URL, vars)
	maxPages := lk.MaxPages
	if maxPages == 0 {
		maxPages = vendors.DefaultMaxPages
	}
	var matches []any
	for page := 1; ; page++ {
		ans, err := l.call(ctx, op, lk.Method, path, body, h)
		if err != nil {
			return Finding{}, err
		}
		switch {
		case ans.status == http.StatusNotFound:
			if page == 1 {
				return Finding{Detail: op + ": no match"}, nil
			}
			return Finding{}, &Error{Op: op, HTTPStatus: ans.status, Err: fmt.Errorf("page %d not found", page)}
		case ans.status < 200 || ans.status > 299:
			return Finding{}, &Error{Op: op, HTTPStatus: ans.status, Err: errors.New("unexpected answer")}
		}
		doc, err := vendors.DecodeJSON(ans.body)
		if err != nil {
			return Finding{}, &Error{Op: op, HTTPStatus: ans.status, Err: errors.New("answer is not JSON")}
		}
		res, _ := vendors.LookupPath(doc, lk.ResultsPath)
		var got []any
		switch m := res.(type) {
		case nil:
		case []any:
			got = m
		case map[string]any:
			got = []any{m}
		default:
			return Finding{}, &Error{Op: op, HTTPStatus: ans.status, Err: fmt.Errorf("%s is neither a list nor an object", lk.ResultsPath)}
		}
		matches = append(matches, got...)
		if lk.NextPath == "" || len(got) == 0 {
			break
		}
		if page == maxPages {
			// What the next page holds is not known: a miss here would be
			// taken for absence.
			return Finding{}, &Error{Op: op, Err: fmt.Errorf("inconclusive: more than %d pages", maxPages)}
		}
		if path, err = l.nextPath(doc, lk.NextPath); err != nil {
			return Finding{}, &Error{Op: op, HTTPStatus: ans.status, Err: err}
		}
		body = nil
	}
	return l.found(op, lk, row, matches), nil
}

// Replay implements Lookup.
func (l *Profiled) Replay(ctx context.Context, row ledger.Row) (Finding, error) {
	op := l.p.Name + " replay"
	if !l.p.CanReplay() {
		return Finding{}, &Error{Op: op, Err: errors.New("the profile takes no key or has no replay window")}
	}
	req := row.Request
	if req == nil || !strings.HasPrefix(req.Path, "/") {
		return Finding{}, &Error{Op: op, Err: errors.New("no stored request with a path under api_base")}
	}
	h := http.Header{}
	if req.ContentType != "" {
		h.Set("Content-Type", req.ContentType)
	}
	body := []byte(req.Body)
	key := row.WireKey()
	switch idem := l.p.Idempotency; idem.Kind() {
	case vendors.PlaceHeader:
		h.Set(idem.Header, key)
	case vendors.PlaceBody, vendors.PlaceClientID:
		var err error
		if body, err = placeInBody(req.ContentType, body, idem.Where(), key); err != nil {
			return Finding{}, &Error{Op: op, Err: err}
		}
		if req.ContentType == "" {
			h.Set("Content-Type", "application/json")
		}
	}
	ans, err := l.call(ctx, op, req.Method, req.Path, body, h)
	if err != nil {
		return Finding{}, err
	}
	if then, why, ok := l.match(ans); ok {
		return l.outcome(op, ans, then, why)
	}
	switch {
	case ans.status >= 200 && ans.status <= 299:
		return l.outcome(op, ans, vendors.ThenSucceeded, "")
	case ans.status == http.StatusTooManyRequests || ans.status >= 500:
		return Finding{}, ans.retryable(op)
	}
	return Finding{Page: fmt.Sprintf("%s answered %d", op, ans.status), Detail: fmt.Sprintf("%s: %d", op, ans.status)}, nil
}

// outcome turns a replay answer read as then into a finding.
func (l *Profiled) outcome(op string, ans answer, then vendors.Then, why string) (Finding, error) {
	switch then {
	case vendors.ThenPage:
		return Finding{Page: fmt.Sprintf("%s answered %d (%s): a human must look", op, ans.status, why), Detail: op + ": " + why}, nil
	case vendors.ThenRetry:
		// The vendor is still working on the first request, or did not
		// consume the key: nothing learned, replay again next pass.
		return Finding{Detail: op + ": retry later (" + why + ")"}, nil
	case vendors.ThenFailed:
		return Finding{Found: true, Status: ledger.StatusFailedPoison, ReceiptID: l.receipt(ans), Detail: op + ": failed"}, nil
	}
	f := Finding{Found: true, Status: ledger.StatusSucceeded, ReceiptID: l.receipt(ans), Detail: op + ": first result"}
	if l.p.ResultStatusPath != "" {
		if doc, err := vendors.DecodeJSON(ans.body); err == nil {
			var raw string
			f.Status, raw = readStatus(doc, l.p.ResultStatusPath, l.p.ResultStatusMap)
			f.Detail += " " + raw
		}
	}
	return f, nil
}

// match finds the first replay outcome the answer fits.
func (l *Profiled) match(ans answer) (vendors.Then, string, bool) {
	for _, o := range l.p.ReplayOutcomes {
		if o.Status != 0 && o.Status != ans.status {
			continue
		}
		if o.BodyContains != "" && !bytes.Contains(ans.body, []byte(o.BodyContains)) {
			continue
		}
		if o.Header != "" {
			name, want, _ := strings.Cut(o.Header, ":")
			got, present := ans.header[http.CanonicalHeaderKey(strings.TrimSpace(name))]
			if !present || (strings.TrimSpace(want) != "" && !strings.Contains(strings.ToLower(strings.Join(got, ",")), strings.ToLower(strings.TrimSpace(want)))) {
				continue
			}
		}
		why := strings.TrimSpace(o.BodyContains + " " + o.Header)
		return o.Then, why, true
	}
	return "", "", false
}

func (l *Profiled) receipt(ans answer) string {
	if l.p.ReceiptPath == "" {
		return ""
	}
	doc, err := vendors.DecodeJSON(ans.body)
	if err != nil {
		return ""
	}
	v, _ := vendors.LookupPath(doc, l.p.ReceiptPath)
	s, _ := vendors.Scalar(v)
	return s
}

// answer is one vendor answer: status, headers, body (capped).
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) retryable(op string) *Error {
	e := &Error{Op: op, HTTPStatus: a.status, Retryable: true}
	if n, err := strconv.Atoi(a.header.Get("Retry-After")); err == nil && n > 0 {
		e.RetryAfter = time.Duration(n) * time.Second
	}
	return e
}

// call makes one paced, time-boxed call to api_base+path with the
// profile's auth. 429 and 5xx of a lookup or retrieve, network errors and
// timeouts come back as a retryable *Error; a replay's 429/5xx is the
// caller's to judge (a replay outcome may name it).
func (l *Profiled) call(ctx context.Context, op, method, path string, body []byte, h http.Header) (answer, error) {
	if method == "" {
		method = http.MethodGet
	}
	if err := l.lim.Wait(ctx); err != nil {
		return answer{}, &Error{Op: op, Retryable: true, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, l.p.CallTimeout())
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.base+path, rd)
	if err != nil {
		return answer{}, &Error{Op: op, Err: errors.New("bad request URL")}
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if name, value := l.p.AuthHeader(); name != "" {
		req.Header.Set(name, value)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return answer{}, &Error{Op: op, Retryable: true, Err: scrubURL(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxVendorBody))
	if err != nil {
		return answer{}, &Error{Op: op, Retryable: true, Err: err}
	}
	ans := answer{status: resp.StatusCode, header: resp.Header, body: raw}
	if !strings.HasSuffix(op, "replay") && (ans.status == http.StatusTooManyRequests || ans.status >= 500) {
		return ans, ans.retryable(op)
	}
	return ans, nil
}

// readStatus maps the value at path through m: succeeded, failed
// (failed_poison) or pending (""); an unmapped value is pending. No path:
// succeeded (the object exists).
func readStatus(doc any, path string, m map[string]string) (ledger.Status, string) {
	if path == "" {
		return ledger.StatusSucceeded, ""
	}
	v, _ := vendors.LookupPath(doc, path)
	s, _ := vendors.Scalar(v)
	to, ok := m[s]
	if !ok {
		for k, x := range m {
			if strings.EqualFold(k, s) {
				to, ok = x, true
				break
			}
		}
	}
	if !ok && len(m) == 0 {
		return ledger.StatusSucceeded, s
	}
	switch to {
	case "succeeded":
		return ledger.StatusSucceeded, s
	case "failed":
		return ledger.StatusFailedPoison, s
	}
	return "", s
}

// placeInBody sets the key at path: a form field, or a dotted path of a
// JSON object body.
func placeInBody(contentType string, body []byte, path, key string) ([]byte, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/x-www-form-urlencoded" {
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, fmt.Errorf("stored form body: %w", err)
		}
		vals.Set(path, key)
		return []byte(vals.Encode()), nil
	}
	return vendors.SetPath(body, path, key)
}
