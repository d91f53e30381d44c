package ledger

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ClassRead is the class of a registered tool that changes nothing at the
// vendor. A read is registered so the registry lists every tool an agent
// has (the MCP gate passes reads through), but it is never claimed: a claim
// names one of the write classes, so a claim of a read tool is a mismatch.
const ClassRead ToolClass = "read"

// registryClass reports whether c may be a registered tool's class: read
// or one of the write classes.
func registryClass(c ToolClass) bool { return c == ClassRead || c.Valid() }

// Autonomy is how far a tool may act without a human (docs/architecture.md §11).
type Autonomy string

// The autonomies a tool may ask for, and a claim may be granted.
const (
	// AutonomyAutonomous: a claim proceeds at once (the §4 table).
	AutonomyAutonomous Autonomy = "autonomous"
	// AutonomyApproval: a new key waits for a human (await_approval) and
	// proceeds once after a recorded grant.
	AutonomyApproval Autonomy = "approval"
	// AutonomyOutbox: a new key is queued as a work item; the runtime's
	// worker makes the call, the agent never does (queued).
	AutonomyOutbox Autonomy = "outbox"
)

// Valid reports whether a is one of the three autonomies.
func (a Autonomy) Valid() bool {
	switch a {
	case AutonomyAutonomous, AutonomyApproval, AutonomyOutbox:
		return true
	}
	return false
}

// KeyPlacement says where the runtime puts the idempotency key in the
// vendor call: exactly one of the fields is set.
type KeyPlacement struct {
	// Header is an HTTP request header (Idempotency-Key, PayPal-Request-Id).
	Header string `json:"header,omitempty"`
	// BodyField is a field of the request body (idempotency_key).
	BodyField string `json:"body_field,omitempty"`
	// ExternalIDField is a vendor field that must be unique (client_ref):
	// the vendor refuses a second object with the same value.
	ExternalIDField string `json:"external_id_field,omitempty"`
	// Argument is an argument of an MCP tool call (the MCP gate fills it).
	Argument string `json:"argument,omitempty"`
	// None: the vendor takes no key; the ledger is the only gate.
	None bool `json:"none,omitempty"`
}

// set returns the names of the placements that are set.
func (k KeyPlacement) set() []string {
	var s []string
	for _, p := range []struct {
		name string
		on   bool
	}{
		{"header", k.Header != ""}, {"body_field", k.BodyField != ""}, {"external_id_field", k.ExternalIDField != ""},
		{"argument", k.Argument != ""}, {"none", k.None},
	} {
		if p.on {
			s = append(s, p.name)
		}
	}
	return s
}

// Checklist is the seed's list of what makes a write safe to run without a
// human. Each box is checked by a person (CheckedBy, CheckedAt); any open
// box makes the tool's effective autonomy approval.
type Checklist struct {
	SideEffectDocumented  bool `json:"side_effect_documented"`
	KeyBornInRuntime      bool `json:"key_born_in_runtime"`
	LedgerOrUniqueField   bool `json:"ledger_or_unique_field"`
	TimeoutLeavesUnknown  bool `json:"timeout_leaves_unknown"`
	ErrorClassesMapped    bool `json:"error_classes_mapped"`
	DuplicateDeliveryTest bool `json:"duplicate_delivery_test"`
	// CheckedBy says who checked the boxes (required once one is checked);
	// CheckedAt when (the time of the PUT that changed them, when not given).
	CheckedBy string    `json:"checked_by,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
}

// boxes lists the checklist's boxes with their JSON names, in order.
func (c Checklist) boxes() []struct {
	name string
	on   bool
} {
	return []struct {
		name string
		on   bool
	}{
		{"side_effect_documented", c.SideEffectDocumented}, {"key_born_in_runtime", c.KeyBornInRuntime},
		{"ledger_or_unique_field", c.LedgerOrUniqueField}, {"timeout_leaves_unknown", c.TimeoutLeavesUnknown},
		{"error_classes_mapped", c.ErrorClassesMapped}, {"duplicate_delivery_test", c.DuplicateDeliveryTest},
	}
}

// Open returns the names of the boxes not checked, in the list's order.
func (c Checklist) Open() []string {
	var open []string
	for _, b := range c.boxes() {
		if !b.on {
			open = append(open, b.name)
		}
	}
	return open
}

// anyChecked reports whether at least one box is checked.
func (c Checklist) anyChecked() bool { return len(c.Open()) < len(c.boxes()) }

// sameBoxes reports whether two checklists check the same boxes.
func (c Checklist) sameBoxes(o Checklist) bool {
	a, b := c, o
	a.CheckedBy, a.CheckedAt, b.CheckedBy, b.CheckedAt = "", time.Time{}, "", time.Time{}
	return a == b
}

// Limits of a registry entry.
const (
	MaxPolicyLen       = 4096
	maxSideEffectLen   = 128
	maxIntentFields    = 64
	maxPlacementLen    = 128
	maxCheckedByLen    = 255
	maxIntentFieldLen  = 128
	headerTokenSpecial = "!#$%&'*+-.^_`|~"
)

