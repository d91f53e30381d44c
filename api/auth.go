package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/ledger"
)

// role is what a token may do; a route accepts a set of roles.
type role uint8

const (
	roleTenant role = 1 << iota
	roleAdmin
	// roleApprover decides a tenant's approval requests (config
	// tenants[].approver_tokens); it makes no claims.
	roleApprover
)

// principal is the authenticated caller: a tenant, an approver of a
// tenant, or an admin (no tenant). fp is the token's fingerprint, what an
// approval records of who asked and who decided: never the token.
type principal struct {
	tenant string
	role   role
	fp     string
}

type tokenEntry struct {
	sum [sha256.Size]byte
	p   principal
}

// fingerprint names a token in stored records without revealing it: a
// hash of its digest, so neither the token nor its digest (what the
// authenticator compares) can be read back from a row.
func fingerprint(sum [sha256.Size]byte) string {
	fp := sha256.Sum256(append([]byte("reconciler token fingerprint\x00"), sum[:]...))
	return "tok_" + hex.EncodeToString(fp[:8])
}

// authenticator maps bearer tokens to principals. It keeps only SHA-256
// digests, so every comparison is over 32 bytes whatever the token's length.
type authenticator struct {
	entries []tokenEntry
}

func newAuthenticator(tokens map[string]string, admin []string, approvers map[string]string) (*authenticator, error) {
	a := &authenticator{}
	seen := make(map[[sha256.Size]byte]bool)
	add := func(tok, tenant string, r role) error {
		if strings.TrimSpace(tok) == "" || strings.ContainsAny(tok, " \t\r\n") {
			return errors.New("a token is empty or contains white space")
		}
		sum := sha256.Sum256([]byte(tok))
		if seen[sum] {
			// A token that is both admin and tenant would make "tenant only
			// from the token" ambiguous; refuse it at start-up.
			return errors.New("a token is configured twice")
		}
		seen[sum] = true
		a.entries = append(a.entries, tokenEntry{sum: sum, p: principal{tenant: tenant, role: r, fp: fingerprint(sum)}})
		return nil
	}
	for tok, tenant := range tokens {
		if err := ledger.ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("tenant %q: %w", tenant, err)
		}
		if err := add(tok, tenant, roleTenant); err != nil {
			return nil, fmt.Errorf("tenant %q: %w", tenant, err)
		}
	}
	for _, tok := range admin {
		if err := add(tok, "", roleAdmin); err != nil {
			return nil, fmt.Errorf("admin tokens: %w", err)
		}
	}
	for tok, tenant := range approvers {
		if err := ledger.ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("approver of %q: %w", tenant, err)
		}
		if err := add(tok, tenant, roleApprover); err != nil {
			return nil, fmt.Errorf("approver of %q: %w", tenant, err)
		}
	}
	if len(a.entries) == 0 {
		return nil, errors.New("no tokens configured")
	}
	return a, nil
}

// lookup finds the token's principal. It compares against every entry in
// constant time and never stops early, so timing says nothing about which
// (or whether a) token matched.
//
// The principal is the entry's own, never changed after start-up: the
// request's echo context holds the pointer, which costs no allocation.
func (a *authenticator) lookup(token string) (*principal, bool) {
	var in [256]byte // a token of usual length is hashed from the stack
	var sum [sha256.Size]byte
	if len(token) <= len(in) {
		sum = sha256.Sum256(in[:copy(in[:], token)])
	} else {
		sum = sha256.Sum256([]byte(token))
	}
	var found *principal
	match := 0
	for i := range a.entries {
		eq := subtle.ConstantTimeCompare(sum[:], a.entries[i].sum[:])
		if eq == 1 {
			found = &a.entries[i].p
		}
		match |= eq
	}
	return found, match == 1
}

const principalKey = "api.principal"

// authenticate admits requests whose bearer token has one of the roles. An
// unknown or missing token is 401; a known token of the wrong role is 403
// (whether a token is an admin token is not a secret of any row).
func (s *Server) authenticate(allowed role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, ok := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="reconciler"`)
				return errUnauthorized
			}
			p, ok := s.auth.lookup(token)
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="reconciler", error="invalid_token"`)
				return errUnauthorized
			}
			if p.role&allowed == 0 {
				switch {
				case p.role == roleAdmin:
					return newError(http.StatusForbidden, apierror.CodeForbidden, "an admin token cannot act as a tenant on this route")
				case p.role == roleApprover:
					return newError(http.StatusForbidden, apierror.CodeForbidden, "an approver token only reads and decides approvals")
				case allowed&roleApprover != 0:
					return newError(http.StatusForbidden, apierror.CodeForbidden, "this route needs an approver or admin token")
				}
				return newError(http.StatusForbidden, apierror.CodeForbidden, "this route needs an admin token")
			}
			c.Set(principalKey, p)
			return next(c)
		}
	}
}

var errUnauthorized = newError(http.StatusUnauthorized, apierror.CodeUnauthorized, "missing or unknown bearer token")

// bearer extracts the token of an `Authorization: Bearer <token>` header;
// the scheme is case-insensitive (RFC 7235).
func bearer(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(scheme):])
	return tok, tok != ""
}

func principalOf(c echo.Context) principal {
	if p, ok := c.Get(principalKey).(*principal); ok {
		return *p
	}
	return principal{}
}

// tenantFor returns the tenant a read acts for: the token's own, or for an
// admin token the one named by ?tenant=. A tenant token that names another
// tenant is refused rather than silently narrowed to its own.
func tenantFor(c echo.Context) (string, error) {
	p := principalOf(c)
	q := c.QueryParam("tenant")
	if p.role == roleAdmin {
		if q == "" {
			return "", newError(http.StatusBadRequest, apierror.CodeInvalidInput, "an admin token must name the tenant with ?tenant=")
		}
		if err := ledger.ValidateTenant(q); err != nil {
			return "", err
		}
		return q, nil
	}
	if q != "" && q != p.tenant {
		return "", newError(http.StatusForbidden, apierror.CodeForbidden, "a tenant token reads only its own tenant")
	}
	return p.tenant, nil
}
