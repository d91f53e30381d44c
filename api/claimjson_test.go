package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The hand-written claim answer must be encoding/json's, byte for byte:
// its own members (the decision, the code, the window, a null row) around
// the row, which ledger.AppendRowJSON writes (ledger/rowjson_test.go holds
// that to encoding/json for rows full of escapes, zones and every field).
func TestClaimJSONAsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 30, 1, 123456789, time.UTC)
	window := at.Add(time.Hour)
	elsewhere := window.In(time.FixedZone("X", -7200))
	odd := ledger.Row{Tenant: "a\"b", Key: "k\\1", Tool: "t\u2029<>&\t", Status: ledger.StatusUnknown, Attempt: 2,
		FirstSeenAt: at.In(time.FixedZone("CET", 3600)), UpdatedAt: at, Expect: &ledger.Expect{Amount: 100, Currency: "usd"}}
	tests := []struct {
		name string
		v    claimResponse
	}{
		{name: "no row", v: claimResponse{Decision: ledger.DecisionStop, Code: ledger.CodeToolFrozen}},
		{name: "new row", v: newClaimResponse(ledger.ClaimResult{Decision: ledger.DecisionProceed, Inserted: true,
			Row: ledger.Row{Tenant: "acme", Key: "k1", RunID: "run_1", Tool: "t", Status: ledger.StatusPending, Attempt: 1,
				FirstSeenAt: at, UpdatedAt: at, PendingUntil: at.Add(time.Minute), ReplayWindowUntil: window}})},
		{name: "a code, a window and a row that needs escapes", v: claimResponse{Decision: ledger.DecisionWait, Code: "c\"<", Row: &odd, ReplayWindowUntil: &window}},
		{name: "a window in another zone", v: claimResponse{Decision: "d\u00e9", Row: &ledger.Row{}, ReplayWindowUntil: &elsewhere}},
		{name: "zero row", v: claimResponse{Decision: ledger.DecisionProceed, Row: &ledger.Row{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(tc.v); err != nil {
				t.Fatal(err)
			}
			got, err := appendClaimResponse(nil, tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("appendClaimResponse:\n%s\nencoding/json:\n%s", got, want.Bytes())
			}
		})
	}
	t.Run("a time encoding/json refuses", func(t *testing.T) {
		r := ledger.Row{FirstSeenAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
		if _, err := appendClaimResponse(nil, claimResponse{Row: &r}); err == nil {
			t.Fatal("a year past 9999 encoded; encoding/json refuses it")
		}
	})
}
