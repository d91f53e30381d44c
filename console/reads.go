package console

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// scan reads up to limit of tenant's rows matching q, newest first, and
// reports whether it stopped at the limit. The store has no index by age
// within a status, so the console bounds what one page reads.
func (c *Console) scan(ctx context.Context, q ledger.ListQuery, limit int) ([]ledger.Row, bool, error) {
	var out []ledger.Row
	q.Limit = ledger.MaxListLimit
	for {
		page, err := c.o.Store.List(ctx, q)
		if err != nil {
			return nil, false, err
		}
		out = append(out, page.Rows...)
		if len(out) >= limit {
			return out[:limit], true, nil
		}
		if page.NextCursor == "" {
			return out, false, nil
		}
		q.Cursor = page.NextCursor
	}
}

// attentionRow is one row that needs a person, and why.
type attentionRow struct {
	Row   ledger.Row
	Why   string
	Since time.Time
}

// section is one kind of attention, oldest first.
type section struct {
	ID, Title, Help string
	Rows            []attentionRow
	Shown           int
	More            bool
}

func (s section) Count() int { return len(s.Rows) }

type tenantCount struct {
	Tenant string
	Counts []int
	Total  int
}

type attentionData struct {
	Now       time.Time
	Titles    []string
	Summary   []tenantCount
	Sections  []section
	Truncated bool
	ScanLimit int
	// Expand names the section listed in full (?all=).
	Expand string
}

// sectionRows is how many rows a section lists before "and N more".
const sectionRows = 100

// needsAttention gathers one tenant's sections (docs/architecture.md §16):
// paged rows, unknown rows past the resolver's grace, pending rows whose
// lease ended with nobody reporting, open approval requests, and queued
// work items no worker took within QueuedAfter.
func (c *Console) needsAttention(ctx context.Context, tenant string, now time.Time) ([]section, bool, error) {
	unknown, tu, err := c.scan(ctx, ledger.ListQuery{Tenant: tenant, Status: ledger.StatusUnknown}, c.o.ScanLimit)
	if err != nil {
		return nil, false, err
	}
	pending, tp, err := c.scan(ctx, ledger.ListQuery{Tenant: tenant, Status: ledger.StatusPending}, c.o.ScanLimit)
	if err != nil {
		return nil, false, err
	}
	paged := section{ID: "paged", Title: "Paged", Help: "the resolver gave up and paged a person: only you can close these"}
	late := section{ID: "unknown", Title: "Unknown past grace", Help: "a timeout left them unknown and nothing has settled them since"}
	stuck := section{ID: "stuck", Title: "Stuck pending", Help: "an attempt's lease ended and no outcome was reported"}
	approvals := section{ID: "approvals", Title: "Approval requests", Help: "a gated write waits for a decision, soonest to expire first"}
	queued := section{ID: "queued", Title: "Queued, not taken", Help: "work items no worker has started"}
	for _, r := range append(unknown, pending...) {
		switch {
		case !r.PagedAt.IsZero():
			paged.Rows = append(paged.Rows, attentionRow{Row: r, Since: r.PagedAt, Why: "paged " + roughDuration(now.Sub(r.PagedAt)) + " ago"})
		case r.Status == ledger.StatusUnknown && now.Sub(r.UpdatedAt) > c.o.Grace:
			late.Rows = append(late.Rows, attentionRow{Row: r, Since: r.UpdatedAt, Why: "unknown for " + roughDuration(now.Sub(r.UpdatedAt))})
		case r.Status == ledger.StatusPending && r.Attempt > 0 && !r.PendingUntil.IsZero() && now.After(r.PendingUntil):
			stuck.Rows = append(stuck.Rows, attentionRow{Row: r, Since: r.PendingUntil, Why: "lease ended " + roughDuration(now.Sub(r.PendingUntil)) + " ago"})
		case r.Status == ledger.StatusPending && r.Attempt == 0 && r.Autonomy == ledger.AutonomyOutbox && now.Sub(r.FirstSeenAt) > c.o.QueuedAfter:
			queued.Rows = append(queued.Rows, attentionRow{Row: r, Since: r.FirstSeenAt, Why: "queued " + roughDuration(now.Sub(r.FirstSeenAt)) + " ago"})
		}
	}
	q := ledger.ApprovalQuery{Tenant: tenant, Limit: ledger.MaxListLimit}
	truncated := tu || tp
	for n := 0; n < c.o.ScanLimit; {
		page, err := c.o.Store.ListApprovals(ctx, q)
		if err != nil {
			return nil, false, err
		}
		for _, r := range page.Rows {
			a := r.Approval
			approvals.Rows = append(approvals.Rows, attentionRow{Row: r, Since: a.RequestedAt, Why: "expires in " + roughDuration(a.ExpiresAt.Sub(now)) + ": " + a.Reason})
		}
		n += len(page.Rows)
		if page.NextCursor == "" {
			break
		}
		if n >= c.o.ScanLimit {
			truncated = true
		}
		q.Cursor = page.NextCursor
	}
	out := []section{paged, late, stuck, approvals, queued}
	for i := range out {
		s := &out[i]
		if s.ID != "approvals" { // approvals come soonest-to-expire first
			slices.SortStableFunc(s.Rows, func(a, b attentionRow) int {
				return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Row.Key, b.Row.Key))
			})
		}
		s.Shown = min(len(s.Rows), sectionRows)
		s.More = len(s.Rows) > sectionRows
	}
	return out, truncated, nil
}

