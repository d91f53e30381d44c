package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// ErrNoKey means a write reached a keyed transport or backend without a
// ledger key in its context: sending it would let the vendor (or its SDK)
// treat it as a new intent.
var ErrNoKey = errors.New("write without a ledger key: wrap the context with client.WithKey (Do does)")

type keyCtx struct{}

// CallKey is the ledger key and local id of one vendor call.
type CallKey struct {
	Key     string
	LocalID string
	// VendorKey is the row's vendor_key: the key to put on the wire (the
	// vendor profile's derivation of Key; empty means Key).
	VendorKey string
}

// Wire is the key to send to the vendor: VendorKey, else Key.
func (k CallKey) Wire() string {
	if k.VendorKey != "" {
		return k.VendorKey
	}
	return k.Key
}

// WithCallKey returns ctx carrying k (WithKey with a vendor key); Do
// passes such a context to its call.
func WithCallKey(ctx context.Context, k CallKey) context.Context {
	return context.WithValue(ctx, keyCtx{}, k)
}

// WithKey returns ctx carrying the ledger key and the local id of a vendor
// call; Transport and StripeBackend read them from the request's context.
// Do passes such a context to its call.
func WithKey(ctx context.Context, key, localID string) context.Context {
	return context.WithValue(ctx, keyCtx{}, CallKey{Key: key, LocalID: localID})
}

// KeyFrom returns the key WithKey put into ctx.
func KeyFrom(ctx context.Context) (CallKey, bool) {
	k, ok := ctx.Value(keyCtx{}).(CallKey)
	return k, ok && k.Key != ""
}

// Transport is an http.RoundTripper that puts the vendor key of the
// request's context (CallKey.Wire: the row's vendor_key) on every write,
// for any vendor, where the vendor profile's idempotency placement says:
// in Header ("Idempotency-Key" for Stripe-like APIs, Resend, Zendesk,
// Adyen; "PayPal-Request-Id" for PayPal) and/or at BodyField of a JSON or
// form body (Square's "idempotency_key"; a dotted path such as
// "variables.input.id" reaches into a JSON body, Linear's client id). It overwrites a value already there, which
// a model may have supplied. A write (POST, PUT, PATCH, DELETE) without a
// key is refused with ErrNoKey; reads pass untouched.
type Transport struct {
	// Base sends the request (nil: http.DefaultTransport).
	Base http.RoundTripper
	// Header is the header that carries the key ("" for none).
	Header string
	// BodyField is the body field that carries the key ("" for none): a
	// form field, or a dotted path in a JSON object body.
	BodyField string
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !isWrite(req.Method) {
		return base.RoundTrip(req)
	}
	k, ok := KeyFrom(req.Context())
	if !ok {
		closeBody(req)
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), ErrNoKey)
	}
	out := req.Clone(req.Context())
	if t.Header != "" {
		out.Header.Set(t.Header, k.Wire())
	}
	if t.BodyField != "" {
		if err := setBodyField(out, t.BodyField, k.Wire()); err != nil {
			closeBody(req)
			return nil, fmt.Errorf("%s %s: put key in body field %s: %w", req.Method, req.URL.Redacted(), t.BodyField, err)
		}
	}
	return base.RoundTrip(out)
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// closeBody honours the RoundTripper contract: the body is closed even on error.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// setBodyField rewrites req's JSON object or form body with field = value.
func setBodyField(req *http.Request, field, value string) error {
	var data []byte
	if req.Body != nil {
		var err error
		if data, err = io.ReadAll(req.Body); err != nil {
			return err
		}
		req.Body.Close()
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	switch mt {
	case "application/x-www-form-urlencoded":
		vals, err := url.ParseQuery(string(data))
		if err != nil {
			return err
		}
		vals.Set(field, value)
		data = []byte(vals.Encode())
	default: // JSON, the common case; an empty body becomes {"field": key}
		obj := map[string]json.RawMessage{}
		if len(bytes.TrimSpace(data)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			if err := dec.Decode(&obj); err != nil {
				return fmt.Errorf("body is not a JSON object: %w", err)
			}
		}
		v, _ := json.Marshal(value)
		var err error
		if err = setJSONPath(obj, strings.Split(field, "."), v); err != nil {
			return err
		}
		if data, err = json.Marshal(obj); err != nil {
			return err
		}
		if req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	req.Body = io.NopCloser(bytes.NewReader(data))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	req.ContentLength = int64(len(data))
	req.Header.Set("Content-Length", strconv.Itoa(len(data)))
	return nil
}

// setJSONPath sets obj[path...] = v, making the objects on the way and
// keeping every other value as written.
func setJSONPath(obj map[string]json.RawMessage, path []string, v json.RawMessage) error {
	if len(path) == 1 {
		obj[path[0]] = v
		return nil
	}
	inner := map[string]json.RawMessage{}
	if raw, ok := obj[path[0]]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&inner); err != nil {
			return fmt.Errorf("%s is not a JSON object", path[0])
		}
	}
	if err := setJSONPath(inner, path[1:], v); err != nil {
		return err
	}
	b, err := json.Marshal(inner)
	if err != nil {
		return err
	}
	obj[path[0]] = b
	return nil
}

// ResultHeaders are the vendor headers a Result keeps (the classification
// reads them; others are not reported).
var ResultHeaders = []string{ledger.HeaderIdempotentReplayed, ledger.HeaderStripeShouldRetry}

// ResultFromResponse turns a vendor's HTTP answer into a Result: its status,
// receiptID (the object id the caller decoded from the body) and the
// headers the classification reads. It does not read or close the body.
func ResultFromResponse(resp *http.Response, receiptID string) Result {
	if resp == nil {
		return Result{}
	}
	return Result{HTTPStatus: resp.StatusCode, ReceiptID: receiptID, Headers: pickHeaders(resp.Header)}
}

func pickHeaders(h http.Header) map[string]string {
	var out map[string]string
	for _, name := range ResultHeaders {
		if v := h.Get(name); v != "" {
			if out == nil {
				out = make(map[string]string, len(ResultHeaders))
			}
			out[name] = v
		}
	}
	return out
}