// Tool is one entry of a tenant's tool registry (docs/architecture.md §11): what
// a tool does and how far it may act without a human. Version, CreatedAt
// and UpdatedAt are the store's; the rest is the entry as registered.
type Tool struct {
	Tenant string `json:"tenant"`
	// Name is what claims name as tool.
	Name   string    `json:"name"`
	Vendor string    `json:"vendor"`
	Class  ToolClass `json:"class"`
	// SideEffect says what a write does (email, charge, crm_write, …);
	// free text, required for writes.
	SideEffect   string       `json:"side_effect,omitempty"`
	KeyPlacement KeyPlacement `json:"key_placement"`
	// IntentFields are the arguments that define the side effect, when the
	// runtime should not take every argument as the intent.
	IntentFields []string  `json:"intent_fields,omitempty"`
	Checklist    Checklist `json:"checklist"`
	// Autonomy is the autonomy asked for; EffectiveAutonomy is what the
	// rules grant.
	Autonomy Autonomy `json:"autonomy"`
	// Policy is a CEL expression over intent, tool, run_id and tenant; a
	// claim for which it is false goes to approval. Empty: no policy.
	Policy string `json:"policy,omitempty"`
	// Version counts the changes of the entry: 1 when registered, one more
	// for every PUT that changed it.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the entry last changed; a PutTool caller sets it
	// to the time of the change.
	UpdatedAt time.Time `json:"updated_at"`
}

// Clone returns a deep copy.
func (t Tool) Clone() Tool {
	t.IntentFields = slices.Clone(t.IntentFields)
	return t
}

// ErrInvalidToolEntry rejects a registry entry; its detail names the field.
var ErrInvalidToolEntry = &InvalidError{Field: "tool"}

// ErrInvalidPolicy rejects a policy that does not compile (package policy
// details it with each problem's line and column).
var ErrInvalidPolicy = &InvalidError{Field: "policy", Reason: "not a boolean CEL expression over intent, tool, run_id and tenant"}

func invalidTool(field, format string, args ...any) *InvalidError {
	return (&InvalidError{Field: field, of: ErrInvalidToolEntry}).With(format, args...)
}

// Validate checks the entry's shape (the policy's syntax is the policy
// package's to check). Every error is an *InvalidError whose Field names
// the entry's field (class, side_effect, key_placement, …).
func (t Tool) Validate() error {
	if err := ValidateToolID(t.Tenant, t.Name); err != nil {
		return err
	}
	if ValidateVendor(t.Vendor) != nil {
		return invalidTool("vendor", "want 1-%d of [a-z0-9_-]", maxVendorLen)
	}
	if !registryClass(t.Class) {
		return invalidTool("class", "want read, write_idempotent, write_ledger or write_irreversible, got %q", truncate(string(t.Class), 40))
	}
	write := t.Class != ClassRead
	switch {
	case write && strings.TrimSpace(t.SideEffect) == "":
		return invalidTool("side_effect", "required for a write tool: say what it does (email, charge, crm_write, …)")
	case !freeText(t.SideEffect, maxSideEffectLen):
		return invalidTool("side_effect", "at most %d bytes of UTF-8 without control characters", maxSideEffectLen)
	}
	if err := t.validatePlacement(); err != nil {
		return err
	}
	if len(t.IntentFields) > maxIntentFields {
		return invalidTool("intent_fields", "at most %d fields", maxIntentFields)
	}
	for i, f := range t.IntentFields {
		if !printableASCII(f, 1, maxIntentFieldLen) {
			return invalidTool("intent_fields", "field %d: want 1-%d printable ASCII characters", i, maxIntentFieldLen)
		}
		if slices.Contains(t.IntentFields[:i], f) {
			return invalidTool("intent_fields", "field %q is listed twice", f)
		}
	}
	if !freeText(t.Checklist.CheckedBy, maxCheckedByLen) {
		return invalidTool("checklist.checked_by", "at most %d bytes of UTF-8 without control characters", maxCheckedByLen)
	}
	if t.Checklist.anyChecked() && strings.TrimSpace(t.Checklist.CheckedBy) == "" {
		return invalidTool("checklist.checked_by", "say who checked the boxes")
	}
	if t.Autonomy != "" && !t.Autonomy.Valid() {
		return invalidTool("autonomy", "want autonomous, approval or outbox, got %q", truncate(string(t.Autonomy), 40))
	}
	if !write && t.Autonomy != "" && t.Autonomy != AutonomyAutonomous {
		return invalidTool("autonomy", "a read tool is never claimed: leave autonomy out")
	}
	if t.Autonomy == AutonomyOutbox && !ValidSubjectTokens(t.Name) {
		// The work item's subject ends with the tool's name, a dot per token.
		return invalidTool("name", "an outbox tool's name is part of a NATS subject: no empty part between dots")
	}
	if len(t.Policy) > MaxPolicyLen || !utf8.ValidString(t.Policy) || hasNUL(t.Policy) {
		return invalidTool("policy", "at most %d bytes of UTF-8 without NUL", MaxPolicyLen)
	}
	if !write && strings.TrimSpace(t.Policy) != "" {
		return invalidTool("policy", "a read tool is never claimed, so it has no policy")
	}
	if t.UpdatedAt.IsZero() {
		return invalidTool("updated_at", "required: the time of the change")
	}
	return nil
}

