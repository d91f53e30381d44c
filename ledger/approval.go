package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultApprovalTTL is how long an approval request waits for a human
// before it expires (config approvals.ttl).
const DefaultApprovalTTL = 24 * time.Hour

// Gate is what the registry and a tool's policy decided for one claim
// (docs/architecture.md §11). It is computed outside the ledger, like Frozen,
// and decides only what a claim with no row does; a row keeps the gate it
// was inserted under. The zero Gate is autonomous.
type Gate struct {
	// Autonomy is the claim's effective autonomy ("": autonomous).
	Autonomy Autonomy
	// Reason says why the claim needs approval (required for approval).
	Reason string
	// ApprovalTTL is how long the approval request lives (0: DefaultApprovalTTL).
	ApprovalTTL time.Duration
	// RequestedBy is the fingerprint of the token that made the claim
	// (never the token), so that token cannot approve it.
	RequestedBy string
}

// Validate checks the gate's shape.
func (g Gate) Validate() error {
	if g.Autonomy != "" && !g.Autonomy.Valid() {
		return ErrInvalidRequest.With("gate autonomy %q", g.Autonomy)
	}
	if g.Autonomy == AutonomyApproval && strings.TrimSpace(g.Reason) == "" {
		return ErrInvalidRequest.With("an approval gate needs a reason")
	}
	if len(g.Reason) > MaxNoteLen || !freeTextNL(g.Reason) {
		return ErrInvalidRequest.With("gate reason: at most %d bytes of UTF-8 without NUL", MaxNoteLen)
	}
	if g.ApprovalTTL < 0 {
		return ErrInvalidRequest.With("negative approval ttl")
	}
	if !printableASCII(g.RequestedBy, 0, MaxIDLen) {
		return ErrInvalidRequest.With("gate requested_by")
	}
	return nil
}

func (g Gate) ttl() time.Duration {
	if g.ApprovalTTL <= 0 {
		return DefaultApprovalTTL
	}
	return g.ApprovalTTL
}

// ApprovalState is where an approval request stands.
type ApprovalState string

// The states of an approval: requested, then granted, denied or expired.
const (
	ApprovalRequested ApprovalState = "requested"
	ApprovalGranted   ApprovalState = "granted"
	ApprovalDenied    ApprovalState = "denied"
	ApprovalExpired   ApprovalState = "expired"
)

