package storetest

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// testCountRows: the counts follow every insert and transition.
func testCountRows(t *testing.T, open Open) {
	e := newEnv(t, open)
	check := func(want map[ledger.Status]int64) {
		t.Helper()
		got, err := e.s.CountRows(e.ctx)
		if err != nil {
			t.Fatalf("CountRows: %v", err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("CountRows = %v, want %v", got, want)
		}
	}
	check(map[ledger.Status]int64{ledger.StatusPending: 0, ledger.StatusUnknown: 0, ledger.StatusSucceeded: 0, ledger.StatusFailedPoison: 0})
	var keys []string
	for i := range 4 {
		res := e.claim(baseRequest(withIntent(fmt.Sprintf(`{"n":%d}`, i))), t0)
		keys = append(keys, res.Row.Key)
	}
	e.report(tenantA, keys[0], ledger.Outcome{Kind: ledger.OutcomeTimeout, At: at(time.Second)})
	e.report(tenantA, keys[1], ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 201, ReceiptID: "pi_1", At: at(time.Second)})
	e.report(tenantA, keys[2], ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 400, At: at(time.Second)})
	// A repeat that changes nothing must not move the counts.
	e.report(tenantA, keys[1], ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 201, ReceiptID: "pi_1", At: at(2 * time.Second)})
	check(map[ledger.Status]int64{ledger.StatusPending: 1, ledger.StatusUnknown: 1, ledger.StatusSucceeded: 1, ledger.StatusFailedPoison: 1})
}
