package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// A request's Idempotency-Key (draft-ietf-httpapi-idempotency-key-header)
// reaches the flows in its context (WithIdempotency). A flow run with one
// reads the key's record first and writes it in the same transaction as the
// row, so a request whose answer was lost can be sent again and get that
// answer instead of a second run:
//
//   - a claim or a worker's start: while the lease the first send was
//     granted still runs and nothing was reported since, the resend gets
//     the same proceed (or retry_same_key), the same attempt and the same
//     pending_until; after that, the claim table as without the header;
//   - an outcome, an approval decision, a resolution by hand: the resend
//     applies nothing and gets the row as it is now;
//   - the same value with another request: ErrIdempotencyKeyReused.
//
// The value itself is never stored: the record is filed under its SHA-256
// (IdempotencyKeyHash), scoped to the caller's tenant.

// Idempotency-Key value limits: a UUID (36) or 128 random bits in any text
// form fits.
const (
	MinIdempotencyKeyLen = 16
	MaxIdempotencyKeyLen = 255
)

// DefaultIdempotencyRetention is how long a store keeps an Idempotency-Key
// record after its last write (the service prunes older ones). It must be
// at least the lease (Policy.PendingTTL): IdempotencyRetention makes sure.
const DefaultIdempotencyRetention = 24 * time.Hour

// IdempotencyRetention is how long records are kept under policy p: the
// default, or twice the lease when the lease is longer.
func IdempotencyRetention(p Policy) time.Duration {
	p = p.withDefaults()
	return max(DefaultIdempotencyRetention, 2*p.PendingTTL)
}

// ErrIdempotencyKeyReused means the Idempotency-Key was first sent with
// another request (another body, another route): the draft's 422.
var ErrIdempotencyKeyReused = errors.New("the Idempotency-Key was sent before with another request")

// ErrInvalidIdempotencyKey refuses a header value.
var ErrInvalidIdempotencyKey = &InvalidError{Field: "Idempotency-Key header",
	Reason: fmt.Sprintf("want %d-%d printable ASCII characters (a UUID or 128 random bits)", MinIdempotencyKeyLen, MaxIdempotencyKeyLen)}

// ValidateIdempotencyKey checks a header value (its quotes, if it was sent
// as a structured-field string, already removed).
func ValidateIdempotencyKey(v string) error {
	if !printableASCII(v, MinIdempotencyKeyLen, MaxIdempotencyKeyLen) {
		return ErrInvalidIdempotencyKey
	}
	return nil
}

// IdempotencyKeyHash is what a store files a header value under: its
// SHA-256 in hex. The value lets its holder proceed; the hash does not.
func IdempotencyKeyHash(value string) string {
	var in [MaxIdempotencyKeyLen]byte // hashed from the stack: no allocation
	sum := sha256.Sum256(in[:copy(in[:], value)])
	var buf [2 * sha256.Size]byte
	hex.Encode(buf[:], sum[:])
	return string(buf[:])
}

// Idempotency is a request's Idempotency-Key as the flows see it.
type Idempotency struct {
	// Scope is whose key it is: the caller's tenant (an admin's calls
	// share one scope). The same value in two scopes is two keys.
	Scope string
	// KeyHash is IdempotencyKeyHash of the header value.
	KeyHash string
	// Request fingerprints the request the key was sent with (method,
	// route, body): a resend must match it.
	Request string
	// At is when the request arrived (the record's retention counts from
	// its last write).
	At time.Time
}

// Validate checks the shape stores index on.
func (i Idempotency) Validate() error {
	if !printableASCII(i.Scope, 1, 128) || len(i.KeyHash) != 64 || !printableASCII(i.Request, 1, 128) {
		return ErrInvalidIdempotencyKey.With("scope, hash or request fingerprint")
	}
	return nil
}

type idempotencyCtxKey struct{}

// idempotencyCtx is ctx carrying an Idempotency: one allocation where
// context.WithValue would make two (the context and the boxed value), on
// the path of every keyed request. Every other key is its parent's.
type idempotencyCtx struct {
	context.Context
	i Idempotency
}

func (c *idempotencyCtx) Value(key any) any {
	if key == (idempotencyCtxKey{}) {
		return &c.i
	}
	return c.Context.Value(key)
}

// WithIdempotency returns ctx carrying the request's Idempotency-Key: the
// flows run with it read and write the key's record.
func WithIdempotency(ctx context.Context, i Idempotency) context.Context {
	return &idempotencyCtx{Context: ctx, i: i}
}

// IdempotencyFrom returns the Idempotency-Key ctx carries, if any.
func IdempotencyFrom(ctx context.Context) (Idempotency, bool) {
	if i, ok := ctx.Value(idempotencyCtxKey{}).(*Idempotency); ok {
		return *i, true
	}
	return Idempotency{}, false
}

// IdempotencyRecord is what a store keeps of one Idempotency-Key: the
// request it came with, the row it acted on and, for a claim, the lease it
// was last granted.
type IdempotencyRecord struct {
	Request string    `json:"request"`
	At      time.Time `json:"at"`
	Tenant  string    `json:"tenant"`
	Key     string    `json:"key"`
	// Decision, Inserted, Attempt and PendingUntil are a claim's answer:
	// a resend gets it again while that lease runs (ResendClaim).
	Decision     Decision  `json:"decision,omitempty"`
	Inserted     bool      `json:"inserted,omitempty"`
	Attempt      int       `json:"attempt,omitempty"`
	PendingUntil time.Time `json:"pending_until,omitzero"`
}

