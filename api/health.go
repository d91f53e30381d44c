package api

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
)

type healthResponse struct {
	Status string `json:"status"`
	// Failing names the readiness checks that failed (their errors are
	// logged, not served: /readyz needs no token).
	Failing []string `json:"failing,omitempty"`
}

// healthz is GET /healthz: 200 while the process serves.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, healthResponse{Status: "ok"})
}

// readyz is GET /readyz: 200 when every check passes, else 503 naming the
// failing checks. Checks run one after another, each bounded by the ready
// timeout, inside the request: no goroutine outlives it.
func (s *Server) readyz(c echo.Context) error {
	ctx := c.Request().Context()
	var failing []string
	for _, rc := range s.ready {
		if err := s.runCheck(ctx, rc); err != nil {
			failing = append(failing, rc.Name)
			s.log.WarnContext(ctx, "readiness check failed", "check", rc.Name, "err", err)
		}
	}
	if len(failing) > 0 {
		c.Response().Header().Set("Retry-After", "1")
		return c.JSON(http.StatusServiceUnavailable, healthResponse{Status: "not_ready", Failing: failing})
	}
	return c.JSON(http.StatusOK, healthResponse{Status: "ready"})
}

func (s *Server) runCheck(ctx context.Context, rc ReadyCheck) error {
	ctx, cancel := context.WithTimeout(ctx, s.readyTimeout)
	defer cancel()
	return rc.Check(ctx)
}
