package ledger

import (
	"fmt"
	"strings"
	"time"
)

// Evidence is what a runtime report, a webhook, the resolver or a human says
// about a row's side effect.
type Evidence struct {
	Source Source
	// Status is the status the evidence points to. Empty means progress: the
	// vendor object exists but has not settled (store the receipt, keep the
	// status), or, from a runtime, an attempt the vendor did not take.
	Status        Status
	ReceiptID     string
	VendorEventID string
	// Actor and Note record who resolved by hand and why.
	Actor string
	Note  string
	// Amount (minor units) and Currency, when the evidence carries them.
	Amount   *int64
	Currency string
	// HTTPStatus is the vendor's answer to a runtime's attempt or a
	// resolver's replay; Replayed and ShouldRetry come from a runtime only.
	HTTPStatus  int
	Replayed    bool
	ShouldRetry *bool
	// Attempt is the attempt a runtime's evidence is for (0: not said).
	Attempt int
	// Result is a runtime's record of the answer (Outcome.Result); Apply
	// keeps it on the row when this evidence settles the row.
	Result string
	At     time.Time
}

// Validate checks the evidence's shape.
func (ev Evidence) Validate() error {
	if !ev.Source.Valid() {
		return ErrInvalidEvidence.With("unknown source %q", ev.Source)
	}
	if ev.Status != "" && !ev.Status.Valid() {
		return ErrInvalidStatus.With("%q", ev.Status)
	}
	if ev.Status == StatusPending {
		return ErrInvalidStatus.With("no evidence leads back to pending")
	}
	if ev.Source == SourceHuman && ev.Status != StatusSucceeded && ev.Status != StatusFailedPoison {
		return ErrInvalidStatus.With("a human resolves to succeeded or failed_poison")
	}
	if !printableASCII(ev.ReceiptID, 0, MaxKeyLen) {
		return ErrInvalidEvidence.With("receipt_id must be at most %d printable ASCII characters", MaxKeyLen)
	}
	if len(ev.VendorEventID) > MaxKeyLen || len(ev.Actor) > MaxKeyLen || len(ev.Note) > MaxNoteLen {
		return ErrInvalidEvidence.With("vendor_event_id, actor or note too long")
	}
	if hasNUL(ev.VendorEventID) || hasNUL(ev.Actor) || hasNUL(ev.Note) || hasNUL(ev.Currency) {
		return ErrInvalidEvidence.With("vendor_event_id, actor, note or currency holds NUL")
	}
	if ev.Result != "" && ev.Source != SourceRuntime {
		return ErrInvalidEvidence.With("only a runtime reports a result")
	}
	return validateResult(ErrInvalidEvidence, ev.Result)
}

// Change is what Apply did to a row.
type Change struct {
	From, To Status
	// Changed is true when the status changed; Event is then set and must be
	// written to the outbox in the same transaction as the row.
	Changed bool
	Event   *Event
	// Alerts raised by this evidence (also recorded on the row).
	Alerts []AlertKind
}

// canTransition reports whether the rules allow from → to on evidence from src.
//
//	pending       → succeeded | unknown | failed_poison
//	unknown       → succeeded | failed_poison
//	failed_poison → succeeded, only from vendor evidence (raises late_success)
//	succeeded     → nothing (terminal)
func canTransition(from, to Status, src Source) bool {
	switch from {
	case StatusPending:
		return to == StatusSucceeded || to == StatusUnknown || to == StatusFailedPoison
	case StatusUnknown:
		return to == StatusSucceeded || to == StatusFailedPoison
	case StatusFailedPoison:
		return to == StatusSucceeded && src.vendorEvidence()
	}
	return false
}

