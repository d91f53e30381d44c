package ledger

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxActorLen caps Freeze.Actor.
const maxActorLen = 255

// Freeze is one entry of the kill switch (docs/architecture.md §4): while it
// exists, claims of the tenant whose tool or tool class is Target insert no
// row (stop, tool_frozen), and open rows answer wait instead of
// retry_same_key. Settled rows are unaffected: a succeeded row still
// replays, because replaying a stored receipt calls no vendor.
type Freeze struct {
	Tenant string `json:"tenant"`
	// Target is a tool name, or a tool class (write_idempotent,
	// write_ledger, write_irreversible), which covers every tool of the
	// class. Both share the tool charset; a tool named like a class would
	// be covered by the class's entry, so name tools after their vendor
	// call (stripe.create_payment_intent), as the design does.
	Target string `json:"target"`
	// Actor says who froze it; Note says why (both required).
	Actor string    `json:"actor"`
	Note  string    `json:"note"`
	At    time.Time `json:"at"`
}

// TargetIsClass reports whether the freeze covers a whole tool class.
func (f Freeze) TargetIsClass() bool { return ToolClass(f.Target).Valid() }

// Covers reports whether f stops claims of tool (of class) for tenant.
func (f Freeze) Covers(tenant, tool string, class ToolClass) bool {
	return f.Tenant == tenant && (f.Target == tool || f.Target == string(class))
}

// Validate checks the entry's shape. Errors are ErrInvalidFreeze with a
// detail that never quotes the input.
func (f Freeze) Validate() error {
	if err := ValidateFreezeID(f.Tenant, f.Target); err != nil {
		return err
	}
	if f.Actor == "" || len(f.Actor) > maxActorLen || !utf8.ValidString(f.Actor) || strings.IndexFunc(f.Actor, unicode.IsControl) >= 0 {
		return ErrInvalidFreeze.With("actor must be 1-%d bytes of UTF-8 without control characters", maxActorLen)
	}
	if strings.TrimSpace(f.Note) == "" || len(f.Note) > MaxNoteLen || !utf8.ValidString(f.Note) || hasNUL(f.Note) {
		return ErrInvalidFreeze.With("note is required (say why), at most %d bytes of UTF-8 without NUL", MaxNoteLen)
	}
	if f.At.IsZero() {
		return ErrInvalidFreeze.With("at is required")
	}
	return nil
}

// ValidateFreezeID checks the tenant and target that name a freeze.
func ValidateFreezeID(tenant, target string) error {
	if ValidateTenant(tenant) != nil {
		return ErrInvalidFreeze.With("tenant: want 1-128 of [A-Za-z0-9_-]")
	}
	if validateTool(target) != nil {
		return ErrInvalidFreeze.With("target: want a tool (1-128 of [A-Za-z0-9_.-]) or a tool class")
	}
	return nil
}

// CompareFreezes orders freezes by tenant, then target (byte order): the
// order of ListFreezes.
func CompareFreezes(a, b Freeze) int {
	if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	return strings.Compare(a.Target, b.Target)
}

// Freezes is the durable kill switch of a store. Every write is durable
// before it returns, like every other write of the store; replicas sharing
// a store see each other's entries on their next ListFreezes.
type Freezes interface {
	// PutFreeze inserts or replaces the entry for f's tenant and target.
	// Errors: ErrInvalidFreeze, ErrUnavailable.
	PutFreeze(ctx context.Context, f Freeze) error
	// DeleteFreeze removes the entry; removing one that does not exist is
	// not an error. Errors: ErrInvalidFreeze, ErrUnavailable.
	DeleteFreeze(ctx context.Context, tenant, target string) error
	// ListFreezes returns every entry of every tenant, ordered by
	// CompareFreezes (the kill switch is small: one entry per frozen tool).
	// Errors: ErrUnavailable.
	ListFreezes(ctx context.Context) ([]Freeze, error)
}
