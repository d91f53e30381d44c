package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentledger/reconciler/fixtures"
)

// Fault is what the fake vendor does to one POST on top of its normal work.
type Fault int

// The faults the fake vendor can inject. "After commit" means the object is
// created and remembered under the request's Idempotency-Key before the
// answer goes wrong, which is exactly the case a retry layer gets wrong.
const (
	// FaultNone answers 200 with the object.
	FaultNone Fault = iota
	// FaultHang commits, then holds the answer until the client gives up
	// (its context ends and the connection closes).
	FaultHang
	// FaultHold commits, then holds the answer until Release is called (or
	// the client gives up); the answer is then the normal one.
	FaultHold
	// Fault500 commits, then answers 500 (and remembers the 500 for the key,
	// as Stripe does, so a replay of the key answers 500 again).
	Fault500
	// Fault409 commits, then answers 409 "resource_already_exists" naming
	// the object: an upstream duplicate whose first delivery won.
	Fault409
	// Fault400 refuses the request as invalid; nothing is created.
	Fault400
	// Fault402 declines the card; nothing is created.
	Fault402
	// FaultDrop closes the connection before reading the request: nothing
	// is created and the client sees a broken connection.
	FaultDrop
)

// Object is one thing the fake vendor created.
type Object struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Status   string            `json:"status"`
	Metadata map[string]string `json:"metadata"`
	// PaymentIntent is the refunded PaymentIntent of a refund.
	PaymentIntent string `json:"payment_intent,omitempty"`
	Created       int64  `json:"created"`
}

// answer is a stored HTTP answer, replayed for a repeated Idempotency-Key.
type answer struct {
	status int
	body   []byte
}

// Vendor is a Stripe-like fake: POST /v1/payment_intents and /v1/refunds
// really create objects, remember the answer by Idempotency-Key (a repeated
// key gets the stored answer with Idempotent-Replayed: true, and creates
// nothing), and can be told to misbehave per POST (Plan). It serves GET
// /v1/payment_intents/{id} and /v1/payment_intents/search for the
// resolver's lookups, and signs and sends webhooks for its objects.
//
// A Vendor is safe for concurrent use; its only goroutines are the test
// server's request handlers, which end with their requests (a held answer
// ends with Release, Close, or the client's disconnect).
type Vendor struct {
	srv *httptest.Server
	now func() time.Time

	mu      sync.Mutex
	posts   int           // every POST, replays and refused ones included
	keys    []string      // Idempotency-Key of every POST, in order
	plan    map[int]Fault // POST number (1-based) → fault
	hooks   map[int]CommitHook
	answers map[string]answer // Idempotency-Key → stored answer
	objects []Object
	nextID  int
	events  int
	release chan struct{}
	closed  chan struct{}
	arrived chan struct{} // signalled (non-blocking) on every POST
}

// NewVendor starts the fake vendor on a loopback port. now stamps objects
// and webhook signatures (the drill's clock).
func NewVendor(now func() time.Time) *Vendor {
	v := &Vendor{
		now: now, plan: map[int]Fault{}, hooks: map[int]CommitHook{}, answers: map[string]answer{},
		release: make(chan struct{}), closed: make(chan struct{}), arrived: make(chan struct{}, 1),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", v.create("payment_intent", "pi"))
	mux.HandleFunc("POST /v1/refunds", v.create("refund", "re"))
	mux.HandleFunc("GET /v1/payment_intents/search", v.search)
	mux.HandleFunc("GET /v1/payment_intents/{id}", v.retrieve)
	v.srv = httptest.NewServer(mux)
	return v
}

// URL is the vendor's API base.
func (v *Vendor) URL() string { return v.srv.URL }

// Close releases held answers and stops the server.
func (v *Vendor) Close() {
	v.mu.Lock()
	select {
	case <-v.closed:
	default:
		close(v.closed)
	}
	v.mu.Unlock()
	v.srv.CloseClientConnections()
	v.srv.Close()
}

// Plan sets the fault of the n-th POST (1-based, counting every POST).
func (v *Vendor) Plan(n int, f Fault) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.plan[n] = f
}

// CommitHook runs inside the vendor between its commit and its answer:
// key is the POST's Idempotency-Key, obj the object it created.
type CommitHook func(ctx context.Context, key string, obj Object)