func (t Tool) validatePlacement() error {
	k := t.KeyPlacement
	set := k.set()
	if t.Class == ClassRead {
		if len(set) > 1 || len(set) == 1 && !k.None {
			return invalidTool("key_placement", "a read tool sends no key: leave key_placement out or say {none: true}")
		}
		return nil
	}
	if len(set) != 1 {
		return invalidTool("key_placement", "want exactly one of header, body_field, external_id_field, argument or none, got %d", len(set))
	}
	switch {
	case k.Header != "":
		if !httpToken(k.Header) || len(k.Header) > maxPlacementLen {
			return invalidTool("key_placement.header", "want an HTTP header name (such as Idempotency-Key)")
		}
	case k.None:
		if t.Class == ClassWriteIdempotent {
			return invalidTool("key_placement", "a write_idempotent tool sends its key to the vendor: say where (header, body_field, external_id_field or argument)")
		}
	default:
		for _, f := range []struct{ name, v string }{{"body_field", k.BodyField}, {"external_id_field", k.ExternalIDField}, {"argument", k.Argument}} {
			if f.v != "" && !printableASCII(f.v, 1, maxPlacementLen) {
				return invalidTool("key_placement."+f.name, "want 1-%d printable ASCII characters", maxPlacementLen)
			}
		}
	}
	return nil
}

// ErrInvalidToolID rejects the tenant or name that identify an entry.
var ErrInvalidToolID = &InvalidError{Field: "tool name", Reason: "want 1-128 of [A-Za-z0-9_.-]"}

// ValidateToolID checks the tenant and name that identify a registry entry.
func ValidateToolID(tenant, name string) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	if validateTool(name) != nil {
		return ErrInvalidToolID
	}
	return nil
}

// ValidSubjectTokens reports whether s, split at its dots, is a sequence of
// non-empty NATS subject tokens (tool names use only [A-Za-z0-9_.-], so no
// wildcard or white space can occur).
func ValidSubjectTokens(s string) bool {
	return s != "" && !strings.HasPrefix(s, ".") && !strings.HasSuffix(s, ".") && !strings.Contains(s, "..")
}

