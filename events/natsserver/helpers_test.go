package natsserver_test

import (
	"fmt"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

var baseTime = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// event returns the i-th test event of run-1.
func event(i int, status string) ledger.Event {
	return ledger.Event{
		Key: fmt.Sprintf("key-%04d", i), Tenant: "acme", RunID: "run-1", Tool: "stripe.payment_intents.create",
		ToolCallID: fmt.Sprintf("call_%d", i), Status: status, ReceiptID: fmt.Sprintf("pi_%d", i),
		Source: ledger.SourceWebhook, VendorEventID: fmt.Sprintf("evt_%d", i), At: baseTime.Add(time.Duration(i) * time.Second),
	}
}
