package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/ledger"
)

// claimBody is the body of POST /v1/claims.
type claimBody struct {
	RunID      string           `json:"run_id"`
	Tool       string           `json:"tool"`
	ToolCallID string           `json:"tool_call_id"`
	Vendor     string           `json:"vendor"`
	ToolClass  ledger.ToolClass `json:"tool_class"`
	Intent     json.RawMessage  `json:"intent"`
	Key        string           `json:"key,omitempty"`
	Request    *ledger.Request  `json:"request,omitempty"`
	Expect     *ledger.Expect   `json:"expect,omitempty"`
}

// decodeClaim decodes a claim body strictly (see decodeStrict). What the
// values mean is checked by ledger.NewClaim.
func decodeClaim(data []byte) (claimBody, error) {
	var b claimBody
	if err := decodeStrict(data, &b); err != nil {
		return claimBody{}, err
	}
	return b, nil
}

// claimResponse answers a claim or a compensation.
type claimResponse struct {
	Decision ledger.Decision `json:"decision"`
	Code     string          `json:"code,omitempty"`
	// Row is null only for a frozen tool with no row (nothing was inserted).
	Row *ledger.Row `json:"row"`
	// ReplayWindowUntil is when the vendor forgets the key; absent when the
	// vendor does not replay (or for a frozen tool with no row).
	ReplayWindowUntil *time.Time `json:"replay_window_until,omitempty"`
}

func newClaimResponse(res ledger.ClaimResult) claimResponse {
	out := claimResponse{Decision: res.Decision, Code: res.Code}
	if res.Row.Key != "" {
		row := present(res.Row)
		out.Row = &row
		if !row.ReplayWindowUntil.IsZero() {
			t := row.ReplayWindowUntil
			out.ReplayWindowUntil = &t
		}
	}
	return out
}

// decisionStatus is the HTTP status of a decision (docs/architecture.md §4,
// §11): 201 a new row that proceeds, 202 a row waiting for a human
// (await_approval) or for the outbox worker (queued), 409 wait, 423 a
// frozen tool with no row, 200 the rest (a proceed after a grant, or a
// worker's, among them: no row is inserted).
func decisionStatus(res ledger.ClaimResult) int {
	switch {
	case res.Decision == ledger.DecisionProceed && res.Inserted:
		return http.StatusCreated
	case res.Decision == ledger.DecisionAwaitApproval, res.Decision == ledger.DecisionQueued:
		return http.StatusAccepted
	case res.Decision == ledger.DecisionWait:
		return http.StatusConflict
	case res.Decision == ledger.DecisionStop && res.Code == ledger.CodeToolFrozen:
		return http.StatusLocked
	}
	return http.StatusOK
}

// claim is POST /v1/claims[?wait=].
func (s *Server) claim(c echo.Context) error {
	tenant := principalOf(c).tenant
	var wait time.Duration
	if c.Request().URL.RawQuery != "" { // echo's QueryParam parses (and allocates) even an empty query
		var err error
		if wait, err = parseWait(c.QueryParam("wait")); err != nil {
			return err
		}
	}
	data, err := readBody(c, s.bodyLimit)
	if err != nil {
		return err
	}
	b, err := decodeClaim(data)
	if err != nil {
		return err
	}
	ctx := requestContext(c)
	cl, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: b.RunID, Tool: b.Tool, ToolCallID: b.ToolCallID, Vendor: b.Vendor,
		ToolClass: b.ToolClass, Intent: b.Intent, Key: b.Key, Request: b.Request, Expect: b.Expect,
		ReplayWindow: s.replayWindow(b.Vendor, b.Request),
		VendorKey:    s.vendorKeyFor(b.Vendor),
		Frozen:       s.frozen(tenant, b.Tool, b.ToolClass),
		Traceparent:  traceparentOf(ctx),
	}, s.policy, s.now())
	if err != nil {
		return err
	}
	if cl.Gate, err = s.gate(c, b); err != nil {
		return err
	}
	res, err := s.store.Claim(ctx, cl)
	if err != nil {
		return err
	}
	if res.Decision == ledger.DecisionWait && wait > 0 {
		s.extendForWait(c, wait)
		if res, err = s.awaitRow(ctx, cl, res, wait); err != nil {
			return err
		}
	}
	s.recordClaim(ctx, cl.Row, res)
	return writeClaimJSON(c, decisionStatus(res), newClaimResponse(res))
}