// OnCommit has the n-th POST (1-based) run hook after it committed a new
// object and before its answer leaves, which is how a drill makes the
// vendor's webhook win the race against the runtime's own report whatever
// language the runtime is written in. A POST that creates nothing (a
// replay, a refusal, a drop) does not run it.
func (v *Vendor) OnCommit(n int, hook CommitHook) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.hooks[n] = hook
}

// Release lets every held answer (FaultHold) go, now and later.
func (v *Vendor) Release() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.release:
	default:
		close(v.release)
	}
}

// Posts is how many POSTs arrived (replays and refusals included).
func (v *Vendor) Posts() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.posts
}

// Keys returns the Idempotency-Key of every POST, in order.
func (v *Vendor) Keys() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.keys...)
}

// Objects returns the objects created so far: the side effects.
func (v *Vendor) Objects() []Object {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Object(nil), v.objects...)
}

// Count returns how many objects of a kind ("payment_intent", "refund") exist.
func (v *Vendor) Count(kind string) int {
	n := 0
	for _, o := range v.Objects() {
		if o.Object == kind {
			n++
		}
	}
	return n
}

// WaitPosts blocks until at least n POSTs arrived or ctx ends.
func (v *Vendor) WaitPosts(ctx context.Context, n int) error {
	for {
		if v.Posts() >= n {
			return nil
		}
		select {
		case <-v.arrived:
		case <-ctx.Done():
			return fmt.Errorf("vendor saw %d posts, waited for %d: %w", v.Posts(), n, ctx.Err())
		}
	}
}

func (v *Vendor) create(kind, prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v.mu.Lock()
		v.posts++
		n := v.posts
		fault, hook := v.plan[n], v.hooks[n]
		key := r.Header.Get("Idempotency-Key")
		v.keys = append(v.keys, key)
		v.mu.Unlock()
		select {
		case v.arrived <- struct{}{}:
		default:
		}

		if fault == FaultDrop {
			dropConnection(w)
			return
		}
		if err := r.ParseForm(); err != nil {
			writeStripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "unparsable form body", "")
			return
		}
		ans, obj, replayed := v.commit(kind, prefix, key, r.PostForm, fault)
		if hook != nil && obj != nil {
			hook(r.Context(), key, *obj)
		}
		switch fault {
		case FaultHang:
			// The object is committed; the answer never comes in time.
			select {
			case <-r.Context().Done():
			case <-v.closed:
			}
			return
		case FaultHold:
			select {
			case <-v.release:
			case <-r.Context().Done():
				return
			case <-v.closed:
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", fmt.Sprintf("req_fake_%d", n))
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		if ans.status >= 500 {
			w.Header().Set("Stripe-Should-Retry", "true")
		}
		w.WriteHeader(ans.status)
		_, _ = w.Write(ans.body)
	}
}

// commit creates the object (unless the key was seen, or the fault refuses
// it) and stores the answer under the key, all under the lock, before any
// answer leaves: a vendor commits first and answers second. It returns the
// object it created (nil for none) and whether the answer is a replay.
func (v *Vendor) commit(kind, prefix, key string, form url.Values, fault Fault) (answer, *Object, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if a, ok := v.answers[key]; ok && key != "" {
		return a, nil, true
	}
	var a answer
	var created *Object
	switch fault {
	case Fault400:
		a = stripeError(http.StatusBadRequest, "invalid_request_error", "parameter_missing", "missing required param: amount", "")
	case Fault402:
		a = stripeError(http.StatusPaymentRequired, "card_error", "card_declined", "your card was declined", "")
	default:
		v.nextID++
		amount, _ := strconv.ParseInt(form.Get("amount"), 10, 64)
		obj := Object{
			ID: fmt.Sprintf("%s_fake%04d", prefix, v.nextID), Object: kind, Amount: amount,
			Currency: form.Get("currency"), Status: "succeeded", Metadata: map[string]string{},
			PaymentIntent: form.Get("payment_intent"), Created: v.now().Unix(),
		}
		for name, vals := range form {
			if mk, ok := strings.CutPrefix(name, "metadata["); ok && strings.HasSuffix(mk, "]") && len(vals) > 0 {
				obj.Metadata[strings.TrimSuffix(mk, "]")] = vals[0]
			}
		}
		v.objects = append(v.objects, obj)
		created = &obj
		body, _ := json.Marshal(obj)
		switch fault {
		case Fault500:
			a = stripeError(http.StatusInternalServerError, "api_error", "", "an unexpected error occurred", "")
		case Fault409:
			a = stripeError(http.StatusConflict, "invalid_request_error", "resource_already_exists",
				"a "+kind+" for this request already exists", obj.ID)
		default:
			a = answer{status: http.StatusOK, body: body}
		}
	}
	if key != "" {
		v.answers[key] = a
	}
	return a, created, false
}

