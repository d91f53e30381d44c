package postgres

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// encodeRow writes what json.Marshal(rowDoc{…}) wrote, byte for byte, so
// documents stored before and after it are the same.
func TestEncodeRowAsRowDoc(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 30, 1, 123456789, time.UTC)
	for _, r := range []ledger.Row{
		{},
		{Tenant: "acme", Key: "k\"<1>", MetadataLocalID: "rcn_1", Status: ledger.StatusPending, Attempt: 1,
			FirstSeenAt: at, UpdatedAt: at, PendingUntil: at.Add(time.Minute),
			Request:  &ledger.Request{Method: "POST", Path: "/v1/x", Body: `{"a":1}`},
			Approval: &ledger.Approval{ID: "ap_1", RequestedAt: at, ExpiresAt: at}},
	} {
		want, err := json.Marshal(rowDoc{V: rowDocVersion, Row: r})
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeRow(r)
		if err != nil || got != string(want) {
			t.Fatalf("encodeRow: %s %v\njson.Marshal: %s", got, err, want)
		}
		back, err := decodeRow([]byte(got))
		if err != nil || back.Key != r.Key {
			t.Fatalf("decodeRow: %+v %v", back, err)
		}
	}
}
