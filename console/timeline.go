package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// entry is one line of a row's timeline.
type entry struct {
	At     time.Time
	Kind   string // claim, attempt, outcome, webhook, resolver, page, approval, human, compensation, alert
	Title  string
	Detail string
	// Key links a compensation entry to its row.
	Key string
	// order breaks ties between entries of one instant: -1 first (a
	// resolver finding before the page or the apply it led to), 1 last (a
	// delivery that changed nothing after the one that did).
	order int
}

// timeline builds a row's story from what the service keeps: the row's
// own fields (claim, attempts, last answer, approval, page, resolution,
// alerts), the events the relay published for it on the stream (every
// transition with its source and vendor event id; approval requests and
// decisions; the page), and the rows of its run that compensate it.
// Attempts that changed no status (a second try inside the replay window)
// leave no event: the row counts them, and the timeline says how many.
// The row's journal adds what changed nothing: webhook deliveries (a
// duplicate, a late one), the resolver's findings, and why it was paged.
func (c *Console) timeline(row ledger.Row, events []ledger.Event, runRows []ledger.Row, notes []ledger.JournalEntry) []entry {
	why := pageReason(notes)
	var out []entry
	claim := entry{At: row.FirstSeenAt, Kind: "claim",
		Title:  fmt.Sprintf("Claimed by run %s for %s", row.RunID, row.Tool),
		Detail: fmt.Sprintf("vendor %s, class %s, local id %s", row.Vendor, row.ToolClass, row.MetadataLocalID)}
	if row.ToolCallID != "" {
		claim.Detail += ", tool call " + row.ToolCallID
	}
	switch row.Autonomy {
	case ledger.AutonomyApproval:
		claim.Detail += "; gated: inserted at attempt 0, waiting for approval"
	case ledger.AutonomyOutbox:
		claim.Detail += "; queued as a work item for the tenant's worker"
	}
	out = append(out, claim)
	if row.Attempt > 0 {
		// Attempts start at the claim, or for a gated row at the grant or
		// the worker's start; the row keeps only the last one's answer.
		at := row.FirstSeenAt
		if a := row.Approval; a != nil && !a.DecidedAt.IsZero() {
			at = a.DecidedAt
		}
		if row.Status.Open() && row.Autonomy != "" {
			at = row.UpdatedAt
		}
		a := entry{At: at, Kind: "attempt", Title: fmt.Sprintf("%d attempt(s) granted under this key", row.Attempt)}
		var parts []string
		if row.LastHTTPStatus != 0 {
			parts = append(parts, fmt.Sprintf("last answer HTTP %d", row.LastHTTPStatus))
		}
		if row.IdempotentReplayed {
			parts = append(parts, "the vendor replayed it (Idempotent-Replayed)")
		}
		if row.VendorShouldRetry != nil {
			parts = append(parts, fmt.Sprintf("vendor says should retry: %v", *row.VendorShouldRetry))
		}
		if row.Status.Open() && !row.PendingUntil.IsZero() {
			parts = append(parts, "lease until "+row.PendingUntil.UTC().Format(time.RFC3339))
		}
		a.Detail = strings.Join(parts, "; ")
		out = append(out, a)
	}
	covered := map[string]bool{}
	for _, ev := range events {
		if ev.Key != row.Key || ev.Tenant != row.Tenant {
			continue
		}
		e, ok := c.eventEntry(row, ev, why)
		if !ok {
			continue
		}
		covered[ev.Status+"/"+string(ev.Source)] = true
		out = append(out, e)
	}
	// What the row says that the stream did not (an event not yet
	// published, a stream that ages events out, no stream configured).
	if a := row.Approval; a != nil {
		if !anyStatus(covered, ledger.EventApprovalRequested) {
			out = append(out, entry{At: a.RequestedAt, Kind: "approval", Title: "Approval requested", Detail: a.Reason})
		}
		if !a.DecidedAt.IsZero() && !anyStatus(covered, ledger.EventApproved, ledger.EventDenied, ledger.EventApprovalExpired) {
			title := map[ledger.ApprovalState]string{ledger.ApprovalGranted: "Approved", ledger.ApprovalDenied: "Denied", ledger.ApprovalExpired: "Approval expired"}[a.State]
			out = append(out, entry{At: a.DecidedAt, Kind: "approval", Title: title, Detail: decider(a)})
		}
	}
	if !row.PagedAt.IsZero() && !anyStatus(covered, ledger.EventEscalated) {
		out = append(out, entry{At: row.PagedAt, Kind: "page", Title: "Paged a person", Detail: pageDetail(row, why)})
	}
	for _, j := range notes {
		if e, ok := c.journalEntry(row, j); ok {
			out = append(out, e)
		}
	}
	if res := row.Resolution; res != nil && !covered[string(row.Status)+"/"+string(res.Source)] {
		e := resolutionEntry(row, string(row.Status), *res, c.o.Verification)
		if row.UpstreamReceiptID != "" {
			e.Detail = strings.TrimPrefix(e.Detail+"; receipt "+row.UpstreamReceiptID, "; ")
		}
		out = append(out, e)
	}
	for _, al := range row.Alerts {
		d := al.Detail
		if al.VendorEventID != "" {
			d = strings.TrimSpace(d + " (vendor event " + al.VendorEventID + ")")
		}
		out = append(out, entry{At: al.At, Kind: "alert", Title: "Alert: " + string(al.Kind) + " from " + string(al.Source), Detail: d})
	}
	for _, r := range runRows {
		if r.CompensationOf == row.Key {
			out = append(out, entry{At: r.FirstSeenAt, Kind: "compensation", Key: r.Key,
				Title:  "Compensation " + r.CompensationAction + ": " + string(r.Status),
				Detail: "row " + r.Key})
		}
	}
	if row.CompensationOf != "" {
		out = append(out, entry{At: row.FirstSeenAt, Kind: "compensation", Key: row.CompensationOf,
			Title: "This row compensates another (" + row.CompensationAction + ")", Detail: "row " + row.CompensationOf})
	}
	slices.SortStableFunc(out, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.At.UnixNano(), b.At.UnixNano()), cmp.Compare(a.order, b.order))
	})
	return out
}