// stripeErrorBody is Stripe's error shape; resource_id names the object a
// 409 "already exists" refers to.
type stripeErrorBody struct {
	Error struct {
		Type       string `json:"type"`
		Code       string `json:"code,omitempty"`
		Message    string `json:"message"`
		ResourceID string `json:"resource_id,omitempty"`
	} `json:"error"`
}

func stripeError(status int, typ, code, msg, resourceID string) answer {
	var b stripeErrorBody
	b.Error.Type, b.Error.Code, b.Error.Message, b.Error.ResourceID = typ, code, msg, resourceID
	body, _ := json.Marshal(b)
	return answer{status: status, body: body}
}

func writeStripeError(w http.ResponseWriter, status int, typ, code, msg, resourceID string) {
	a := stripeError(status, typ, code, msg, resourceID)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// dropConnection closes the connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // net/http closes the connection
}

func (v *Vendor) retrieve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, o := range v.Objects() {
		if o.ID == id {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(o)
			return
		}
	}
	writeStripeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "no such payment_intent", "")
}

// searchQuery is the one query shape the resolver sends.
var searchQuery = regexp.MustCompile(`^metadata\['([^']+)'\]:'([^']*)'$`)

func (v *Vendor) search(w http.ResponseWriter, r *http.Request) {
	m := searchQuery.FindStringSubmatch(r.URL.Query().Get("query"))
	if m == nil {
		writeStripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "unsupported search query", "")
		return
	}
	data := []Object{}
	for _, o := range v.Objects() {
		if o.Object == "payment_intent" && o.Metadata[m[1]] == m[2] {
			data = append(data, o)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false, "data": data,
	})
}

// Webhook builds the signed payment_intent.succeeded event Stripe would send
// for object id: the real-shaped fixture with the object's id, amount,
// currency and metadata_local_id. It returns the body and its
// Stripe-Signature header.
func (v *Vendor) Webhook(id, secret string) ([]byte, string, error) {
	var obj *Object
	for _, o := range v.Objects() {
		if o.ID == id {
			obj = &o
			break
		}
	}
	if obj == nil {
		return nil, "", fmt.Errorf("webhook: vendor holds no object %s", id)
	}
	v.mu.Lock()
	v.events++
	evt := fmt.Sprintf("evt_fake%04d", v.events)
	v.mu.Unlock()
	body := fixtures.Load("stripe/2024-06-20/payment_intent.succeeded")
	var err error
	// The runtime may not have written a local id (the sabotage that
	// omits it): the event then carries none, as Stripe's would.
	local := obj.Metadata["metadata_local_id"]
	if body, err = fixtures.Set(body, "metadata_local_id", local); err != nil {
		return nil, "", err
	}
	for _, kv := range [][2]string{
		{"id", strconv.Quote(evt)},
		{"data.object.id", strconv.Quote(obj.ID)},
		{"data.object.amount", strconv.FormatInt(obj.Amount, 10)},
		{"data.object.amount_received", strconv.FormatInt(obj.Amount, 10)},
		{"data.object.currency", strconv.Quote(obj.Currency)},
		{"request.idempotency_key", "null"},
	} {
		if body, err = fixtures.Set(body, kv[0], kv[1]); err != nil {
			return nil, "", err
		}
	}
	return body, fixtures.SignStripe(body, v.now(), secret), nil
}

// SendWebhook delivers the signed event for object id to url and returns
// the receiver's status and its result field ("accepted", "orphan", …).
func (v *Vendor) SendWebhook(ctx context.Context, hc *http.Client, url, id, secret string) (int, string, error) {
	body, sig, err := v.Webhook(id, secret)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", sig)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("send webhook: %w", err)
	}
	defer resp.Body.Close()
	var ack struct {
		Result string `json:"result"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ack)
	return resp.StatusCode, ack.Result, nil
}
