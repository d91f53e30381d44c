package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
)

// redriveResponse answers POST /v1/admin/redrive.
type redriveResponse struct {
	Orphans redriveOrphans `json:"orphans"`
	// Relay is "woken" when this process runs a relay and was told to
	// publish its outbox now, "absent" otherwise.
	Relay string `json:"relay"`
}

// redriveOrphans is what the redrive did with parked deliveries.
type redriveOrphans struct {
	// LocalIDs is how many local ids with parked deliveries were looked at.
	LocalIDs int `json:"local_ids"`
	// Applied are the rows that took their parked deliveries.
	Applied []redrivenRow `json:"applied"`
	// StillParked counts the local ids that still have no row.
	StillParked int `json:"still_parked"`
}

type redrivenRow struct {
	Tenant     string        `json:"tenant"`
	Key        string        `json:"key"`
	Status     ledger.Status `json:"status"`
	Deliveries int           `json:"deliveries"`
}

// redrive is POST /v1/admin/redrive: apply the vendor events parked under
// a local id whose row exists now, then wake the relay so that every
// pending outbox record is published at once (a backoff after an outage
// is cut short). The body is empty or {}. Safe to repeat: a second call
// finds nothing to apply.
func (s *Server) redrive(c echo.Context) error {
	data, err := readBody(c, s.bodyLimit)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		var none struct{}
		if err := decodeStrict(data, &none); err != nil {
			return err
		}
	}
	ctx := requestContext(c)
	res, err := s.store.RedriveOrphans(ctx)
	if err != nil {
		return err
	}
	out := redriveResponse{
		Orphans: redriveOrphans{LocalIDs: res.LocalIDs, StillParked: res.StillParked, Applied: make([]redrivenRow, 0, len(res.Rows))},
		Relay:   "absent",
	}
	for _, r := range res.Rows {
		for _, ch := range r.Changes {
			s.metrics.change(ch, ledger.SourceWebhook)
		}
		s.watch.signal(r.Row.Tenant, r.Row.Key)
		out.Orphans.Applied = append(out.Orphans.Applied, redrivenRow{
			Tenant: r.Row.Tenant, Key: r.Row.Key, Status: r.Row.Status, Deliveries: len(r.Changes),
		})
	}
	if s.wakeRelay != nil {
		s.wakeRelay()
		out.Relay = "woken"
	}
	s.log.InfoContext(ctx, "redrive", "local_ids", res.LocalIDs, "applied_rows", len(res.Rows),
		"still_parked", res.StillParked, "relay", out.Relay)
	return writeJSON(c, http.StatusOK, out)
}
