package console

import (
	"context"
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// Journal reads a row's journal (ledger.Journals): what touched the row
// without changing it — deliveries that changed nothing, the resolver's
// findings, why it was paged — which neither the row nor the stream keeps.
type Journal interface {
	RowJournal(ctx context.Context, tenant, key string) ([]ledger.JournalEntry, error)
}

// resolverTitles name the resolver's findings on the timeline.
var resolverTitles = map[string]string{
	ledger.NoteFound:         "Resolver lookup: found the vendor object",
	ledger.NoteNotFound:      "Resolver lookup: found nothing",
	ledger.NoteLookupFailed:  "Resolver lookup failed",
	ledger.NoteReplayed:      "Resolver replayed the request",
	ledger.NoteReplayFailed:  "Resolver replay failed",
	ledger.NoteWindowExpired: "Resolver: the replay window has expired",
}

// journalEntry turns a journal entry into a timeline entry; a page's
// reason is not one (it joins the page's own entry: pageReason).
func (c *Console) journalEntry(row ledger.Row, j ledger.JournalEntry) (entry, bool) {
	switch j.Kind {
	case ledger.JournalWebhook:
		title := "Webhook delivery: changed nothing"
		if j.Outcome == ledger.NoteDuplicate {
			title = "Webhook delivery: a duplicate, changed nothing"
		}
		parts := []string{"vendor event " + j.VendorEventID}
		how := j.Verified
		if cfg := c.o.Verification[row.Vendor]; cfg != "" {
			how = strings.TrimPrefix(how+"; "+cfg, "; ")
		}
		if how != "" {
			parts = append(parts, "verified: "+how)
		}
		if j.Detail != "" {
			parts = append(parts, j.Detail)
		}
		return entry{At: j.At, Kind: "webhook", Title: title, Detail: strings.Join(parts, "; "), order: 1}, true
	case ledger.JournalResolver:
		title := resolverTitles[j.Outcome]
		if title == "" {
			title = "Resolver: " + j.Outcome
		}
		return entry{At: j.At, Kind: "resolver", Title: title, Detail: j.Detail, order: -1}, true
	}
	return entry{}, false
}

// pageReason is why the row was paged, from its journal ("" unknown).
func pageReason(notes []ledger.JournalEntry) string {
	for i := len(notes) - 1; i >= 0; i-- {
		if notes[i].Kind == ledger.JournalPage {
			return notes[i].Detail
		}
	}
	return ""
}