// attention is GET /console/attention[?tenant=]: every visible tenant's
// counts, and the chosen tenant's rows.
func (c *Console) attention(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := c.tenantOf(r, s)
	if !ok {
		c.fail(w, s, http.StatusForbidden, "You may not look at that tenant.")
		return
	}
	ctx := r.Context()
	now := c.now()
	d := attentionData{Now: now, ScanLimit: c.o.ScanLimit, Expand: r.URL.Query().Get("all")}
	for _, t := range c.visibleTenants(s) {
		secs, trunc, err := c.needsAttention(ctx, t, now)
		if err != nil {
			c.storeFailed(w, s, err)
			return
		}
		tc := tenantCount{Tenant: t}
		for _, sec := range secs {
			tc.Counts = append(tc.Counts, sec.Count())
			tc.Total += sec.Count()
			if len(d.Titles) < len(secs) {
				d.Titles = append(d.Titles, sec.Title)
			}
		}
		d.Summary = append(d.Summary, tc)
		if t == tenant {
			d.Sections, d.Truncated = secs, trunc
		}
	}
	c.render(w, http.StatusOK, "attention", c.newPage(s, "Needs attention · "+tenant, "attention", tenant, d))
}

func (c *Console) storeFailed(w http.ResponseWriter, s *session, err error) {
	if errors.Is(err, ledger.ErrUnavailable) {
		c.fail(w, s, http.StatusServiceUnavailable, "The ledger's store is unavailable; try again shortly.")
		return
	}
	if errors.Is(err, ledger.ErrInvalid) {
		c.fail(w, s, http.StatusBadRequest, "That is not a valid key, run id or tenant.")
		return
	}
	c.log.Error("console: store read", "err", err)
	c.fail(w, s, http.StatusInternalServerError, "The ledger could not be read.")
}

type runData struct {
	Tenant    string
	RunID     string
	Rows      []ledger.Row
	Truncated bool
}

// runRows returns every row of a run, oldest first (the order the agent
// made its calls).
func (c *Console) runRows(ctx context.Context, tenant, runID string) ([]ledger.Row, bool, error) {
	rows, trunc, err := c.scan(ctx, ledger.ListQuery{Tenant: tenant, RunID: runID}, c.o.ScanLimit)
	if err != nil {
		return nil, false, err
	}
	slices.SortStableFunc(rows, func(a, b ledger.Row) int {
		return cmp.Or(a.FirstSeenAt.Compare(b.FirstSeenAt), strings.Compare(a.Key, b.Key))
	})
	return rows, trunc, nil
}

// runPage is GET /console/run?tenant=&run_id=: every row of one run in
// the order it was claimed — which run sent the second email.
func (c *Console) runPage(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := c.tenantOf(r, s)
	if !ok {
		c.fail(w, s, http.StatusForbidden, "You may not look at that tenant.")
		return
	}
	runID := r.URL.Query().Get("run_id")
	if ledger.ValidateRunID(runID) != nil {
		c.fail(w, s, http.StatusBadRequest, "A run id is 1-128 of A-Z a-z 0-9 _ -.")
		return
	}
	rows, trunc, err := c.runRows(r.Context(), tenant, runID)
	if err != nil {
		c.storeFailed(w, s, err)
		return
	}
	c.render(w, http.StatusOK, "run", c.newPage(s, "Run "+runID, "", tenant, runData{Tenant: tenant, RunID: runID, Rows: rows, Truncated: trunc}))
}

type searchHit struct {
	Row     ledger.Row
	Matched string
}