// IdempotencyTx is what a store's Tx adds for the Idempotency-Key: the
// record under a scope and key hash. Every store's Tx provides it; a flow
// run with an Idempotency-Key on a Tx without it fails.
type IdempotencyTx interface {
	// GetIdempotency returns the record or ErrNotFound. In a write
	// transaction it locks the key, as GetRow locks a row, so two sends of
	// one key serialise here.
	GetIdempotency(scope, keyHash string) (IdempotencyRecord, error)
	// PutIdempotency writes (or replaces) the record.
	PutIdempotency(scope, keyHash string, rec IdempotencyRecord) error
}

var errNoIdempotencyTx = errors.New("this store keeps no Idempotency-Key records")

// ResendClaim is the answer a resent claim (or start) gets from the record
// of its Idempotency-Key and the key's row as it is now: the first send's
// proceed or retry_same_key, with the row, while the lease it was granted
// still runs at now and nothing has been reported since (the row is open —
// pending, or unknown for a retry_same_key — at the same attempt with the
// same pending_until: an outcome ends the lease, moving pending_until). It
// reports false when the claim table must decide.
func ResendClaim(rec IdempotencyRecord, row *Row, now time.Time) (ClaimResult, bool) {
	if !rec.Decision.grants() || row == nil || !row.Status.Open() ||
		row.Attempt != rec.Attempt || !row.PendingUntil.Equal(rec.PendingUntil) || !now.Before(row.PendingUntil) {
		return ClaimResult{}, false
	}
	return ClaimResult{Decision: rec.Decision, Row: row.Clone(), Inserted: rec.Inserted}, true
}

// grants reports whether a decision hands the caller a lease to call.
func (d Decision) grants() bool { return d == DecisionProceed || d == DecisionRetrySameKey }

// ClaimRecord is the record a claim sent with i leaves: written with the
// first answer, and again whenever a later send of it is granted a lease.
func ClaimRecord(i Idempotency, res ClaimResult, tenant, key string) IdempotencyRecord {
	rec := IdempotencyRecord{Request: i.Request, At: i.At.UTC(), Tenant: tenant, Key: key, Decision: res.Decision}
	if res.Decision.grants() {
		rec.Inserted, rec.Attempt, rec.PendingUntil = res.Inserted, res.Row.Attempt, res.Row.PendingUntil
	}
	return rec
}

// UpdatesClaimRecord reports whether a claim answered res must write its
// record: the first send (found false) always, a later one when it was
// granted a lease.
func UpdatesClaimRecord(found bool, res ClaimResult) bool {
	return !found || res.Decision.grants()
}

// lookupIdempotency reads i's record in tx: found false when there is none,
// ErrIdempotencyKeyReused when it came with another request.
func lookupIdempotency(tx Tx, i Idempotency) (IdempotencyTx, IdempotencyRecord, bool, error) {
	if err := i.Validate(); err != nil {
		return nil, IdempotencyRecord{}, false, err
	}
	itx, ok := tx.(IdempotencyTx)
	if !ok {
		return nil, IdempotencyRecord{}, false, errNoIdempotencyTx
	}
	rec, err := itx.GetIdempotency(i.Scope, i.KeyHash)
	switch {
	case errors.Is(err, ErrNotFound):
		return itx, IdempotencyRecord{}, false, nil
	case err != nil:
		return nil, IdempotencyRecord{}, false, err
	case rec.Request != i.Request:
		return nil, IdempotencyRecord{}, false, ErrIdempotencyKeyReused
	}
	return itx, rec, true, nil
}

// idempotentClaimTx is claimTx for a claim sent with an Idempotency-Key.
func idempotentClaimTx(tx Tx, c Claim, p Policy, i Idempotency) (ClaimResult, error) {
	itx, rec, found, err := lookupIdempotency(tx, i)
	if err != nil {
		return ClaimResult{}, err
	}
	if found {
		var row *Row
		switch r, err := tx.GetRow(rec.Tenant, rec.Key); {
		case err == nil:
			row = &r
		case !errors.Is(err, ErrNotFound):
			return ClaimResult{}, err
		}
		if res, ok := ResendClaim(rec, row, c.At.UTC()); ok {
			return res, nil
		}
	}
	res, err := claimTx(tx, c, p)
	if err != nil {
		return res, err
	}
	if UpdatesClaimRecord(found, res) {
		if err := itx.PutIdempotency(i.Scope, i.KeyHash, ClaimRecord(i, res, c.Row.Tenant, c.Row.Key)); err != nil {
			return ClaimResult{}, err
		}
	}
	return res, nil
}

// idempotentRowTx runs a flow that changes one row (an outcome, an
// approval decision, a resolution) for a request sent with an
// Idempotency-Key: the first send runs it and records the row it changed;
// a resend runs nothing and gets the row as it is now, with no change.
func idempotentRowTx(tx Tx, i Idempotency, flow func(Tx) (Row, Change, error)) (Row, Change, error) {
	itx, rec, found, err := lookupIdempotency(tx, i)
	if err != nil {
		return Row{}, Change{}, err
	}
	if found {
		row, err := tx.GetRow(rec.Tenant, rec.Key)
		if err != nil {
			return Row{}, Change{}, err
		}
		return row, Change{From: row.Status, To: row.Status}, nil
	}
	row, ch, err := flow(tx)
	if err != nil {
		return row, ch, err
	}
	rec = IdempotencyRecord{Request: i.Request, At: i.At.UTC(), Tenant: row.Tenant, Key: row.Key}
	if err := itx.PutIdempotency(i.Scope, i.KeyHash, rec); err != nil {
		return Row{}, Change{}, err
	}
	return row, ch, nil
}
