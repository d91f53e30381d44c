package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/form"
)

// MetadataLocalID is the metadata field that carries the row's local id, so
// a webhook (or the resolver's search) finds the row.
const MetadataLocalID = "metadata_local_id"

// StripeBackend is a stripe.Backend that makes every write carry the
// ledger key explicitly: for a call whose params.Context holds a key
// (WithKey; Do's call gets such a context) it sets params.IdempotencyKey to
// the key — stripe-go mints a random key for a write without one, which
// would make each retry a new charge — and metadata[metadata_local_id] to
// the local id when the params take metadata. A write without a key in its
// context, or with a different explicit key, is refused before it is sent.
// Reads pass through. Install it with client.API.Init or stripe.SetBackend:
//
//	sc := &stripeclient.API{}
//	sc.Init(apiKey, &stripe.Backends{API: client.NewStripeBackend(nil), ...})
type StripeBackend struct {
	inner stripe.Backend
}

var _ stripe.Backend = (*StripeBackend)(nil)

// NewStripeBackend wraps inner (nil: a new stripe-go API backend with its
// defaults). stripe-go's own network retries reuse the key we set, so they
// stay safe.
func NewStripeBackend(inner stripe.Backend) *StripeBackend {
	if inner == nil {
		// A new backend, not stripe.GetBackend: that may already be this
		// wrapper (stripe.SetBackend), which would then wrap itself.
		inner = stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{})
	}
	return &StripeBackend{inner: inner}
}

// The key StripeBackend sends is the row's vendor_key (CallKey.Wire):
// for Stripe, which takes any ledger key, it is the key itself.

// Call implements stripe.Backend.
func (b *StripeBackend) Call(method, path, key string, params stripe.ParamsContainer, v stripe.LastResponseSetter) error {
	if err := prepareStripe(method, path, params); err != nil {
		return err
	}
	return b.inner.Call(method, path, key, params, v)
}

// CallStreaming implements stripe.Backend.
func (b *StripeBackend) CallStreaming(method, path, key string, params stripe.ParamsContainer, v stripe.StreamingLastResponseSetter) error {
	if err := prepareStripe(method, path, params); err != nil {
		return err
	}
	return b.inner.CallStreaming(method, path, key, params, v)
}

// CallRaw implements stripe.Backend. Its form body is already encoded, so
// the local id cannot be added here; the key is.
func (b *StripeBackend) CallRaw(method, path, key string, body *form.Values, params *stripe.Params, v stripe.LastResponseSetter) error {
	if err := setStripeKey(method, path, params); err != nil {
		return err
	}
	return b.inner.CallRaw(method, path, key, body, params, v)
}

// CallMultipart implements stripe.Backend (file uploads).
func (b *StripeBackend) CallMultipart(method, path, key, boundary string, body *bytes.Buffer, params *stripe.Params, v stripe.LastResponseSetter) error {
	if err := setStripeKey(method, path, params); err != nil {
		return err
	}
	return b.inner.CallMultipart(method, path, key, boundary, body, params, v)
}

// SetMaxNetworkRetries implements stripe.Backend.
func (b *StripeBackend) SetMaxNetworkRetries(n int64) { b.inner.SetMaxNetworkRetries(n) }

func prepareStripe(method, path string, params stripe.ParamsContainer) error {
	if params == nil || reflect.ValueOf(params).IsNil() {
		if isWrite(method) {
			return fmt.Errorf("stripe %s %s: %w", method, path, ErrNoKey)
		}
		return nil
	}
	p := params.GetParams()
	if err := setStripeKey(method, path, p); err != nil {
		return err
	}
	if k, ok := keyOf(p); ok && isWrite(method) && k.LocalID != "" && hasOwnMetadata(params) {
		addMetadata(params, MetadataLocalID, k.LocalID)
	}
	return nil
}

func keyOf(p *stripe.Params) (CallKey, bool) {
	if p == nil || p.Context == nil {
		return CallKey{}, false
	}
	return KeyFrom(p.Context)
}