type searchData struct {
	Query     string
	Searched  bool
	Hits      []searchHit
	RunID     string
	RunRows   int
	Truncated bool
	ScanLimit int
	// Cut: the store's scan for receipt and tool call ids met its deadline.
	Cut           bool
	SearchTimeout time.Duration
}

// search is GET /console/search?tenant=&q=: a key (exact), a run id, a
// local id, a receipt id or a tool call id (search.go).
func (c *Console) search(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := c.tenantOf(r, s)
	if !ok {
		c.fail(w, s, http.StatusForbidden, "You may not look at that tenant.")
		return
	}
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	d := searchData{Query: q, ScanLimit: c.o.ScanLimit, SearchTimeout: c.o.SearchTimeout}
	if q != "" {
		d.Searched = true
		ctx := r.Context()
		seen := map[string]bool{}
		if ledger.ValidateKey(q) == nil {
			row, err := c.o.Store.Get(ctx, tenant, q)
			switch {
			case err == nil:
				d.Hits = append(d.Hits, searchHit{Row: row, Matched: "key"})
				seen[row.Key] = true
			case !errors.Is(err, ledger.ErrNotFound):
				c.storeFailed(w, s, err)
				return
			}
		}
		if ledger.ValidateRunID(q) == nil {
			rows, _, err := c.runRows(ctx, tenant, q)
			if err != nil {
				c.storeFailed(w, s, err)
				return
			}
			if len(rows) > 0 {
				d.RunID, d.RunRows = q, len(rows)
			}
		}
		var err error
		if c.o.Finder != nil {
			err = c.find(ctx, tenant, q, &d, seen)
		} else {
			err = c.scanFor(ctx, tenant, q, &d, seen)
		}
		if err != nil {
			c.storeFailed(w, s, err)
			return
		}
	}
	c.render(w, http.StatusOK, "search", c.newPage(s, "Search", "search", tenant, d))
}

type toolView struct {
	Tool      ledger.Tool
	Boxes     []box
	Effective ledger.Autonomy
	Reason    string
	Frozen    bool
}

type box struct {
	Name string
	On   bool
}

type toolsData struct {
	Tenant  string
	Tools   []toolView
	Freezes []ledger.Freeze
	Classes []ledger.ToolClass
}

// toolsPage is GET /console/tools?tenant=: the registry with its checklist,
// requested and effective autonomy, policy and who checked the boxes; the
// tenant's kill switch entries.
func (c *Console) toolsPage(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := c.tenantOf(r, s)
	if !ok {
		c.fail(w, s, http.StatusForbidden, "You may not look at that tenant.")
		return
	}
	ctx := r.Context()
	tools, err := c.o.Store.ListTools(ctx, tenant)
	if err != nil {
		c.storeFailed(w, s, err)
		return
	}
	freezes, err := c.freezesOf(ctx, tenant)
	if err != nil {
		c.storeFailed(w, s, err)
		return
	}
	d := toolsData{Tenant: tenant, Freezes: freezes,
		Classes: []ledger.ToolClass{ledger.ClassWriteIdempotent, ledger.ClassWriteLedger, ledger.ClassWriteIrreversible}}
	for _, t := range tools {
		eff, why := t.EffectiveAutonomy()
		open := map[string]bool{}
		for _, b := range t.Checklist.Open() {
			open[b] = true
		}
		v := toolView{Tool: t, Effective: eff, Reason: why}
		for _, name := range checklistBoxes {
			v.Boxes = append(v.Boxes, box{Name: name, On: !open[name]})
		}
		for _, f := range freezes {
			if f.Covers(tenant, t.Name, t.Class) {
				v.Frozen = true
			}
		}
		d.Tools = append(d.Tools, v)
	}
	c.render(w, http.StatusOK, "tools", c.newPage(s, "Tools · "+tenant, "tools", tenant, d))
}

// checklistBoxes are the seed's boxes in their order (ledger.Checklist).
var checklistBoxes = []string{"side_effect_documented", "key_born_in_runtime", "ledger_or_unique_field",
	"timeout_leaves_unknown", "error_classes_mapped", "duplicate_delivery_test"}

func (c *Console) freezesOf(ctx context.Context, tenant string) ([]ledger.Freeze, error) {
	all, err := c.o.Store.ListFreezes(ctx)
	if err != nil {
		return nil, err
	}
	var out []ledger.Freeze
	for _, f := range all {
		if f.Tenant == tenant {
			out = append(out, f)
		}
	}
	return out, nil
}
