package paging

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Page is one alert for a human.
type Page struct {
	// DedupKey identifies the alert: DedupKey(row key). Required.
	DedupKey string
	// Summary is the one-line text (PagerDuty cuts it at 1024 characters).
	Summary string
	// Source is the affected system; "reconciler" when empty.
	Source string
	// Severity is critical, error, warning or info; error when empty.
	Severity Severity
	// CustomDetails are the ledger's trace fields (tenant, key, run_id, …).
	// Never put a secret or a raw request body here.
	CustomDetails map[string]any
}

// Severity is PagerDuty's payload.severity.
type Severity string

// The severities PagerDuty accepts.
const (
	SeverityCritical Severity = "critical"
	SeverityError    Severity = "error"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// Limits of the Events API v2.
const (
	MaxSummaryLen  = 1024
	MaxDedupKeyLen = 255
	// DedupPrefix starts every dedup key the resolver uses.
	DedupPrefix = "recon:"
	// DefaultSource is the payload source when a page names none.
	DefaultSource = "reconciler"
)

// Errors of a pager call; callers branch on them with errors.Is.
var (
	// ErrRejected means the receiver refused the page as invalid (PagerDuty
	// 400): sending it again cannot help.
	ErrRejected = errors.New("page rejected")
	// ErrUndelivered means the page was not accepted within the call's time
	// (429, 5xx, network): the caller should try again later.
	ErrUndelivered = errors.New("page not delivered")
	// ErrInvalidPage means the page was not sent because it is malformed.
	ErrInvalidPage = errors.New("invalid page")
)

// DedupKey returns the dedup key of a ledger row: "recon:<tenant>:<key>".
// The tenant is part of it because a business key may exist in two
// tenants, whose pages must not fold into one alert (nor one's resolve
// close the other's). A key too long for PagerDuty's 255 characters is
// replaced by the SHA-256 of tenant and key, so it stays deterministic.
func DedupKey(tenant, key string) string {
	id := tenant + ":" + key
	if len(DedupPrefix)+len(id) <= MaxDedupKeyLen {
		return DedupPrefix + id
	}
	sum := sha256.Sum256([]byte(id))
	return DedupPrefix + "sha256:" + hex.EncodeToString(sum[:])
}

// approvalSuffix ends the dedup key of a row's approval request.
const approvalSuffix = ":approval"

// ApprovalDedupKey returns the dedup key of the approval request of a
// ledger row: "recon:<tenant>:<key>:approval", apart from the row's own
// page (DedupKey), so asking a human to approve and paging one about the
// row never fold into one alert. A key too long is hashed as DedupKey
// hashes it.
func ApprovalDedupKey(tenant, key string) string {
	id := tenant + ":" + key
	if len(DedupPrefix)+len(id)+len(approvalSuffix) <= MaxDedupKeyLen {
		return DedupPrefix + id + approvalSuffix
	}
	sum := sha256.Sum256([]byte(id))
	return DedupPrefix + "sha256:" + hex.EncodeToString(sum[:]) + approvalSuffix
}

// normalize fills defaults, cuts the summary and validates the page.
func (p Page) normalize() (Page, error) {
	if p.DedupKey == "" || len(p.DedupKey) > MaxDedupKeyLen {
		return p, fmt.Errorf("%w: dedup key must be 1-%d characters", ErrInvalidPage, MaxDedupKeyLen)
	}
	if p.Source == "" {
		p.Source = DefaultSource
	}
	switch p.Severity {
	case "":
		p.Severity = SeverityError
	case SeverityCritical, SeverityError, SeverityWarning, SeverityInfo:
	default:
		return p, fmt.Errorf("%w: severity %q", ErrInvalidPage, p.Severity)
	}
	if p.Summary == "" {
		p.Summary = "reconciler: " + p.DedupKey
	}
	p.Summary = truncate(p.Summary, MaxSummaryLen)
	return p, nil
}

// truncate cuts s to at most n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// checkKey validates a dedup key for a resolve.
func checkKey(dedupKey string) error {
	if dedupKey == "" || len(dedupKey) > MaxDedupKeyLen {
		return fmt.Errorf("%w: dedup key must be 1-%d characters", ErrInvalidPage, MaxDedupKeyLen)
	}
	return nil
}

// ctxErr is a small helper so every pager reports a cancelled call the same way.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUndelivered, err)
	}
	return nil
}
