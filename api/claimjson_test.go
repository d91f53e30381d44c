package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The hand-written claim answer must be encoding/json's, byte for byte,
// for the rows a claim answers with and for rows full of what needs
// escaping or encoding/json's own rules.
func TestClaimJSONAsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 30, 1, 123456789, time.UTC)
	yes, no := true, false
	full := ledger.Row{
		Tenant: "acme", Key: "k1", IntentFingerprint: "fp", MetadataLocalID: "l1", RunID: "run_1", Tool: "stripe.x",
		ToolCallID: "call_1", Vendor: "stripe", ToolClass: ledger.ToolClass("write_idempotent"), Status: ledger.StatusPending,
		Attempt: 3, VendorKey: "vk", UpstreamReceiptID: "pi_1", IdempotentReplayed: true, VendorShouldRetry: &no,
		LastHTTPStatus: 502, Result: `{"ok":true,"html":"<b>&"}`, FirstSeenAt: at, UpdatedAt: at.Add(time.Second),
		SucceededAt: at, PagedAt: at, PendingUntil: at.Add(15 * time.Minute), ReplayWindowUntil: at.Add(24 * time.Hour),
		NextCheckAt: at, CompensationOf: "k0", CompensationAction: "refund",
		Request:     &ledger.Request{Method: "POST", Path: "/v1/x?a=1&b=<2>", ContentType: "application/json", Body: "{\"a\":\"\u2028\"}"},
		Expect:      &ledger.Expect{Amount: 100, Currency: "usd"},
		Resolution:  &ledger.Resolution{Source: ledger.Source("human"), Actor: "ops", Note: "é\x00", At: at},
		Autonomy:    ledger.Autonomy("approval"),
		Approval:    &ledger.Approval{ID: "ap_1", Reason: "large", RequestedAt: at, ExpiresAt: at},
		Alerts:      []ledger.Alert{{Kind: ledger.AlertKind("late_success"), Source: ledger.Source("webhook"), At: at}},
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	odd := full
	odd.Tenant, odd.Key, odd.RunID, odd.Tool = "a\"b", "k\\1", "run\u00e9\xff", "t\u2029<>&\t"
	odd.VendorShouldRetry, odd.Alerts = &yes, []ledger.Alert{}
	odd.FirstSeenAt = at.In(time.FixedZone("CET", 3600))
	odd.UpdatedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // no fraction
	window := at.Add(time.Hour)
	tests := []struct {
		name string
		v    claimResponse
	}{
		{name: "no row", v: claimResponse{Decision: ledger.DecisionStop, Code: ledger.CodeToolFrozen}},
		{name: "new row", v: newClaimResponse(ledger.ClaimResult{Decision: ledger.DecisionProceed, Inserted: true,
			Row: ledger.Row{Tenant: "acme", Key: "k1", RunID: "run_1", Tool: "t", Status: ledger.StatusPending, Attempt: 1,
				FirstSeenAt: at, UpdatedAt: at, PendingUntil: at.Add(time.Minute)}})},
		{name: "every field", v: claimResponse{Decision: ledger.DecisionWait, Code: "c", Row: &full, ReplayWindowUntil: &window}},
		{name: "escapes and zones", v: claimResponse{Decision: ledger.DecisionProceed, Row: &odd}},
		{name: "zero row", v: claimResponse{Decision: ledger.DecisionProceed, Row: &ledger.Row{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantClaimJSON(t, tc.v)
		})
	}
	t.Run("random strings", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		alphabet := []rune("aZ09 _-.:/\"\\<>&\t\n\u007f\u00e9\u2028\u2029\U0001F600")
		word := func() string {
			var sb strings.Builder
			for range rng.IntN(12) {
				sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			if rng.IntN(10) == 0 {
				sb.WriteByte(0xff) // invalid UTF-8
			}
			return sb.String()
		}
		for range 500 {
			r := full
			r.Tenant, r.Key, r.Tool, r.Vendor, r.ToolCallID, r.Result = word(), word(), word(), word(), word(), word()
			r.Status, r.Traceparent, r.VendorKey = ledger.Status(word()), word(), word()
			wantClaimJSON(t, claimResponse{Decision: ledger.Decision(word()), Code: word(), Row: &r})
		}
	})
	t.Run("a time encoding/json refuses", func(t *testing.T) {
		r := ledger.Row{FirstSeenAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
		if _, err := appendClaimResponse(nil, claimResponse{Row: &r}); err == nil {
			t.Fatal("a year past 9999 encoded; encoding/json refuses it")
		}
	})
}

func wantClaimJSON(t *testing.T, v claimResponse) {
	t.Helper()
	var want bytes.Buffer
	if err := json.NewEncoder(&want).Encode(v); err != nil {
		t.Fatal(err)
	}
	got, err := appendClaimResponse(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("appendClaimResponse:\n%s\nencoding/json:\n%s", got, want.Bytes())
	}
}
