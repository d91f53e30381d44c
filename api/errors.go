package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/ledger"
)

// Error is an API error with the status and code the client sees. Its
// message is always safe to send.
type Error struct {
	Status  int
	Code    string
	Message string
}

func newError(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// statusClientClosed is what the logs and metrics record for a request whose
// client went away (nginx's convention); nobody reads the response.
const statusClientClosed = 499

// classify maps an error to what the client sees. It is the only place
// where errors become HTTP statuses. The bool reports an internal error,
// whose real text must be logged and never sent.
func classify(err error) (status int, code, msg string, internal bool) {
	var ae *Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
		return ae.Status, ae.Code, ae.Message, false
	case errors.Is(err, ledger.ErrIdempotencyKeyReused):
		return http.StatusUnprocessableEntity, apierror.CodeIdempotencyKeyReused,
			"Idempotency-Key: the value was sent before with another request (route or body); a new call needs a new value", false
	case errors.Is(err, ledger.ErrToolNotFound):
		return http.StatusNotFound, apierror.CodeNotFound, "no such tool", false
	case errors.Is(err, ledger.ErrApprovalNotFound):
		return http.StatusNotFound, apierror.CodeNotFound, "no such approval", false
	case errors.Is(err, ledger.ErrApprovalDecided):
		return http.StatusConflict, apierror.CodeApprovalDecided, sentinelMessage(err, ledger.ErrApprovalDecided), false
	case errors.Is(err, ledger.ErrApprovalExpired):
		return http.StatusConflict, apierror.CodeApprovalExpired, sentinelMessage(err, ledger.ErrApprovalExpired), false
	case errors.Is(err, ledger.ErrRequestRequired):
		return http.StatusUnprocessableEntity, apierror.CodeRequestRequired, ledger.ErrRequestRequired.Error(), false
	case errors.Is(err, ledger.ErrNotQueued):
		return http.StatusConflict, apierror.CodeNotQueued, ledger.ErrNotQueued.Error(), false
	case errors.Is(err, ledger.ErrSelfApproval):
		return http.StatusForbidden, apierror.CodeForbidden, ledger.ErrSelfApproval.Error(), false
	case errors.Is(err, ledger.ErrNotFound):
		return http.StatusNotFound, apierror.CodeNotFound, "no such claim", false
	case errors.Is(err, ledger.ErrFingerprintMismatch):
		return http.StatusUnprocessableEntity, apierror.CodeFingerprintMismatch, ledger.ErrFingerprintMismatch.Error(), false
	case errors.Is(err, ledger.ErrToolMismatch):
		return http.StatusUnprocessableEntity, apierror.CodeToolMismatch, sentinelMessage(err, ledger.ErrToolMismatch), false
	case errors.Is(err, ledger.ErrInvalidTransition):
		return http.StatusConflict, apierror.CodeInvalidTransition, sentinelMessage(err, ledger.ErrInvalidTransition), false
	case errors.Is(err, ledger.ErrCompensationPending):
		return http.StatusConflict, apierror.CodeCompensationPending, ledger.ErrCompensationPending.Error(), false
	case errors.Is(err, ledger.ErrCompensationFailed):
		return http.StatusUnprocessableEntity, apierror.CodeCompensationFailed, ledger.ErrCompensationFailed.Error(), false
	case errors.Is(err, ledger.ErrInvalid):
		return http.StatusBadRequest, apierror.CodeInvalidInput, invalidMessage(err), false
	case errors.Is(err, ledger.ErrUnavailable):
		return http.StatusServiceUnavailable, apierror.CodeUnavailable, ledger.ErrUnavailable.Error(), false
	case errors.Is(err, context.Canceled):
		return statusClientClosed, "client_closed", "request canceled", false
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, apierror.CodeUnavailable, "the store did not answer in time", true
	case errors.As(err, &he):
		if he.Code >= 500 {
			return he.Code, apierror.CodeInternal, "internal error", true
		}
		m, ok := he.Message.(string)
		if !ok || m == "" {
			m = http.StatusText(he.Code)
		}
		return he.Code, snake(http.StatusText(he.Code)), m, false
	}
	return http.StatusInternalServerError, apierror.CodeInternal, "internal error", true
}

// invalidMessage is the text of the ledger's InvalidError in err, which the
// ledger builds from constant text and the caller's own input, so it is
// safe to send; what a store wrapped around it is not sent.
func invalidMessage(err error) string {
	var all ledger.InvalidErrors
	if errors.As(err, &all) {
		return all.Error() // every problem of the body at once
	}
	var ie *ledger.InvalidError
	if !errors.As(err, &ie) {
		return ledger.ErrInvalid.Error()
	}
	return ie.Error()
}

// sentinelMessage is the ledger's "<sentinel>: <detail>" inside err, built
// from constant text and the row's own states; what a store wrapped around
// it (its operation's name, before the sentinel) is dropped. Without the
// sentinel's text in it, err is reduced to the sentinel's text.
func sentinelMessage(err, sentinel error) string {
	m := err.Error()
	i := strings.Index(m, sentinel.Error())
	if i < 0 {
		return sentinel.Error()
	}
	return m[i:]
}

// snake turns a status text into a code: "Method Not Allowed" → "method_not_allowed".
func snake(s string) string {
	s = strings.ToLower(s)
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
	return strings.Trim(s, "_")
}

// handleError is the echo HTTPErrorHandler: every error of every route,
// including routes other packages add through Echo(), leaves through here.
func (s *Server) handleError(err error, c echo.Context) {
	status, code, msg, internal := classify(err)
	req := c.Request()
	traceError(req.Context(), code)
	if internal {
		// The real error goes to the log only; it may hold a DSN, a path or
		// a vendor's answer.
		s.log.ErrorContext(req.Context(), "request failed", "method", req.Method, "route", routeOf(c), "status", status, "err", err)
	}
	if c.Response().Committed {
		return
	}
	if status == statusClientClosed {
		c.Response().WriteHeader(status)
		return
	}
	if status == http.StatusServiceUnavailable {
		c.Response().Header().Set("Retry-After", "1")
	}
	if req.Method == http.MethodHead {
		err = c.NoContent(status)
	} else {
		err = writeJSON(c, status, apierror.New(code, msg))
	}
	if err != nil {
		s.log.WarnContext(req.Context(), "writing error response", "err", err)
	}
}

// logAttrs are the constant keys a handler logs with; never tokens or bodies.
func logAttrs(tenant, key, runID string) []any {
	a := []any{slog.String("tenant", tenant), slog.String("key", key)}
	if runID != "" {
		a = append(a, slog.String("run_id", runID))
	}
	return a
}
