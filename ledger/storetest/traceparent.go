package storetest

import (
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// testTraceparent: the claim's trace context is kept on the row it
// inserted, through a retry of the intent (which keeps the first claim's)
// and a transition, and every outbox record of the row carries it. Stores
// keep it in their row document, so it needs no schema of its own.
func testTraceparent(t *testing.T, open Open) {
	const first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const retry = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	e := newEnv(t, open)
	row := e.claim(baseRequest(func(r *ledger.ClaimRequest) { r.Traceparent = first }), t0).Row
	if row.Traceparent != first {
		t.Fatalf("claimed row traceparent %q, want %q", row.Traceparent, first)
	}
	e.report(tenantA, row.Key, timeout(time.Second))
	// The lease ended with the report: a retry of the intent proceeds
	// under the same key, and the row still names the first claim.
	res := e.claim(baseRequest(func(r *ledger.ClaimRequest) { r.Traceparent = retry }), at(2*time.Minute))
	if res.Decision != ledger.DecisionRetrySameKey || res.Row.Traceparent != first {
		t.Fatalf("retry: %s, traceparent %q, want retry_same_key and %q", res.Decision, res.Row.Traceparent, first)
	}
	if got := e.get(tenantA, row.Key).Traceparent; got != first {
		t.Fatalf("stored traceparent %q, want %q", got, first)
	}
	recs := e.pending()
	if len(recs) == 0 {
		t.Fatal("no outbox record for the timeout")
	}
	for _, r := range recs {
		if r.Event.Traceparent != first {
			t.Errorf("outbox record %s: traceparent %q, want %q", r.Event.MsgID(), r.Event.Traceparent, first)
		}
	}
	e.consistent()
}
