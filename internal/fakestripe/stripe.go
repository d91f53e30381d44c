package fakestripe

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Stripe.
type Options struct {
	// APIKey is the one secret key accepted (Authorization: Bearer
	// <APIKey>). Empty: any sk_ key is, so callers can tell themselves apart
	// by key (Request.APIKey).
	APIKey string
	// Now stamps the objects the fake creates and decides what Search sees
	// (nil: time.Now).
	Now func() time.Time
	// SearchLag is how long a new object stays out of Search results, as
	// Stripe's search index lags behind writes (0: found at once).
	SearchLag time.Duration
}

// Fault is how one write (a POST whose Idempotency-Key was not seen
// before) goes wrong; see Inject.
type Fault int

// The faults. "Commits" means the object exists and the answer is stored
// under the key before the answer goes wrong: a retry with the key gets the
// stored answer.
const (
	// FaultNone answers 200 with the object.
	FaultNone Fault = iota
	// FaultHang commits, then holds the answer until the client gives up
	// (or the test ends).
	FaultHang
	// FaultReset commits, then drops the connection without an answer.
	FaultReset
	// Fault500 commits nothing and answers 500, which Stripe stores for the
	// key: a retry with the key gets the 500 again.
	Fault500
	// Fault409 commits, then answers 409 resource_already_exists naming the
	// object: an upstream duplicate whose first delivery won.
	Fault409
	// FaultDecline commits a PaymentIntent whose card was declined
	// (requires_payment_method) and answers 402 card_declined naming it,
	// with Stripe-Should-Retry: false.
	FaultDecline
	// Fault429 refuses the write as rate limited (Retry-After: 1); nothing
	// is committed or stored.
	Fault429
)

// Request is one request the fake received, in arrival order.
type Request struct {
	Method, Path string
	Query        url.Values
	// APIKey is the Bearer token sent ("" for none).
	APIKey         string
	IdempotencyKey string
	// Params is the form body of a POST.
	Params url.Values
	// Replayed is true when the answer was the stored one of its key.
	Replayed bool
}

// Stripe is a running fake Stripe API.
type Stripe struct {
	srv     *httptest.Server
	apiKey  string
	now     func() time.Time
	release chan struct{} // closed when the test ends: held answers end

	mu sync.Mutex
	// objects by id; order is creation order (lists, Search); created is
	// when each object entered the fake (Search's lag).
	objects map[string]map[string]any
	order   []string
	created map[string]time.Time
	answers map[string]answer // by Idempotency-Key
	events  []map[string]any  // List Events, oldest first
	seq     int

	faults    []Fault
	failNext  []int
	failAll   int
	searchLag time.Duration
	noSearch  bool

	requests []Request
}

// answer is a stored answer, replayed for its Idempotency-Key; request is
// what it answered (method, path and parameters), which a replay must
// repeat.
type answer struct {
	status  int
	header  http.Header
	body    []byte
	request string
}

