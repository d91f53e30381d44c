package matcher_test

import (
	"fmt"
	"time"

	"github.com/agentledger/reconciler/matcher"
)

// A Stripe success becomes webhook evidence for the row whose local id the
// event carries; a type the table does not name is only recorded.
func ExampleMatch() {
	table, err := matcher.NewTable(map[string]map[string]matcher.Action{
		"stripe": {"charge.dispute.created": matcher.Ignore, "payout.paid": matcher.Progress},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ev := matcher.Event{
		Vendor: "stripe", ID: "evt_1", Type: "payment_intent.succeeded", ObjectID: "pi_1",
		LocalID: "rl_38af6fb5b479712bbaf3bf71cf2e82f3", Received: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
	d := matcher.Match("acme", ev, table)
	fmt.Println(d.LocalID, d.Evidence.Source, d.Evidence.Status, d.Evidence.ReceiptID)

	ev.ID, ev.Type = "evt_2", "charge.dispute.created"
	fmt.Println(matcher.Match("acme", ev, table).Ignore)
	// Output:
	// rl_38af6fb5b479712bbaf3bf71cf2e82f3 webhook succeeded pi_1
	// true
}
