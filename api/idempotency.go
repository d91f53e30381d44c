package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
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
// key's record (ledger.IdempotencyTx).
type inFlight struct {
	mu   sync.Mutex
	reqs map[string]string // scope \x00 key hash → request fingerprint
}

func (f *inFlight) enter(id, fp string) error {
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
		f.reqs = map[string]string{}
	}
	f.reqs[id] = fp
	return nil
}

func (f *inFlight) leave(id string) {
	f.mu.Lock()
	delete(f.reqs, id)
	f.mu.Unlock()
}

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
		req.Body = io.NopCloser(bytes.NewReader(data))
		h := sha256.New()
		h.Write([]byte(req.Method + " " + req.URL.EscapedPath() + "\n"))
		h.Write(data)
		fp := hex.EncodeToString(h.Sum(nil))
		p := principalOf(c)
		scope := p.tenant
		if p.role == roleAdmin || scope == "" {
			scope = adminScope
		}
		i := ledger.Idempotency{Scope: scope, KeyHash: ledger.IdempotencyKeyHash(v), Request: fp, At: s.now()}
		id := scope + "\x00" + i.KeyHash
		if err := s.inFlight.enter(id, fp); err != nil {
			return err
		}
		defer s.inFlight.leave(id)
		c.SetRequest(req.WithContext(ledger.WithIdempotency(req.Context(), i)))
		return next(c)
	}
}