// setStripeKey sets the ledger key as the idempotency key of a write.
func setStripeKey(method, path string, p *stripe.Params) error {
	if !isWrite(method) {
		return nil
	}
	k, ok := keyOf(p)
	if !ok {
		return fmt.Errorf("stripe %s %s: %w", method, path, ErrNoKey)
	}
	if p.IdempotencyKey != nil && *p.IdempotencyKey != k.Wire() {
		return fmt.Errorf("stripe %s %s: params carry another idempotency key than the ledger's", method, path)
	}
	// stripe-go applies params.Headers after the key, with Header.Set: an
	// Idempotency-Key there would replace the ledger's on the wire.
	for name, vals := range p.Headers {
		if http.CanonicalHeaderKey(name) != "Idempotency-Key" {
			continue
		}
		for _, v := range vals {
			if v != k.Wire() {
				return fmt.Errorf("stripe %s %s: params.Headers carry another idempotency key than the ledger's", method, path)
			}
		}
	}
	p.IdempotencyKey = stripe.String(k.Wire())
	return nil
}

// hasOwnMetadata reports whether the params struct has a Metadata field of
// its own (not only the deprecated one of the embedded stripe.Params): only
// then does the endpoint take metadata, and sending it elsewhere is a 400.
func hasOwnMetadata(params stripe.ParamsContainer) bool {
	t := reflect.TypeOf(params)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return false
	}
	f, ok := t.Elem().FieldByName("Metadata")
	return ok && len(f.Index) == 1 && f.Type == reflect.TypeOf(map[string]string(nil))
}

// addMetadata calls the params' own AddMetadata (the surrounding struct's,
// which shadows the deprecated one of stripe.Params).
func addMetadata(params stripe.ParamsContainer, key, value string) {
	if m, ok := params.(interface{ AddMetadata(string, string) }); ok {
		m.AddMetadata(key, value)
	}
}

// StripeParams prepares params for a write the way StripeBackend does, for
// callers that keep stripe-go's default backend: it sets the context, the
// ledger key as the idempotency key and metadata[metadata_local_id]. It
// returns params for chaining.
func StripeParams[P interface {
	stripe.ParamsContainer
	AddMetadata(string, string)
}](ctx context.Context, params P, key, localID string) P {
	p := params.GetParams()
	p.Context = WithKey(ctx, key, localID)
	p.IdempotencyKey = stripe.String(key)
	if hasOwnMetadata(params) {
		params.AddMetadata(MetadataLocalID, localID)
	}
	return params
}

// StripeResult turns what a stripe-go call returned into a Result: the
// object's id and its LastResponse (status, Idempotent-Replayed), or for a
// *stripe.Error its status, Stripe-Should-Retry and the object it names
// (the PaymentIntent of a declined card). An error that is not a Stripe
// answer (a timeout, a reset connection) gives a zero Result and the error,
// which Do reports as timeout or network_error. obj is the pointer a
// stripe-go call returns (*stripe.PaymentIntent, *stripe.Refund, …).
func StripeResult(obj any, err error) (Result, error) {
	var se *stripe.Error
	if errors.As(err, &se) {
		r := Result{HTTPStatus: se.HTTPStatusCode}
		if se.LastResponse != nil {
			r.Headers = pickHeaders(se.LastResponse.Header)
			if r.HTTPStatus == 0 {
				r.HTTPStatus = se.LastResponse.StatusCode
			}
		}
		switch {
		case se.PaymentIntent != nil:
			r.ReceiptID = se.PaymentIntent.ID
		case se.SetupIntent != nil:
			r.ReceiptID = se.SetupIntent.ID
		case se.ChargeID != "":
			r.ReceiptID = se.ChargeID
		}
		return r, err
	}
	// stripe-go sets LastResponse even when it cannot decode a 2xx body:
	// the vendor answered, so its status counts, whatever the decoding says.
	id, resp := stripeObject(obj)
	if resp == nil {
		if err == nil {
			err = errors.New("stripe result: the object has no LastResponse")
		}
		return Result{}, err
	}
	return Result{HTTPStatus: resp.StatusCode, ReceiptID: id, Headers: pickHeaders(resp.Header)}, err
}

// stripeObject reads ID and LastResponse of a stripe-go object. Reflection,
// because stripe-go's objects share fields (APIResource) but no getter.
func stripeObject(obj any) (string, *stripe.APIResponse) {
	v := reflect.ValueOf(obj)
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return "", nil
	}
	v = v.Elem()
	var id string
	if f := v.FieldByName("ID"); f.IsValid() && f.Kind() == reflect.String {
		id = f.String()
	}
	var resp *stripe.APIResponse
	if f := v.FieldByName("LastResponse"); f.IsValid() {
		resp, _ = f.Interface().(*stripe.APIResponse)
	}
	return id, resp
}
