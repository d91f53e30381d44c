package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/ledger"
)

// IdempotencyKeyHeader is the request header of
// draft-ietf-httpapi-idempotency-key-header: one value per logical call,
// sent again with every resend of that call (README "A lost answer").
const IdempotencyKeyHeader = "Idempotency-Key"

// adminScope is the scope of the values admin tokens send: they act for no
// one tenant, and share one scope.
const adminScope = "~admin"

// inFlight holds the Idempotency-Key values this server is answering
// right now, each with its request's fingerprint: a second send of a value
// while the first is processed is answered 409 without a second run. Sends
// to two replicas meet in the store instead, which serialises them on the
// key's record (ledger.IdempotencyTx). Entries are keyed by the value's
// SHA-256, not its hex text, so entering one allocates nothing.
type inFlight struct {
	mu   sync.Mutex
	reqs map[inFlightID][sha256.Size]byte // → request fingerprint
}

// inFlightID names one value: its scope and its SHA-256.
type inFlightID struct {
	scope string
	key   [sha256.Size]byte
}

func (f *inFlight) enter(id inFlightID, fp [sha256.Size]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if first, ok := f.reqs[id]; ok {
		if first != fp {
			return ledger.ErrIdempotencyKeyReused
		}
		return newError(http.StatusConflict, apierror.CodeIdempotencyKeyInFlight,
			"a request with this Idempotency-Key is still being answered; send it again shortly")
	}
	if f.reqs == nil {
		f.reqs = map[inFlightID][sha256.Size]byte{}
	}
	f.reqs[id] = fp
	return nil
}

func (f *inFlight) leave(id inFlightID) {
	f.mu.Lock()
	delete(f.reqs, id)
	f.mu.Unlock()
}

// readBodyOnce is the request body the middleware has read, handed to the
// route: readBody returns its bytes instead of copying them again.
type readBodyOnce struct {
	data []byte
	r    bytes.Reader
}

func (b *readBodyOnce) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *readBodyOnce) Close() error               { return nil }

// idempotencyKey reads the request's Idempotency-Key: absent (ok false),
// or its value, unquoted when it was sent as a structured-field string.
func idempotencyKey(r *http.Request) (string, bool, error) {
	vals := r.Header.Values(IdempotencyKeyHeader)
	if len(vals) == 0 {
		return "", false, nil
	}
	if len(vals) > 1 {
		return "", false, ledger.ErrInvalidIdempotencyKey.With("sent more than once")
	}
	v := strings.TrimSpace(vals[0])
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if err := ledger.ValidateIdempotencyKey(v); err != nil {
		return "", false, err
	}
	return v, true, nil
}

// idempotent is the Idempotency-Key middleware of the write routes. With
// no header the route runs as it always did. With one, it checks the
// value, reads the body (and hands it on), fingerprints the request
// (method, path, body; not the query: a resend may wait longer) and runs
// the route with the key in its context, where the store's flow finds it
// (ledger.WithIdempotency). The value is never logged or stored: only its
// SHA-256 reaches the store.
func (s *Server) idempotent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		v, ok, err := idempotencyKey(req)
		if err != nil {
			return err
		}
		if !ok {
			return next(c)
		}
		data, err := readBody(c, s.bodyLimit)
		if err != nil {
			return err
		}
		body := &readBodyOnce{data: data}
		body.r.Reset(data)
		req.Body = body
		fp := requestFingerprint(req.Method, req.URL.EscapedPath(), data)
		p := principalOf(c)
		scope := p.tenant
		if p.role == roleAdmin || scope == "" {
			scope = adminScope
		}
		id := inFlightID{scope: scope, key: keySum(v)}
		if err := s.inFlight.enter(id, fp); err != nil {
			return err
		}
		defer s.inFlight.leave(id)
		sums := hexStrings(id.key, fp)
		i := ledger.Idempotency{Scope: scope, KeyHash: sums[:2*sha256.Size], Request: sums[2*sha256.Size:], At: s.now()}
		// The key rides in the echo context, not in a copy of the request
		// (req.WithContext copies the whole http.Request on every keyed
		// request): the handlers take their context from requestContext.
		c.Set(idempotencyCtxKey, ledger.WithIdempotency(req.Context(), i))
		return next(c)
	}
}

// idempotencyCtxKey holds, in the echo context, the request's context with
// its Idempotency-Key (ledger.WithIdempotency).
const idempotencyCtxKey = "api.idempotency"

// requestContext is the context a handler runs its store calls in: the
// request's, with its Idempotency-Key when it was sent one. Every handler
// takes its context here, so none can miss the key.
func requestContext(c echo.Context) context.Context {
	if ctx, ok := c.Get(idempotencyCtxKey).(context.Context); ok {
		return ctx
	}
	return c.Request().Context()
}

// requestFingerprint is the SHA-256 of a request's method, path and body:
// a resend of a value must match the first send's. A request of up to
// 1 KiB (a claim's usual size) is hashed from the stack, allocating nothing.
func requestFingerprint(method, path string, body []byte) [sha256.Size]byte {
	var buf [1024]byte
	n := len(method) + len(path) + 2 + len(body)
	if n > len(buf) {
		h := sha256.New()
		h.Write([]byte(method + " " + path + "\n"))
		h.Write(body)
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		return sum
	}
	in := append(buf[:0], method...)
	in = append(in, ' ')
	in = append(in, path...)
	in = append(in, '\n')
	in = append(in, body...)
	return sha256.Sum256(in)
}

// keySum is the SHA-256 of a header value (ledger.IdempotencyKeyHash
// before its hex), hashed from the stack.
func keySum(v string) [sha256.Size]byte {
	var buf [ledger.MaxIdempotencyKeyLen]byte
	return sha256.Sum256(buf[:copy(buf[:], v)])
}

// hexStrings is a and b in lower-case hex, one after the other, in one
// allocation: the key's hash and the request's fingerprint are kept (or
// dropped) together.
func hexStrings(a, b [sha256.Size]byte) string {
	var buf [4 * sha256.Size]byte
	hex.Encode(buf[:2*sha256.Size], a[:])
	hex.Encode(buf[2*sha256.Size:], b[:])
	return string(buf[:])
}
