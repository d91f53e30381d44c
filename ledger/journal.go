package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The row journal keeps what touched a row without changing it, which
// neither the row's fields nor the outbox's events record: a webhook
// delivery that changed nothing (a duplicate, a late delivery for a closed
// row, one that confirmed what the row held), what the resolver found (a
// lookup that found the object, found nothing or failed; a replay and its
// answer; the replay window judged expired) and why a row was paged.
//
// Entries are written in the transaction of the action they go with (the
// ingest, the resolver's apply, reschedule or escalate), never on the
// claim or outcome path; a row keeps its newest MaxJournalPerRow entries,
// and retention deletes them with the row. A store that keeps a journal
// implements JournalTx (the flows write through it) and Journals (the
// console reads it); ledger/storetest holds every store of the repo to it.

// JournalKind says what wrote an entry.
type JournalKind string

// The journal kinds.
const (
	JournalWebhook  JournalKind = "webhook"
	JournalResolver JournalKind = "resolver"
	JournalPage     JournalKind = "page"
)

// Journal outcomes (JournalEntry.Outcome).
const (
	// Webhook deliveries that changed nothing.
	NoteDuplicate = "duplicate" // the vendor event id was stored before
	NoteNoChange  = "no_change" // joined, applied, and the row stayed as it was
	// Resolver findings.
	NoteFound         = "found"          // the lookup found the vendor object
	NoteNotFound      = "not_found"      // the lookup found nothing
	NoteLookupFailed  = "lookup_failed"  // the lookup itself failed
	NoteReplayed      = "replayed"       // the request was replayed; Detail holds the answer
	NoteReplayFailed  = "replay_failed"  // the replay failed
	NoteWindowExpired = "window_expired" // the replay window closed with the row still open
	// Pages.
	NotePaged = "paged" // a person was paged; Detail holds why
)

// MaxJournalPerRow bounds the entries a row keeps: an append past it drops
// the row's oldest entry, so a vendor retrying one event forever or a row
// looked at for weeks costs a bounded amount.
const MaxJournalPerRow = 100

// maxJournalText bounds an entry's free text; longer text is cut.
const maxJournalText = 1024

// JournalEntry is one line of a row's journal.
type JournalEntry struct {
	// Seq orders a row's entries; the store assigns it.
	Seq           uint64      `json:"seq,omitempty"`
	Tenant        string      `json:"tenant"`
	Key           string      `json:"key"`
	At            time.Time   `json:"at"`
	Kind          JournalKind `json:"kind"`
	Outcome       string      `json:"outcome"`
	VendorEventID string      `json:"vendor_event_id,omitempty"`
	// Verified says how the delivery was verified (the endpoint's scheme).
	Verified string `json:"verified,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Validate checks the fields stores index on and cuts the free text.
func (e *JournalEntry) Validate() error {
	if ValidateTenant(e.Tenant) != nil || ValidateKey(e.Key) != nil {
		return ErrInvalidRequest.With("journal entry: tenant or key")
	}
	switch e.Kind {
	case JournalWebhook, JournalResolver, JournalPage:
	default:
		return ErrInvalidRequest.With("journal entry: kind %q", e.Kind)
	}
	if !printableASCII(e.Outcome, 1, 64) || e.At.IsZero() {
		return ErrInvalidRequest.With("journal entry: outcome or time")
	}
	e.At = e.At.UTC()
	e.VendorEventID = cut(e.VendorEventID)
	e.Verified = cut(e.Verified)
	e.Detail = cut(e.Detail)
	return nil
}

func cut(s string) string {
	if len(s) <= maxJournalText {
		return s
	}
	// A cut inside a UTF-8 sequence leaves invalid bytes: drop them.
	return strings.ToValidUTF8(s[:maxJournalText], "") + "…"
}

// JournalTx is the write a store that keeps a journal offers its flows.
type JournalTx interface {
	// AppendJournal adds e (validated, Seq unset) to its row's journal,
	// dropping the row's oldest entry past MaxJournalPerRow.
	AppendJournal(e JournalEntry) error
}

// Journals reads a row's journal.
type Journals interface {
	// RowJournal returns the row's entries oldest first (at most
	// MaxJournalPerRow). A row without entries, or no row, has none.
	RowJournal(ctx context.Context, tenant, key string) ([]JournalEntry, error)
}

type journalCtxKey struct{}

// WithJournal returns ctx carrying entries for the journal: Apply,
// Reschedule and Escalate run with it append them, in their transaction,
// to the journal of the row they act on (Tenant and Key are filled in).
// A store without a journal ignores them.
func WithJournal(ctx context.Context, entries ...JournalEntry) context.Context {
	if len(entries) == 0 {
		return ctx
	}
	prev := journalFrom(ctx)
	all := make([]JournalEntry, 0, len(prev)+len(entries))
	return context.WithValue(ctx, journalCtxKey{}, append(append(all, prev...), entries...))
}

func journalFrom(ctx context.Context) []JournalEntry {
	e, _ := ctx.Value(journalCtxKey{}).([]JournalEntry)
	return e
}

// writeJournal appends entries to the journal of tenant/key inside tx, if
// the store keeps one.
func writeJournal(tx Tx, tenant, key string, entries []JournalEntry) error {
	if len(entries) == 0 {
		return nil
	}
	jt, ok := tx.(JournalTx)
	if !ok {
		return nil
	}
	for _, e := range entries {
		e.Tenant, e.Key, e.Seq = tenant, key, 0
		if err := e.Validate(); err != nil {
			return err
		}
		if err := jt.AppendJournal(e); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	return nil
}

// deliveryEntry is the journal's line for a delivery that touched row
// without changing it.
func deliveryEntry(row Row, d Delivery, outcome string, ch Change) JournalEntry {
	e := JournalEntry{At: d.At, Kind: JournalWebhook, Outcome: outcome, VendorEventID: d.EventID, Verified: d.Verified}
	var parts []string
	switch outcome {
	case NoteDuplicate:
		parts = append(parts, "the vendor event id was stored before; nothing applied")
	case NoteNoChange:
		if row.Status.Open() {
			parts = append(parts, "confirmed what the row held ("+string(row.Status)+")")
		} else {
			parts = append(parts, "arrived after the row closed ("+string(row.Status)+")")
		}
	}
	if d.Recheck {
		parts = append(parts, "a hint (its body is not signed): the resolver asks the vendor")
	}
	if s := d.Evidence.Status; s != "" && outcome == NoteNoChange {
		parts = append(parts, "the event says "+string(s))
	}
	for _, a := range ch.Alerts {
		parts = append(parts, "alert "+string(a))
	}
	e.Detail = strings.Join(parts, "; ")
	return e
}

// journalDuplicate records a duplicate delivery on the row it joins, when
// that row is the endpoint's tenant's. It reads the join only when the
// store keeps a journal.
func journalDuplicate(tx Tx, d Delivery) error {
	if _, ok := tx.(JournalTx); !ok || d.Ignore {
		return nil
	}
	row, err := joinRow(tx, d)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	case row.Tenant != d.Tenant:
		return nil // another tenant's row: never noted on it
	}
	return writeJournal(tx, row.Tenant, row.Key, []JournalEntry{deliveryEntry(row, d, NoteDuplicate, Change{})})
}