func anyStatus(covered map[string]bool, statuses ...string) bool {
	for k := range covered {
		st, _, _ := strings.Cut(k, "/")
		if slices.Contains(statuses, st) {
			return true
		}
	}
	return false
}

func decider(a *ledger.Approval) string {
	var parts []string
	if a.Actor != "" {
		parts = append(parts, "by "+a.Actor)
	}
	if a.DecidedBy != "" {
		parts = append(parts, "token "+a.DecidedBy)
	}
	if a.Note != "" {
		parts = append(parts, "note: "+a.Note)
	}
	if a.State == ledger.ApprovalExpired {
		parts = append(parts, "nobody decided before "+a.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, "; ")
}

func pageDetail(row ledger.Row, why string) string {
	d := "dedup key recon:" + row.Tenant + ":" + row.Key + "; the page resolves when the row settles"
	if why != "" {
		d = "why: " + why + "; " + d
	}
	return d
}

// eventEntry turns one published event into a timeline entry.
func (c *Console) eventEntry(row ledger.Row, ev ledger.Event, why string) (entry, bool) {
	switch ev.Status {
	case ledger.EventEscalated:
		return entry{At: ev.At, Kind: "page", Title: "Paged a person (escalated)", Detail: pageDetail(row, why)}, true
	case ledger.EventApprovalRequested:
		d := ""
		if ev.Approval != nil {
			d = ev.Approval.Reason + "; expires " + ev.Approval.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return entry{At: ev.At, Kind: "approval", Title: "Approval requested", Detail: d}, true
	case ledger.EventApproved, ledger.EventDenied, ledger.EventApprovalExpired:
		d := ""
		if ev.Approval != nil {
			d = decider(ev.Approval)
		}
		title := map[string]string{ledger.EventApproved: "Approved", ledger.EventDenied: "Denied", ledger.EventApprovalExpired: "Approval expired"}[ev.Status]
		return entry{At: ev.At, Kind: "approval", Title: title, Detail: d}, true
	case ledger.EventQueued:
		return entry{}, false
	}
	res := ledger.Resolution{Source: ev.Source, VendorEventID: ev.VendorEventID, At: ev.At}
	if r := row.Resolution; r != nil && r.Source == ev.Source && r.VendorEventID == ev.VendorEventID && string(row.Status) == ev.Status {
		res.Actor, res.Note = r.Actor, r.Note
	}
	e := resolutionEntry(row, ev.Status, res, c.o.Verification)
	if ev.ReceiptID != "" {
		e.Detail = strings.TrimPrefix(e.Detail+"; receipt "+ev.ReceiptID, "; ")
	}
	return e, true
}

// resolutionEntry describes a transition to status on evidence from res.
func resolutionEntry(row ledger.Row, status string, res ledger.Resolution, verification map[string]string) entry {
	e := entry{At: res.At}
	switch res.Source {
	case ledger.SourceWebhook:
		e.Kind = "webhook"
		e.Title = "Webhook delivery → " + status
		how := verification[row.Vendor]
		if how == "" {
			how = "signature checked by the " + row.Vendor + " endpoint"
		}
		e.Detail = "vendor event " + res.VendorEventID + "; verified: " + how
	case ledger.SourceResolver:
		e.Kind = "resolver"
		e.Title = "Resolver → " + status
		e.Detail = res.Note
	case ledger.SourceHuman:
		e.Kind = "human"
		e.Title = "Resolved by hand → " + status
		e.Detail = strings.TrimPrefix(strings.TrimSuffix("by "+res.Actor, "by ")+"; note: "+res.Note, "; ")
	default:
		e.Kind = "outcome"
		e.Title = "Outcome reported → " + status
		e.Detail = res.Note
	}
	return e
}

type rowData struct {
	Row         ledger.Row
	Timeline    []entry
	HistoryNote string
	Intent      string
	TraceID     string
	TraceURL    string
	VendorURL   string
	Freezes     []ledger.Freeze
	Open        bool
	CanDecide   bool
	Compensated []ledger.Row
}

// traceID is the trace id of a W3C traceparent (version 00).
func traceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// rowPage is GET /console/row?tenant=&key=: every field of the row, its
// timeline and the actions it allows.
func (c *Console) rowPage(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := c.tenantOf(r, s)
	if !ok {
		c.fail(w, s, http.StatusForbidden, "You may not look at that tenant.")
		return
	}
	key := r.URL.Query().Get("key")
	if ledger.ValidateKey(key) != nil {
		c.fail(w, s, http.StatusBadRequest, "A key is 1-255 printable ASCII characters.")
		return
	}
	ctx := r.Context()
	row, err := c.o.Store.Get(ctx, tenant, key)
	if errors.Is(err, ledger.ErrNotFound) {
		c.fail(w, s, http.StatusNotFound, "No row with that key in tenant "+tenant+".")
		return
	}
	if err != nil {
		c.storeFailed(w, s, err)
		return
	}
	d := rowData{Row: row, Open: row.Status.Open(), CanDecide: row.ApprovalOpen()}
	var events []ledger.Event
	if c.o.History != nil {
		events, err = c.o.History.RunEvents(ctx, tenant, row.RunID)
		if err != nil {
			c.log.Warn("console: read the run's events", "tenant", tenant, "run_id", row.RunID, "err", err)
			d.HistoryNote = "The event stream could not be read; this timeline shows what the row itself records."
		}
	} else {
		d.HistoryNote = "No event stream is configured; this timeline shows what the row itself records."
	}
	runRows, _, err := c.runRows(ctx, tenant, row.RunID)
	if err != nil {
		c.storeFailed(w, s, err)
		return
	}
	var notes []ledger.JournalEntry
	if c.o.Journal != nil {
		if notes, err = c.o.Journal.RowJournal(ctx, tenant, key); err != nil {
			c.log.Warn("console: read the row's journal", "tenant", tenant, "key", key, "err", err)
			d.HistoryNote = strings.TrimSpace(d.HistoryNote + " The row's journal (deliveries that changed nothing, resolver findings, page reasons) could not be read.")
		}
	}
	d.Timeline = c.timeline(row, events, runRows, notes)
	if row.Request != nil {
		d.Intent = row.Request.Method + " " + row.Request.Path
		if row.Request.Body != "" {
			d.Intent += "\n" + row.Request.Body
		}
	}
	d.TraceID = traceID(row.Traceparent)
	d.TraceURL = linkFrom(c.o.TraceURL, "{trace_id}", d.TraceID)
	d.VendorURL = linkFrom(c.o.VendorLinks[row.Vendor], "{receipt_id}", row.UpstreamReceiptID)
	if d.Freezes, err = c.freezesOf(ctx, tenant); err != nil {
		c.storeFailed(w, s, err)
		return
	}
	d.Freezes = slices.DeleteFunc(d.Freezes, func(f ledger.Freeze) bool { return !f.Covers(tenant, row.Tool, row.ToolClass) })
	c.render(w, http.StatusOK, "row", c.newPage(s, "Row "+short(row.Key), "", tenant, d))
}

func short(s string) string {
	if len(s) > 16 {
		return s[:12] + "…"
	}
	return s
}
