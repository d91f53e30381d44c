package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
)

// Degraded is what a ReadyCheck returns for a dependency that works but is
// behind (the event relay's backlog): /readyz still answers 200, with
// status "degraded" and Detail under the check's name. Detail is served to
// anyone (/readyz needs no token): it must hold no secret.
type Degraded struct {
	Detail string
}

func (d *Degraded) Error() string { return "degraded: " + d.Detail }

// Unready is what a ReadyCheck returns for a failure it explains itself
// (the store's disk is full): /readyz answers 503 with Detail under the
// check's name in details, and does not log it — the component that
// knows logged it once. Detail is served to anyone: no secret, no path.
type Unready struct {
	Detail string
}

func (u *Unready) Error() string { return "not ready: " + u.Detail }

type healthResponse struct {
	Status string `json:"status"`
	// Failing names the readiness checks that failed (their errors are
	// logged, not served: /readyz needs no token).
	Failing []string `json:"failing,omitempty"`
	// Degraded holds each degraded check's detail, by check name.
	Degraded map[string]string `json:"degraded,omitempty"`
	// Details explain failing checks that explain themselves (Unready).
	Details map[string]string `json:"details,omitempty"`
}

// healthz is GET /healthz: 200 while the process serves.
func (s *Server) healthz(c echo.Context) error {
	return writeJSON(c, http.StatusOK, healthResponse{Status: "ok"})
}

// readyz is GET /readyz: 200 when every check passes, 200 "degraded" with
// each degraded check's detail when some return a *Degraded, else 503
// naming the failing checks. Checks run one after another, each bounded by
// the ready timeout, inside the request: no goroutine outlives it.
func (s *Server) readyz(c echo.Context) error {
	ctx := requestContext(c)
	var failing []string
	var degraded, details map[string]string
	for _, rc := range s.ready {
		err := s.runCheck(ctx, rc)
		var d *Degraded
		var u *Unready
		switch {
		case err == nil:
		case errors.As(err, &d):
			if degraded == nil {
				degraded = map[string]string{}
			}
			degraded[rc.Name] = d.Detail
		case errors.As(err, &u):
			failing = append(failing, rc.Name)
			if details == nil {
				details = map[string]string{}
			}
			details[rc.Name] = u.Detail
		default:
			failing = append(failing, rc.Name)
			s.log.WarnContext(ctx, "readiness check failed", "check", rc.Name, "err", err)
		}
	}
	switch {
	case len(failing) > 0:
		c.Response().Header().Set("Retry-After", "1")
		return writeJSON(c, http.StatusServiceUnavailable, healthResponse{Status: "not_ready", Failing: failing, Degraded: degraded, Details: details})
	case len(degraded) > 0:
		return writeJSON(c, http.StatusOK, healthResponse{Status: "degraded", Degraded: degraded})
	}
	return writeJSON(c, http.StatusOK, healthResponse{Status: "ready"})
}

func (s *Server) runCheck(ctx context.Context, rc ReadyCheck) error {
	ctx, cancel := context.WithTimeout(ctx, s.readyTimeout)
	defer cancel()
	return rc.Check(ctx)
}
