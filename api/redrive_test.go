package api_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
)

type redriveResp struct {
	Orphans struct {
		LocalIDs int `json:"local_ids"`
		Applied  []struct {
			Tenant     string        `json:"tenant"`
			Key        string        `json:"key"`
			Status     ledger.Status `json:"status"`
			Deliveries int           `json:"deliveries"`
		} `json:"applied"`
		StillParked int `json:"still_parked"`
	} `json:"orphans"`
	Relay string `json:"relay"`
}

// TestRedrive: POST /v1/admin/redrive applies a success parked beside an
// existing row (built by hand: the flows never leave one), leaves an orphan
// without a row parked, wakes the relay, and is admin-only and strict about
// its (empty) body.
func TestRedrive(t *testing.T) {
	tests := []struct {
		name    string
		token   string
		body    any
		relay   bool
		status  int
		code    string
		applied bool
	}{
		{name: "admin, no body, with a relay", token: tokenAdmin, relay: true, status: 200, applied: true},
		{name: "admin, empty object, no relay here", token: tokenAdmin, body: `{}`, status: 200, applied: true},
		{name: "tenant token", token: tokenAcme, status: 403, code: "forbidden"},
		{name: "no token", status: 401, code: "unauthorized"},
		{name: "a body with a field", token: tokenAdmin, body: `{"tenant":"acme"}`, status: 400, code: "bad_json"},
		{name: "a body that is not an object", token: tokenAdmin, body: `[]`, status: 400, code: "bad_json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var woken atomic.Int32
			f := newFixture(t, func(o *api.Options) {
				if tc.relay {
					o.WakeRelay = func() { woken.Add(1) }
				}
			})
			row := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row
			// A vendor event for a local id that has no row: parked.
			orphan := ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_orphan", LocalID: "rl_no_row_yet", At: t0,
				Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_9", VendorEventID: "evt_orphan", At: t0}}
			if res, err := f.store.Ingest(t.Context(), orphan); err != nil || res.Outcome != ledger.IngestOrphan {
				t.Fatalf("Ingest: %q %v", res.Outcome, err)
			}
			// A success parked beside the claimed row.
			stranded := ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_stranded", LocalID: row.MetadataLocalID, At: t0,
				Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", VendorEventID: "evt_stranded", At: t0.Add(time.Second)}}
			if err := f.store.InTx(t.Context(), func(tx ledger.Tx) error { return tx.PutOrphan(stranded) }); err != nil {
				t.Fatal(err)
			}

			rec := f.do(http.MethodPost, "/v1/admin/redrive", tc.token, tc.body)
			after := decode[rowResp](t, f.do(http.MethodGet, "/v1/claims/"+row.Key, tokenAcme, nil)).Row
			if tc.code != "" {
				wantError(t, rec, tc.status, tc.code)
				if after.Status != ledger.StatusPending || woken.Load() != 0 {
					t.Fatalf("a refused redrive acted: row %s, relay woken %d times", after.Status, woken.Load())
				}
				return
			}
			wantStatus(t, rec, tc.status)
			got := decode[redriveResp](t, rec)
			if got.Orphans.LocalIDs != 2 || got.Orphans.StillParked != 1 || len(got.Orphans.Applied) != 1 {
				t.Fatalf("orphans: %+v, want 2 local ids, 1 still parked, 1 applied", got.Orphans)
			}
			if a := got.Orphans.Applied[0]; a.Tenant != "acme" || a.Key != row.Key || a.Status != ledger.StatusSucceeded || a.Deliveries != 1 {
				t.Fatalf("applied: %+v", a)
			}
			if after.Status != ledger.StatusSucceeded || after.UpstreamReceiptID != "pi_1" {
				t.Fatalf("row: %s %q, want succeeded pi_1", after.Status, after.UpstreamReceiptID)
			}
			wantRelay, wantWoken := "absent", int32(0)
			if tc.relay {
				wantRelay, wantWoken = "woken", 1
			}
			if got.Relay != wantRelay || woken.Load() != wantWoken {
				t.Fatalf("relay %q woken %d times, want %q %d", got.Relay, woken.Load(), wantRelay, wantWoken)
			}
			if v := f.metricValue("reconciler_transitions_total", map[string]string{"from": "pending", "to": "succeeded", "source": "webhook"}); v != 1 {
				t.Fatalf("reconciler_transitions_total{pending→succeeded, webhook} = %v, want 1", v)
			}
			// Again: nothing left to apply.
			again := decode[redriveResp](t, f.do(http.MethodPost, "/v1/admin/redrive", tokenAdmin, nil))
			if again.Orphans.LocalIDs != 1 || len(again.Orphans.Applied) != 0 {
				t.Fatalf("second redrive: %+v", again.Orphans)
			}
		})
	}
}