// Approval is the approval record on a row whose claim needed a human: a
// new key of a gated tool is inserted pending at attempt 0 with an approval
// requested, and no vendor call may start until it is granted.
type Approval struct {
	// ID names the approval in /v1/approvals/{id}: ApprovalID(tenant, key).
	ID    string        `json:"id"`
	State ApprovalState `json:"state"`
	// Reason says why the claim needs approval (the checklist, the class,
	// the autonomy asked for, or the policy that was false).
	Reason      string    `json:"reason"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// RequestedBy is the fingerprint of the token that made the claim.
	RequestedBy string `json:"requested_by,omitempty"`
	// Actor and Note are the decider's words; DecidedBy the fingerprint of
	// the token that decided (empty for an expiry).
	Actor     string    `json:"actor,omitempty"`
	Note      string    `json:"note,omitempty"`
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
}

// ApprovalID is the id of the approval of tenant's key: "ap_" and 32 hex
// characters of a hash of both, so a row has one approval id for life and
// every store finds the same one.
func ApprovalID(tenant, key string) string {
	sum := sha256.Sum256([]byte("reconciler approval\x00" + tenant + "\x00" + key))
	return "ap_" + hex.EncodeToString(sum[:16])
}

// ValidateApprovalID checks the shape of an approval id.
func ValidateApprovalID(id string) error {
	rest, ok := strings.CutPrefix(id, "ap_")
	if !ok || len(rest) != 32 || strings.Trim(rest, "0123456789abcdef") != "" {
		return ErrInvalidApprovalID
	}
	return nil
}

// ApprovalOpen reports whether r's approval waits for a human: requested,
// on a row still pending. Open approvals, and only they, are in a store's
// approval index (ListApprovals), by expiry.
func (r Row) ApprovalOpen() bool {
	return r.Approval != nil && r.Approval.State == ApprovalRequested && r.Status == StatusPending
}

// Verdict is what an ApprovalDecision does.
type Verdict string

// The verdicts: a human's grant or denial, or the clock's expiry.
const (
	VerdictGrant  Verdict = "grant"
	VerdictDeny   Verdict = "deny"
	VerdictExpire Verdict = "expire"
)

// ApprovalDecision is a human's (or the expiry job's) decision on one
// approval.
type ApprovalDecision struct {
	// Tenant is the decider's tenant; "" for an admin token or the expiry
	// job, which act for any tenant. Another tenant's approval is
	// ErrApprovalNotFound.
	Tenant  string
	ID      string
	Verdict Verdict
	// Actor says who decided (required for grant and deny); Note why
	// (required for deny).
	Actor, Note string
	// By is the fingerprint of the deciding token; it must not be the one
	// that made the claim.
	By string
	At time.Time
}

// Validate checks the decision's shape.
func (d ApprovalDecision) Validate() error {
	if d.Tenant != "" {
		if err := ValidateTenant(d.Tenant); err != nil {
			return err
		}
	}
	if err := ValidateApprovalID(d.ID); err != nil {
		return err
	}
	switch d.Verdict {
	case VerdictGrant, VerdictDeny, VerdictExpire:
	default:
		return ErrInvalidApproval.With("verdict %q", d.Verdict)
	}
	if d.Verdict != VerdictExpire && (strings.TrimSpace(d.Actor) == "" || !freeText(d.Actor, maxActorLen)) {
		return ErrInvalidApproval.With("actor: say who decides (1-%d bytes of UTF-8 without control characters)", maxActorLen)
	}
	if d.Verdict == VerdictDeny && strings.TrimSpace(d.Note) == "" {
		return ErrInvalidApproval.With("note: say why the call is denied")
	}
	if len(d.Note) > MaxNoteLen || !freeTextNL(d.Note) {
		return ErrInvalidApproval.With("note: at most %d bytes of UTF-8 without NUL", MaxNoteLen)
	}
	if !printableASCII(d.By, 0, MaxIDLen) {
		return ErrInvalidApproval.With("by")
	}
	if d.At.IsZero() {
		return ErrInvalidApproval.With("at is required")
	}
	return nil
}

// freeTextNL is UTF-8 without NUL (notes may span lines).
func freeTextNL(s string) bool { return !hasNUL(s) && utf8.ValidString(s) }

// Errors of the approval gate.
var (
	// ErrApprovalNotFound: no approval with this id for the caller's
	// tenant. It matches ErrNotFound.
	ErrApprovalNotFound = fmt.Errorf("%w: no such approval", ErrNotFound)
	// ErrApprovalDecided: the approval was granted, denied or expired
	// before.
	ErrApprovalDecided = errors.New("the approval is already decided")
	// ErrApprovalExpired: the request's time ran out; it can no longer be
	// granted or denied.
	ErrApprovalExpired = errors.New("the approval request has expired")
	// ErrSelfApproval: the token that made the claim may not decide it.
	ErrSelfApproval = errors.New("the token that made the claim may not decide its approval")
	// ErrInvalidApproval rejects an approval decision's shape.
	ErrInvalidApproval = &InvalidError{Field: "approval"}
	// ErrInvalidApprovalID rejects an approval id.
	ErrInvalidApprovalID = &InvalidError{Field: "approval id", Reason: "want ap_ and 32 lower-case hex characters"}
)

// The event statuses of the approval gate, published on
// recon.<tenant>.<run_id>.<status> like a row status.
const (
	EventApprovalRequested = "approval_requested"
	EventApproved          = "approved"
	EventDenied            = "denied"
	EventApprovalExpired   = "approval_expired"
)

// Stop codes of a claim whose approval was denied or expired.
const (
	CodeApprovalDenied  = "approval_denied"
	CodeApprovalExpired = "approval_expired"
)

// ExpiryActor is the actor recorded when the clock, not a human, ends an
// approval request.
const ExpiryActor = "reconciler"

// awaitingRow is the row a claim of a gated tool inserts: pending at
// attempt 0 (no vendor call granted), no lease, its approval requested,
// and out of the resolver's way until the request expires.
func awaitingRow(c Claim) Row {
	row := c.Row.Clone()
	at := c.At.UTC()
	row.Attempt, row.PendingUntil, row.Autonomy = 0, time.Time{}, AutonomyApproval
	row.Approval = &Approval{
		ID: ApprovalID(row.Tenant, row.Key), State: ApprovalRequested, Reason: c.Gate.Reason,
		RequestedAt: at, ExpiresAt: at.Add(c.Gate.ttl()), RequestedBy: c.Gate.RequestedBy,
	}
	row.NextCheckAt = row.Approval.ExpiresAt
	return row
}

// approvalEvent is the outbox record of an approval transition of row.
func approvalEvent(row *Row, status string, src Source, at time.Time) Event {
	e := newEvent(row, status, src, "", at)
	a := *row.Approval
	e.Approval = &a
	return e
}

// DecideApproval applies d to row (as read inside the transaction; changed
// in place) and returns the change to write with it: d.Verdict on a
// requested approval of a row still pending at attempt 0 —
//
//	grant:  the approval is granted; the row stays pending, and the next
//	        claim of its key proceeds (once); event approved.
//	deny:   the approval is denied; the row is failed_poison, resolution
//	        source human; event denied.
//	expire: at or after expires_at only (else nothing changes): the
//	        approval expires; the row is failed_poison, resolution source
//	        human (actor ExpiryActor); event approval_expired.
//
// Change.Event is set whenever an outbox record is to be written, even
// for a grant, whose status does not change. An expiry of an approval
// already decided changes nothing and is not an error (the expiry job and
// a human may race); a grant or denial of one is ErrApprovalDecided, and
// one at or after expires_at is ErrApprovalExpired. A row that left
// pending meanwhile (a runtime reported a call it was told not to make)
// cannot be granted or denied (ErrInvalidTransition); its expiry only
// closes the approval. The token that made the claim gets ErrSelfApproval.
func DecideApproval(row *Row, d ApprovalDecision) (Change, error) {
	if err := d.Validate(); err != nil {
		return Change{}, err
	}
	a := row.Approval
	if a == nil || a.ID != d.ID || d.Tenant != "" && row.Tenant != d.Tenant {
		return Change{}, ErrApprovalNotFound
	}
	at := d.At.UTC()
	ch := Change{From: row.Status, To: row.Status}
	if a.State != ApprovalRequested {
		if d.Verdict == VerdictExpire {
			return ch, nil
		}
		return ch, fmt.Errorf("%w: it was %s", ErrApprovalDecided, a.State)
	}
	expired := !at.Before(a.ExpiresAt)
	if d.Verdict == VerdictExpire {
		if !expired {
			return ch, nil
		}
	} else {
		if expired {
			return ch, fmt.Errorf("%w: it expired at %s", ErrApprovalExpired, a.ExpiresAt.Format(time.RFC3339))
		}
		if a.RequestedBy != "" && d.By == a.RequestedBy {
			return ch, ErrSelfApproval
		}
	}
	if row.Status != StatusPending || row.Attempt != 0 {
		if d.Verdict != VerdictExpire {
			return ch, fmt.Errorf("%w: the row is %s and no longer waits for approval", ErrInvalidTransition, row.Status)
		}
		closeApproval(row, ApprovalExpired, ExpiryActor, "expired after the row left pending", "", at)
		return ch, nil
	}
	switch d.Verdict {
	case VerdictGrant:
		closeApproval(row, ApprovalGranted, d.Actor, d.Note, d.By, at)
		e := approvalEvent(row, EventApproved, SourceHuman, at)
		ch.Event = &e
	case VerdictDeny:
		closeApproval(row, ApprovalDenied, d.Actor, d.Note, d.By, at)
		settleGated(row, &ch, d.Actor, d.Note, at)
		e := approvalEvent(row, EventDenied, SourceHuman, at)
		ch.Event = &e
	case VerdictExpire:
		expire(row, &ch, at)
	}
	return ch, nil
}

// expire ends row's requested approval at at: approval expired, row
// failed_poison, and the approval_expired event in ch.
func expire(row *Row, ch *Change, at time.Time) {
	note := "approval request expired unanswered"
	closeApproval(row, ApprovalExpired, ExpiryActor, note, "", at)
	settleGated(row, ch, ExpiryActor, note, at)
	e := approvalEvent(row, EventApprovalExpired, SourceHuman, at)
	ch.Event = &e
}

func closeApproval(row *Row, state ApprovalState, actor, note, by string, at time.Time) {
	a := *row.Approval
	a.State, a.Actor, a.Note, a.DecidedBy, a.DecidedAt = state, actor, note, by, at
	row.Approval = &a
	row.UpdatedAt = at
}

// settleGated makes a row whose call was never made failed_poison, closed
// by a human (the approver, or the approver's silence).
func settleGated(row *Row, ch *Change, actor, note string, at time.Time) {
	row.Status, row.UpdatedAt, row.NextCheckAt = StatusFailedPoison, at, time.Time{}
	row.Resolution = &Resolution{Source: SourceHuman, Actor: actor, Note: note, At: at}
	ch.To, ch.Changed = StatusFailedPoison, true
}

// stopCode is the code of a stop on a failed_poison row: why it failed. A
// row the approval gate closed (its resolution is the denial or expiry
// itself) says so; any other is failed_poison.
func stopCode(row *Row) string {
	a, res := row.Approval, row.Resolution
	if a != nil && res != nil && res.Source == SourceHuman && res.At.Equal(a.DecidedAt) {
		switch a.State {
		case ApprovalDenied:
			return CodeApprovalDenied
		case ApprovalExpired:
			return CodeApprovalExpired
		}
	}
	return CodeFailedPoison
}

// ApprovalQuery selects a page of open approvals (ApprovalOpen), soonest
// to expire first.
type ApprovalQuery struct {
	// Tenant selects one tenant's approvals; "" every tenant's.
	Tenant string
	// DueBy keeps only approvals that expire at or before it (the expiry
	// job); zero keeps all.
	DueBy time.Time
	// Limit is 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the NextCursor of the previous page.
	Cursor string
}

// Validate checks the query and fills the default limit.
func (q *ApprovalQuery) Validate() error {
	if q.Tenant != "" {
		if err := ValidateTenant(q.Tenant); err != nil {
			return err
		}
	}
	return validatePage(&q.Limit, q.Cursor)
}

// ApprovalPage is one page of rows with open approvals; NextCursor is
// empty on the last page.
type ApprovalPage struct {
	Rows       []Row
	NextCursor string
}

// EncodeApprovalCursor makes the opaque cursor of an approval page whose
// last row is r, for the query's tenant ("" for every tenant): the
// position (expires_at, tenant, key) under the list cursor's scheme.
func EncodeApprovalCursor(queryTenant string, r Row) string {
	return EncodeListCursor("approvals\x00"+queryTenant, r.Approval.ExpiresAt, r.Tenant+"\x00"+r.Key)
}

// DecodeApprovalCursor returns the position EncodeApprovalCursor put in
// cursor for the same query tenant. Anything else is ErrInvalidListQuery.
func DecodeApprovalCursor(queryTenant, cursor string) (expires time.Time, tenant, key string, err error) {
	at, pos, err := decodeListPosition("approvals\x00"+queryTenant, cursor)
	if err != nil {
		return time.Time{}, "", "", err
	}
	tenant, key, ok := strings.Cut(pos, "\x00")
	if !ok || ValidateTenant(tenant) != nil || ValidateKey(key) != nil {
		return time.Time{}, "", "", ErrInvalidListQuery.With("cursor")
	}
	return at, tenant, key, nil
}

// CompareApprovals orders rows with open approvals by expires_at, then
// tenant, then key: the order of ListApprovals.
func CompareApprovals(a, b Row) int {
	if c := a.Approval.ExpiresAt.Compare(b.Approval.ExpiresAt); c != 0 {
		return c
	}
	if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// Approvals is the approval gate's part of a store. DecideApproval is one
// of the flows (Flows.DecideApproval); the reads are each store's.
type Approvals interface {
	// DecideApproval applies one decision (ledger.DecideApproval) to the
	// row holding the approval, and writes the row and its outbox record
	// in one transaction. Errors: ErrApprovalNotFound, ErrApprovalDecided,
	// ErrApprovalExpired, ErrSelfApproval, ErrInvalidTransition,
	// ErrInvalid, ErrUnavailable.
	DecideApproval(ctx context.Context, d ApprovalDecision) (Row, Change, error)
	// GetApproval returns the row holding the approval (any state).
	// Errors: ErrApprovalNotFound, ErrInvalid, ErrUnavailable.
	GetApproval(ctx context.Context, id string) (Row, error)
	// ListApprovals returns rows whose approval is open, soonest to expire
	// first, one page at a time, through an index of open approvals by
	// expiry: O(page), never O(rows). Errors: ErrInvalidListQuery,
	// ErrUnavailable.
	ListApprovals(ctx context.Context, q ApprovalQuery) (ApprovalPage, error)
}
