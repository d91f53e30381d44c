package resolver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The row journal (ledger.JournalEntry): what a pass found out about a row
// — the lookup found the object, found nothing or failed; a replay and its
// answer; the replay window judged expired; why it paged — goes to the
// store with the pass's next write on the row (the apply that settles it,
// the escalate that records the page, or the reschedule that ends every
// pass of an open row), in that write's transaction. A vendor's error text
// is not copied into it (the console shows the journal to the tenant's
// approvers): only its HTTP status or its kind.

// note adds a finding to the pass's journal entries.
func (o *outcome) note(now time.Time, what, detail string) {
	o.notes = append(o.notes, ledger.JournalEntry{Kind: ledger.JournalResolver, Outcome: what, Detail: detail, At: now})
}

// finding notes a lookup's answer: found, not found, or failed.
func (o *outcome) finding(now time.Time, lookup string, f Finding, err error) {
	switch {
	case err != nil:
		o.note(now, ledger.NoteLookupFailed, lookup+": "+errSummary(err))
	case f.Found || f.Duplicate:
		o.note(now, ledger.NoteFound, lookup+": "+describe(f))
	default:
		o.note(now, ledger.NoteNotFound, lookup+": nothing found")
	}
}

// replayed notes a replay's answer.
func (o *outcome) replayed(now time.Time, f Finding, err error) {
	if err != nil {
		o.note(now, ledger.NoteReplayFailed, "replay with the same key: "+errSummary(err))
		return
	}
	o.note(now, ledger.NoteReplayed, "replay with the same key: "+describe(f))
}

// journal returns ctx carrying the pass's entries (and extra) for the
// store write about to run, and clears them: each is written once.
func (o *outcome) journal(ctx context.Context, extra ...ledger.JournalEntry) context.Context {
	entries := append(slices.Clone(o.notes), extra...)
	o.notes = nil
	return ledger.WithJournal(ctx, entries...)
}

// describe says what a finding says, in a few words.
func describe(f Finding) string {
	var parts []string
	switch {
	case f.Duplicate:
		parts = append(parts, "more than one object carries the local id")
	case f.Found && f.Status != "":
		parts = append(parts, "found, "+string(f.Status))
	case f.Found:
		parts = append(parts, "found, not settled yet")
	case f.Page != "":
		parts = append(parts, "the vendor refused it: "+f.Page)
	default:
		parts = append(parts, "no object yet")
	}
	if f.ReceiptID != "" {
		parts = append(parts, "object "+f.ReceiptID)
	}
	if f.Replayed {
		parts = append(parts, "the vendor replayed its stored answer")
	}
	if f.Detail != "" {
		parts = append(parts, f.Detail)
	}
	return strings.Join(parts, "; ")
}

// errSummary is what the journal keeps of a vendor error.
func errSummary(err error) string {
	switch code := httpStatusOf(err); {
	case code > 0:
		return fmt.Sprintf("HTTP %d", code)
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, ErrNoLookup):
		return "no lookup for this vendor"
	}
	return "failed (the service log has the error)"
}
