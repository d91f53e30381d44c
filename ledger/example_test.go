package ledger_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// A runtime claims a key before it charges a card. The intent holds only the
// fields that define the side effect; 10.50 and 10.5 are the same amount, so
// a retry that re-serialises the intent finds the same key.
func ExampleNewClaim() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
		ToolClass:    ledger.ClassWriteIdempotent,
		Intent:       json.RawMessage(`{"to": "cus_123", "amount": 10.50, "currency": "usd"}`),
		ReplayWindow: 24 * time.Hour,
	}, ledger.DefaultPolicy(), now)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Row.Key)
	fmt.Println(c.Row.MetadataLocalID)
	fmt.Println(c.Row.Status, c.Row.Attempt, c.Row.PendingUntil.Format(time.TimeOnly))

	res, _, _ := ledger.DecideClaim(nil, c, ledger.DefaultPolicy())
	fmt.Println(res.Decision)

	_, err = ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run 1", Tool: "stripe.charge", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(`{}`),
	}, ledger.DefaultPolicy(), now)
	fmt.Println(err)
	// Output:
	// 38af6fb5b479712bbaf3bf71cf2e82f36ea153edba4402c9d430892f121f951b
	// rl_38af6fb5b479712bbaf3bf71cf2e82f3
	// pending 1 12:15:00
	// proceed
	// invalid run_id: want 1-128 of [A-Za-z0-9_-]
}

// MintKey hashes the tenant, the run, the tool and the intent fingerprint, so
// the same intent in the same run always gets the same key, and another
// tenant never does.
func ExampleMintKey() {
	fp, err := ledger.Fingerprint([]byte(`{"amount":10.5,"currency":"usd","to":"cus_123"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(fp)
	fmt.Println(ledger.MintKey("acme", "run-1", "stripe.charge", fp))
	fmt.Println(ledger.MintKey("globex", "run-1", "stripe.charge", fp))
	// Output:
	// 5efe56cf4eeaac453b40acc05d9575bfe3c948f223961b580122e582d3a13f65
	// 38af6fb5b479712bbaf3bf71cf2e82f36ea153edba4402c9d430892f121f951b
	// 0bb8502f3f889a9e91888f5119fb273edaf8aa7ab8762c23ec192b2beacf4743
}

// Canonicalize is the RFC 8785 form that the fingerprint hashes.
func ExampleCanonicalize() {
	out, err := ledger.Canonicalize([]byte(`{"b": [1.0, 1e21, 1e-7], "a": "\u00e9\u000A"}`))
	fmt.Println(string(out), err)
	// Output:
	// {"a":"é\n","b":[1,1e+21,1e-7]} <nil>
}
