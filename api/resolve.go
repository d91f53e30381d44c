package api

import (
	"net/http"
	"strings"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// resolveBody is the body of POST /v1/claims/{key}/resolve. The admin token
// has no tenant, so the body names the row's tenant: this is the one route
// where a tenant comes from a body, and only an admin token reaches it.
type resolveBody struct {
	Tenant    string        `json:"tenant"`
	Status    ledger.Status `json:"status"`
	ReceiptID string        `json:"receipt_id,omitempty"`
	Note      string        `json:"note"`
	Actor     string        `json:"actor,omitempty"`
}

// DefaultActor records a resolution whose body names no actor.
const DefaultActor = "admin"

// resolve is POST /v1/claims/{key}/resolve: a human closes a row, recording
// who and why as evidence with source human.
func (s *Server) resolve(c echo.Context) error {
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	var b resolveBody
	if err := s.bind(c, &b); err != nil {
		return err
	}
	if err := ledger.ValidateTenant(b.Tenant); err != nil {
		return err
	}
	if b.Status != ledger.StatusSucceeded && b.Status != ledger.StatusFailedPoison {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "status must be succeeded or failed_poison")
	}
	if strings.TrimSpace(b.Note) == "" {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "note is required: say why the row is resolved by hand")
	}
	if b.Actor == "" {
		b.Actor = DefaultActor
	}
	if hasControl(b.Actor) {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "actor must not contain control characters")
	}
	ctx := requestContext(c)
	row, ch, err := s.store.Apply(ctx, b.Tenant, key, ledger.Evidence{
		Source: ledger.SourceHuman, Status: b.Status, ReceiptID: b.ReceiptID,
		Actor: b.Actor, Note: b.Note, At: s.now(),
	})
	if err != nil {
		return err
	}
	s.watch.signal(b.Tenant, key)
	s.metrics.change(ch, ledger.SourceHuman)
	traceRow(ctx, row, tracing.KeySource.String(string(ledger.SourceHuman)))
	s.log.InfoContext(ctx, "resolved by hand", append(logAttrs(b.Tenant, key, row.RunID),
		"actor", b.Actor, "status", b.Status, "changed", ch.Changed)...)
	return writeJSON(c, http.StatusOK, rowResponse{Row: present(row)})
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}