// Apply applies evidence to row in place, following the transition rules.
// Evidence the rules do not allow is recorded, not applied, and is not an
// error — vendors deliver late, out of order and twice — except from a
// human, who gets ErrInvalidTransition. Apply is deterministic, so a store
// may re-run it when a group commit retries.
func Apply(row *Row, ev Evidence, p Policy) (Change, error) {
	p = p.withDefaults()
	if err := ev.Validate(); err != nil {
		return Change{}, err
	}
	if ev.Source == SourceRuntime && row.Attempt == 0 && row.Status.Open() {
		// No call was ever granted for this row (an approval that waits, a
		// queued key no worker has started): a runtime has no attempt to
		// report. Applied, a report would settle or unsettle the row behind
		// the gate's back and leave its approval request, and its page,
		// open for good.
		return Change{}, fmt.Errorf("%w: no call was granted for this key (attempt 0: it awaits an approval or a worker's start)", ErrInvalidTransition)
	}
	at := ev.At.UTC()
	ch := Change{From: row.Status, To: row.Status}

	// A runtime's attempt and a resolver's replay both send the key: the
	// vendor's last answer decides whether another retry is worth it (a
	// stored 5xx is replayed forever), so both record it, durably, for
	// every replica.
	if ev.HTTPStatus != 0 && (ev.Source == SourceRuntime || ev.Source == SourceResolver) {
		row.LastHTTPStatus = ev.HTTPStatus
		row.UpdatedAt = at
	}
	if ev.Source == SourceRuntime {
		row.IdempotentReplayed = ev.Replayed
		if ev.ShouldRetry != nil {
			v := *ev.ShouldRetry
			row.VendorShouldRetry = &v
		}
		row.UpdatedAt = at
	}
	if ev.ReceiptID != "" && row.UpstreamReceiptID == "" {
		row.UpstreamReceiptID = ev.ReceiptID
		row.UpdatedAt = at
	}

	target := ev.Status
	if target == StatusSucceeded && row.Expect != nil && mismatched(*row.Expect, ev) {
		detail := fmt.Sprintf("expected %d %s, evidence says %d %s", row.Expect.Amount, row.Expect.Currency, derefAmount(ev.Amount), strings.ToLower(ev.Currency))
		addAlert(row, &ch, AlertMismatch, ev, detail)
		return ch, nil
	}

	// A runtime's report ends the lease of the attempt it is for; a report
	// of an earlier attempt, arriving after a retry began, must not end the
	// retry's lease (another claim would get retry_same_key meanwhile).
	endsLease := ev.Source == SourceRuntime && (ev.Attempt == 0 || ev.Attempt >= row.Attempt)
	switch {
	case target == "" || target == row.Status:
		// Progress, a vendor that did not take the attempt, or a repeat.
		if row.Status.Open() && endsLease {
			endAttempt(row, at, p)
		}
		keepResult(row, ev, at)
		return ch, nil
	case row.Status == StatusSucceeded:
		if ev.Source == SourceHuman {
			return ch, fmt.Errorf("%w: %s is terminal", ErrInvalidTransition, row.Status)
		}
		if target == StatusFailedPoison {
			addAlert(row, &ch, AlertIgnoredFailure, ev, "failure after success, not applied")
		}
		return ch, nil
	case !canTransition(row.Status, target, ev.Source):
		if ev.Source == SourceHuman {
			return ch, fmt.Errorf("%w: %s to %s", ErrInvalidTransition, row.Status, target)
		}
		return ch, nil // e.g. a timeout reported after the row failed
	}

	if row.Status == StatusFailedPoison && target == StatusSucceeded {
		addAlert(row, &ch, AlertLateSuccess, ev, "vendor reports success after failure")
	}
	row.Status, row.UpdatedAt = target, at
	ch.To, ch.Changed = target, true
	keepResult(row, ev, at)
	switch target {
	case StatusSucceeded:
		row.SucceededAt = at
		fallthrough
	case StatusFailedPoison:
		row.NextCheckAt = time.Time{}
		row.Resolution = &Resolution{Source: ev.Source, VendorEventID: ev.VendorEventID, Actor: ev.Actor, Note: ev.Note, At: at}
	case StatusUnknown:
		if endsLease || ev.Source != SourceRuntime {
			endAttempt(row, at, p)
		}
	}
	e := newEvent(row, string(target), ev.Source, ev.VendorEventID, at)
	ch.Event = &e
	return ch, nil
}

// keepResult stores a runtime's result on a row that now holds the settled
// status the result's report pointed to. The first result stays: a
// repeated report is the same answer, and a later one must not change what
// a replay returns. A result whose report left the row open (a 5xx, a
// mismatch) or that lost to other evidence (a failure after success) would
// be replayed as the wrong answer, so it is dropped.
func keepResult(row *Row, ev Evidence, at time.Time) {
	if ev.Result == "" || row.Result != "" || row.Status.Open() || row.Status != ev.Status {
		return
	}
	row.Result, row.UpdatedAt = ev.Result, at
}

// endAttempt ends the in-flight lease of an open row and schedules the
// resolver's next look after the grace period.
func endAttempt(row *Row, at time.Time, p Policy) {
	row.PendingUntil = at
	row.NextCheckAt = at.Add(p.Grace)
	row.UpdatedAt = at
}

func mismatched(e Expect, ev Evidence) bool {
	if ev.Amount != nil && *ev.Amount != e.Amount {
		return true
	}
	return ev.Currency != "" && !strings.EqualFold(ev.Currency, e.Currency)
}

func derefAmount(a *int64) int64 {
	if a == nil {
		return 0
	}
	return *a
}

func addAlert(row *Row, ch *Change, kind AlertKind, ev Evidence, detail string) {
	ch.Alerts = append(ch.Alerts, kind)
	row.Alerts = append(row.Alerts, Alert{Kind: kind, Source: ev.Source, VendorEventID: ev.VendorEventID, Detail: detail, At: ev.At.UTC()})
	if n := len(row.Alerts); n > maxAlertsPerRow {
		row.Alerts = append([]Alert(nil), row.Alerts[n-maxAlertsPerRow:]...)
	}
	row.UpdatedAt = ev.At.UTC()
}

// escalate marks row as paged at at and returns the escalated event to write
// to the outbox in the same transaction. It returns false when the row was
// paged before (a row is paged once) or is no longer open.
func escalate(row *Row, at time.Time) (Event, bool) {
	if !row.PagedAt.IsZero() || !row.Status.Open() {
		return Event{}, false
	}
	at = at.UTC()
	row.PagedAt, row.UpdatedAt = at, at
	return newEvent(row, EventEscalated, SourceResolver, "", at), true
}

// Reschedule sets when the resolver looks at an open row next. Settled rows
// never return to the due index, so it returns false for them.
func Reschedule(row *Row, next time.Time) bool {
	if !row.Status.Open() {
		return false
	}
	if next.IsZero() {
		// An open row is always due some time: the zero time means "now"
		// (a store may keep zero as "never due", as PostgreSQL's NULL does).
		next = time.Unix(0, 0)
	}
	row.NextCheckAt = next.UTC()
	return true
}
