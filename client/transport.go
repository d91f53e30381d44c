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

// Transport is an http.RoundTripper that puts the ledger key of the
// request's context (WithKey) on every write, for any vendor: in Header
// ("Idempotency-Key" for Stripe-like APIs and Resend, "PayPal-Request-Id"
// for PayPal) and/or in the top-level BodyField of a JSON or form body
// (Square's "idempotency_key"). It overwrites a value already there, which
// a model may have supplied. A write (POST, PUT, PATCH, DELETE) without a
// key is refused with ErrNoKey; reads pass untouched.
type Transport struct {
	// Base sends the request (nil: http.DefaultTransport).
	Base http.RoundTripper
	// Header is the header that carries the key ("" for none).
	Header string
	// BodyField is the top-level body field that carries the key ("" for none).
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
		out.Header.Set(t.Header, k.Key)
	}
	if t.BodyField != "" {
		if err := setBodyField(out, t.BodyField, k.Key); err != nil {
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
		obj[field] = v
		var err error
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