// present is a row as the API answers it: with vendor_key always set (a
// row stored before vendor keys existed sent its ledger key).
func present(r ledger.Row) ledger.Row {
	r.VendorKey = r.WireKey()
	return r
}

// vendorKeyFor is the claim's rule for the key sent to vendor (nil: the
// ledger key itself).
func (s *Server) vendorKeyFor(vendor string) func(string) string {
	if s.vendorKey == nil {
		return nil
	}
	return func(key string) string { return s.vendorKey(vendor, key) }
}

func (s *Server) recordClaim(ctx context.Context, row ledger.Row, res ledger.ClaimResult) {
	s.metrics.claims.WithLabelValues(row.Tenant, string(res.Decision)).Inc()
	traceClaim(ctx, row, res)
	for _, ch := range res.Changes {
		s.metrics.change(ch, ledger.SourceWebhook) // parked orphan events
	}
	// The line every claim writes: its attributes from the stack, built
	// only when the logger takes them (logAttrs' keys, then the answer).
	if !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var attrs [6]slog.Attr
	a := append(attrs[:0], slog.String("tenant", row.Tenant), slog.String("key", row.Key))
	if row.RunID != "" {
		a = append(a, slog.String("run_id", row.RunID))
	}
	a = append(a, slog.String("decision", string(res.Decision)))
	if res.Code != "" {
		a = append(a, slog.String("code", res.Code))
	}
	if res.Row.Key != "" {
		a = append(a, slog.Int("attempt", res.Row.Attempt))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "claim decided", a...)
}

// parseWait reads ?wait=: a Go duration ("5s", "1500ms") or seconds ("5",
// "2.5"), at most MaxWait.
func parseWait(q string) (time.Duration, error) {
	if q == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil {
		f, ferr := strconv.ParseFloat(q, 64)
		if ferr != nil || strings.Trim(q, "0123456789.") != "" { // plain decimals: no 1e3, 0x1p4, NaN, Inf
			return 0, newError(http.StatusBadRequest, apierror.CodeInvalidInput, "wait must be a duration (5s) or seconds (5)")
		}
		if f < 0 || f > MaxWait.Seconds() {
			return 0, waitRange()
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 || d > MaxWait {
		return 0, waitRange()
	}
	return d, nil
}

func waitRange() *Error {
	return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "wait must be from 0 to "+MaxWait.String())
}

// awaitRow long-polls an in-flight row until a claim would no longer answer
// wait, or until wait ends (answering wait with the latest row). It wakes on
// a change made through this Server, or every poll interval to see changes
// made elsewhere. It re-reads the row and decides in memory first, and runs
// the store's claim (which may grant a retry) only when the answer moved, so
// a waiter costs one read per wake-up, not one write transaction.
func (s *Server) awaitRow(ctx context.Context, cl ledger.Claim, res ledger.ClaimResult, wait time.Duration) (ledger.ClaimResult, error) {
	s.metrics.waiting.Inc()
	defer s.metrics.waiting.Dec()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	tenant, key := cl.Row.Tenant, cl.Row.Key
	for {
		changed, release := s.watch.watch(tenant, key)
		next, done, err := s.recheck(ctx, cl, res)
		if err != nil || done {
			release()
			return next, err
		}
		res = next
		select {
		case <-changed:
		case <-tick.C:
		case <-deadline.C:
			release()
			return res, nil
		case <-s.stopWaits:
			release()
			return res, nil
		case <-ctx.Done():
			release()
			return res, ctx.Err()
		}
		release()
	}
}

// recheck reads the row and reports done when a claim now answers anything
// but wait.
func (s *Server) recheck(ctx context.Context, cl ledger.Claim, last ledger.ClaimResult) (ledger.ClaimResult, bool, error) {
	row, err := s.store.Get(ctx, cl.Row.Tenant, cl.Row.Key)
	if err != nil {
		return last, false, err
	}
	probe := cl
	probe.At = s.now()
	probe.Frozen = s.frozen(row.Tenant, row.Tool, row.ToolClass)
	if d, _, err := ledger.DecideClaim(&row, probe, s.policy); err == nil && d.Decision == ledger.DecisionWait {
		last.Row = row
		// A row a human was paged for ends the wait: only the human (or a
		// late webhook) will settle it, and the caller should know now.
		return last, !row.PagedAt.IsZero(), nil
	}
	res, err := s.store.Claim(ctx, probe)
	if err != nil {
		return last, false, err
	}
	return res, res.Decision != ledger.DecisionWait, nil
}