// New starts a fake Stripe on a loopback port and stops it when tb ends.
func New(tb testing.TB, o Options) *Stripe {
	tb.Helper()
	s := &Stripe{
		apiKey: o.APIKey, now: o.Now, release: make(chan struct{}),
		objects: map[string]map[string]any{}, created: map[string]time.Time{}, answers: map[string]answer{},
		searchLag: o.SearchLag,
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(func() {
		close(s.release)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// URL is the API base, for stripe-go's BackendConfig.URL or a plain client.
func (s *Stripe) URL() string { return s.srv.URL }

// Client is an HTTP client for the fake's server.
func (s *Stripe) Client() *http.Client { return s.srv.Client() }

// Inject makes the next writes whose Idempotency-Key is new go wrong, one
// fault each, in order; a replayed key takes none.
func (s *Stripe) Inject(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// FailNext answers the next requests, one status each, with an api_error
// (429 with Retry-After: 1) before anything else happens.
func (s *Stripe) FailNext(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, statuses...)
}

// FailAll answers every request with status as FailNext does, until
// FailAll(0).
func (s *Stripe) FailAll(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAll = status
}

// SetSearchLag changes Options.SearchLag.
func (s *Stripe) SetSearchLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searchLag = d
}

// SetSearchUnavailable makes Search answer 400 "not available for your
// account", as it does in regions without Search.
func (s *Stripe) SetSearchUnavailable(off bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noSearch = off
}

// Put adds obj (it needs "id" and "object", e.g. "payment_intent") as if
// created at created: an object the vendor holds without this test's
// writes, or with a state a write could not give it.
func (s *Stripe) Put(obj map[string]any, created time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(obj, created)
}

// SetStatus changes the status of object id (a PaymentIntent that settles).
func (s *Stripe) SetStatus(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[id]["status"] = status
}

// AddEvent appends ev to List Events.
func (s *Stripe) AddEvent(ev map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
}

// ObjectCount is how many objects the fake holds: the side effects.
func (s *Stripe) ObjectCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Requests returns every request received so far, in order.
func (s *Stripe) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Keys returns the Idempotency-Key of every POST so far ("" for none), in
// order.
func (s *Stripe) Keys() []string {
	var keys []string
	for _, r := range s.Requests() {
		if r.Method == http.MethodPost {
			keys = append(keys, r.IdempotencyKey)
		}
	}
	return keys
}

// Count is how many requests so far start with prefix, matched against
// "METHOD /path" ("POST", "GET /v1/payment_intents/search").
func (s *Stripe) Count(prefix string) int {
	n := 0
	for _, r := range s.Requests() {
		if strings.HasPrefix(r.Method+" "+r.Path, prefix) {
			n++
		}
	}
	return n
}

// resources are the resources the fake creates: their object name and id
// prefix.
var resources = map[string]struct{ object, prefix string }{
	"payment_intents": {"payment_intent", "pi"},
	"refunds":         {"refund", "re"},
	"customers":       {"customer", "cus"},
	"charges":         {"charge", "ch"},
}

// reply is what serve sends: an answer, or a fault that replaces it.
type reply struct {
	answer
	fault Fault // FaultHang, FaultReset: no answer goes out
}

func (s *Stripe) serve(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server notice a client that
	// hangs up, and cancel r.Context().
	body, _ := io.ReadAll(r.Body)
	params, _ := url.ParseQuery(string(body))
	rep := s.handle(r, params)
	switch rep.fault {
	case FaultHang:
		select { // committed; the answer never comes in time
		case <-r.Context().Done():
		case <-s.release:
		}
		return
	case FaultReset:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // net/http closes the connection
	}
	for k, v := range rep.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	_, _ = w.Write(rep.body)
}

// handle records the request and decides its reply, all under the lock: a
// write commits before any answer leaves.
func (s *Stripe) handle(r *http.Request, params url.Values) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	apiKey := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if apiKey == r.Header.Get("Authorization") {
		apiKey = ""
	}
	s.requests = append(s.requests, Request{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), APIKey: apiKey,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Params: params,
	})
	if (s.apiKey != "" && apiKey != s.apiKey) || (s.apiKey == "" && !strings.HasPrefix(apiKey, "sk_")) {
		return reply{answer: stripeError(http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided.", nil)}
	}
	if code := s.failure(); code != 0 {
		a := stripeError(code, "api_error", "", "injected", nil)
		if code == http.StatusTooManyRequests {
			a.header = http.Header{"Retry-After": {"1"}}
		}
		return reply{answer: a}
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
	switch {
	case r.Method == http.MethodPost:
		return s.write(r, parts, params)
	case r.Method != http.MethodGet:
	case len(parts) == 2 && parts[1] == "search":
		return reply{answer: s.search(parts[0], r.URL.Query().Get("query"))}
	case len(parts) == 1 && parts[0] == "refunds":
		return reply{answer: s.listRefunds(r.URL.Query())}
	case len(parts) == 1 && parts[0] == "events":
		data := []any{}
		for i := len(s.events) - 1; i >= 0; i-- {
			data = append(data, s.events[i])
		}
		return reply{answer: jsonAnswer(http.StatusOK, map[string]any{"object": "list", "url": "/v1/events", "data": data, "has_more": false})}
	case len(parts) == 2:
		if obj := s.object(parts[0], parts[1]); obj != nil {
			return reply{answer: jsonAnswer(http.StatusOK, obj)}
		}
		return reply{answer: stripeError(http.StatusNotFound, "invalid_request_error", "resource_missing", "No such object: '"+parts[1]+"'", nil)}
	}
	return reply{answer: stripeError(http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL ("+r.Method+": "+r.URL.Path+").", nil)}
}

// failure is the status of a FailNext or FailAll (0: none), with s.mu held.
func (s *Stripe) failure() int {
	if s.failAll != 0 {
		return s.failAll
	}
	if len(s.failNext) > 0 {
		code := s.failNext[0]
		s.failNext = s.failNext[1:]
		return code
	}
	return 0
}

// write serves a POST (with s.mu held): the idempotency layer first, then
// the next fault, then the create or cancel.
func (s *Stripe) write(r *http.Request, parts []string, params url.Values) reply {
	key := r.Header.Get("Idempotency-Key")
	request := r.URL.Path + "?" + params.Encode()
	if a, ok := s.answers[key]; ok && key != "" {
		if a.request != request {
			return reply{answer: stripeError(http.StatusBadRequest, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with.", nil)}
		}
		s.requests[len(s.requests)-1].Replayed = true
		a.header = a.header.Clone()
		if a.header == nil {
			a.header = http.Header{}
		}
		a.header.Set("Idempotent-Replayed", "true")
		return reply{answer: a}
	}
	var fault Fault
	if len(s.faults) > 0 {
		fault, s.faults = s.faults[0], s.faults[1:]
	}
	store := func(a answer) answer {
		if key != "" {
			a.request = request
			s.answers[key] = a
		}
		return a
	}
	switch fault {
	case Fault429:
		a := stripeError(http.StatusTooManyRequests, "invalid_request_error", "rate_limit", "Too many requests hit the API too quickly.", nil)
		a.header = http.Header{"Retry-After": {"1"}}
		return reply{answer: a}
	case Fault500:
		return reply{answer: store(stripeError(http.StatusInternalServerError, "api_error", "", "An unknown error occurred.", nil))}
	}

	var obj map[string]any
	switch {
	case len(parts) == 1:
		res, ok := resources[parts[0]]
		if !ok {
			return reply{answer: stripeError(http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL (POST: "+r.URL.Path+").", nil)}
		}
		obj = s.create(res.object, res.prefix, params, fault)
	case len(parts) == 3 && parts[0] == "payment_intents" && parts[2] == "cancel":
		if obj = s.object(parts[0], parts[1]); obj == nil {
			return reply{answer: store(stripeError(http.StatusNotFound, "invalid_request_error", "resource_missing", "No such payment_intent: '"+parts[1]+"'", nil))}
		}
		obj["status"] = "canceled"
		if v := params.Get("cancellation_reason"); v != "" {
			obj["cancellation_reason"] = v
		}
	default:
		return reply{answer: stripeError(http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL (POST: "+r.URL.Path+").", nil)}
	}

	switch fault {
	case Fault409:
		return reply{answer: store(stripeError(http.StatusConflict, "invalid_request_error", "resource_already_exists",
			"A resource with the ID you provided already exists.", obj))}
	case FaultDecline:
		a := stripeError(http.StatusPaymentRequired, "card_error", "card_declined", "Your card was declined.", obj)
		a.header = http.Header{"Stripe-Should-Retry": {"false"}}
		return reply{answer: store(a)}
	}
	a := store(jsonAnswer(http.StatusOK, obj))
	return reply{answer: a, fault: fault}
}

// create commits a new object of kind from the form params (with s.mu
// held).
func (s *Stripe) create(kind, prefix string, params url.Values, fault Fault) map[string]any {
	id := ""
	for id == "" || s.objects[id] != nil {
		s.seq++
		id = prefix + "_" + strconv.Itoa(s.seq)
	}
	now := s.now()
	obj := map[string]any{"id": id, "object": kind, "created": now.Unix(), "metadata": map[string]any{}}
	switch kind {
	case "payment_intent", "charge", "refund":
		obj["status"] = "succeeded"
	}
	if fault == FaultDecline {
		obj["status"] = "requires_payment_method"
	}
	if a := params.Get("amount"); a != "" {
		n, _ := strconv.ParseInt(a, 10, 64)
		obj["amount"] = n
		obj["currency"] = params.Get("currency")
	}
	for _, k := range []string{"payment_intent", "charge", "customer", "email"} {
		if v := params.Get(k); v != "" {
			obj[k] = v
		}
	}
	for k, v := range params {
		if m, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(m, "]") && len(v) > 0 {
			obj["metadata"].(map[string]any)[strings.TrimSuffix(m, "]")] = v[0]
		}
	}
	s.add(obj, now)
	return obj
}

// add stores obj (with s.mu held). Metadata given as map[string]string
// is stored as the map[string]any a decoded object has.
func (s *Stripe) add(obj map[string]any, created time.Time) {
	if md, ok := obj["metadata"].(map[string]string); ok {
		m := make(map[string]any, len(md))
		for k, v := range md {
			m[k] = v
		}
		obj["metadata"] = m
	}
	id := obj["id"].(string)
	if _, ok := s.objects[id]; !ok {
		s.order = append(s.order, id)
	}
	s.objects[id] = obj
	s.created[id] = created
}

// object is object id if it is of resource's kind (with s.mu held).
func (s *Stripe) object(resource, id string) map[string]any {
	obj := s.objects[id]
	if obj == nil || obj["object"] != resources[resource].object {
		return nil
	}
	return obj
}

// searchQuery is the one query shape Search is sent: metadata['k']:'v'.
var searchQuery = regexp.MustCompile(`^metadata\['([^']+)'\]:'([^']*)'$`)

// search serves Stripe Search (with s.mu held): only objects older than
// the lag are visible.
func (s *Stripe) search(resource, q string) answer {
	if s.noSearch {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "", "Search is not available for your account.", nil)
	}
	m := searchQuery.FindStringSubmatch(q)
	if m == nil {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "", "Invalid query: "+q, nil)
	}
	data := []any{}
	now := s.now()
	for _, id := range s.order {
		obj := s.objects[id]
		md, _ := obj["metadata"].(map[string]any)
		if obj["object"] == resources[resource].object && md[m[1]] == m[2] && !now.Before(s.created[id].Add(s.searchLag)) {
			data = append(data, obj)
		}
	}
	return jsonAnswer(http.StatusOK, map[string]any{"object": "search_result", "url": "/v1/" + resource + "/search", "data": data, "has_more": false})
}

// listRefunds serves List Refunds by payment_intent or charge, newest
// first (with s.mu held).
func (s *Stripe) listRefunds(q url.Values) answer {
	data := []any{}
	for i := len(s.order) - 1; i >= 0; i-- {
		obj := s.objects[s.order[i]]
		if obj["object"] != "refund" {
			continue
		}
		if pi := q.Get("payment_intent"); pi != "" && obj["payment_intent"] != pi {
			continue
		}
		if ch := q.Get("charge"); ch != "" && obj["charge"] != ch {
			continue
		}
		data = append(data, obj)
	}
	return jsonAnswer(http.StatusOK, map[string]any{"object": "list", "url": "/v1/refunds", "data": data, "has_more": false})
}

// jsonAnswer encodes v now, under the lock, so a later SetStatus cannot
// race the write.
func jsonAnswer(status int, v any) answer {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakestripe: encode answer: %v", err))
	}
	return answer{status: status, body: b}
}

// stripeError is Stripe's error shape. obj, when set, is the object the
// error names: a PaymentIntent in error.payment_intent, a charge's id in
// error.charge.
func stripeError(status int, typ, code, msg string, obj map[string]any) answer {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	switch {
	case obj == nil:
	case obj["object"] == "payment_intent":
		e["payment_intent"] = obj
	case obj["object"] == "charge":
		e["charge"] = obj["id"]
	}
	return jsonAnswer(status, map[string]any{"error": e})
}