func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(headerTokenSpecial, c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// freeText reports whether s is at most max bytes of UTF-8 without control
// characters (empty is fine).
func freeText(s string, max int) bool {
	return len(s) <= max && utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// EffectiveAutonomy is the autonomy the rules grant t, and why it is less
// than asked: a write_irreversible tool is never autonomous, and any open
// checklist box makes the tool approval (the kill switch, which wins over
// both, is the claim's Frozen). A read tool is autonomous: it is never
// claimed. A policy can still send one claim to approval (see Gate).
func (t Tool) EffectiveAutonomy() (Autonomy, string) {
	if t.Class == ClassRead {
		return AutonomyAutonomous, ""
	}
	want := t.Autonomy
	if want == "" {
		want = AutonomyAutonomous
	}
	if open := t.Checklist.Open(); len(open) > 0 {
		return AutonomyApproval, "checklist not complete: " + strings.Join(open, ", ")
	}
	if want == AutonomyApproval {
		return AutonomyApproval, "the tool is registered with autonomy approval"
	}
	if t.Class == ClassWriteIrreversible && want == AutonomyAutonomous {
		return AutonomyApproval, "a write_irreversible tool is never autonomous"
	}
	return want, ""
}

// ErrToolMismatch means a claim names a registered tool with another
// vendor or tool class than the registry's.
var ErrToolMismatch = fmt.Errorf("the claim's vendor or tool class is not the registered tool's")

// Check refuses a claim of t that names another vendor or class.
func (t Tool) Check(vendor string, class ToolClass) error {
	if vendor != t.Vendor || class != t.Class {
		return fmt.Errorf("%w: %s is registered with vendor %s and class %s", ErrToolMismatch, t.Name, t.Vendor, t.Class)
	}
	return nil
}

// NextTool is the entry a PutTool of t stores over old (nil: a new entry),
// and whether it changes anything: the same content keeps old's version and
// times, so applying a registry file twice changes nothing. A change takes
// old's version plus one (1 for a new entry), t.UpdatedAt as its update
// time, and — when its checked boxes changed or their checker did and
// t.Checklist.CheckedAt is not given — t.UpdatedAt as CheckedAt. Times are
// kept in UTC to the microsecond, as every store keeps them. Stores call it
// inside their write transaction.
func NextTool(old *Tool, t Tool) (Tool, bool) {
	t = t.Clone()
	at := micro(t.UpdatedAt)
	if t.Autonomy == "" {
		t.Autonomy = AutonomyAutonomous
	}
	if len(t.IntentFields) == 0 {
		t.IntentFields = nil
	}
	c := &t.Checklist
	switch {
	case !c.CheckedAt.IsZero():
		c.CheckedAt = micro(c.CheckedAt)
	case old != nil && old.Checklist.sameBoxes(*c) && old.Checklist.CheckedBy == c.CheckedBy:
		c.CheckedAt = old.Checklist.CheckedAt
	case c.anyChecked():
		c.CheckedAt = at
	}
	if old != nil {
		t.Version, t.CreatedAt, t.UpdatedAt = old.Version, old.CreatedAt, old.UpdatedAt
		if sameTool(*old, t) {
			return t, false
		}
	} else {
		t.CreatedAt = at
	}
	t.Version++
	t.UpdatedAt = at
	return t, true
}

// sameTool compares every field of two entries (times by instant).
func sameTool(a, b Tool) bool {
	type core struct {
		tenant, name, vendor, sideEffect, policy string
		class                                    ToolClass
		placement                                KeyPlacement
		checklist                                Checklist
		autonomy                                 Autonomy
		version                                  int64
	}
	coreOf := func(t Tool) core {
		c := t.Checklist
		c.CheckedAt = time.Time{}
		return core{t.Tenant, t.Name, t.Vendor, t.SideEffect, t.Policy, t.Class, t.KeyPlacement, c, t.Autonomy, t.Version}
	}
	return coreOf(a) == coreOf(b) && slices.Equal(a.IntentFields, b.IntentFields) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.Checklist.CheckedAt.Equal(b.Checklist.CheckedAt)
}

func micro(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// CompareTools orders entries by tenant, then name (byte order): the order
// of ListTools.
func CompareTools(a, b Tool) int {
	if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// Tools is the durable tool registry of a store. Every write is durable
// before it returns; replicas sharing a store see each other's entries on
// their next read.
type Tools interface {
	// PutTool registers t or replaces the entry of its tenant and name
	// (NextTool decides the version and times) and returns the stored
	// entry and whether it changed. Errors: ErrInvalid (Validate),
	// ErrUnavailable.
	PutTool(ctx context.Context, t Tool) (Tool, bool, error)
	// GetTool returns one entry. Errors: ErrToolNotFound, ErrInvalid,
	// ErrUnavailable.
	GetTool(ctx context.Context, tenant, name string) (Tool, error)
	// DeleteTool removes one entry. Errors: ErrToolNotFound, ErrInvalid,
	// ErrUnavailable.
	DeleteTool(ctx context.Context, tenant, name string) error
	// ListTools returns the entries of tenant ("": every tenant), ordered
	// by CompareTools. Errors: ErrInvalid (tenant), ErrUnavailable.
	ListTools(ctx context.Context, tenant string) ([]Tool, error)
}
