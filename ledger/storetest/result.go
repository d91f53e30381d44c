package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// withResult is a response outcome carrying a runtime's result.
func withResult(o ledger.Outcome, result string) ledger.Outcome {
	o.Result = result
	return o
}

// testResults checks that a runtime's result is stored byte for byte with
// the status it settled, returned by Get and by a replaying claim, kept
// once, and refused when too large.
func testResults(t *testing.T, open Open) {
	sec := time.Second
	// Whitespace, key order, escapes and non-ASCII text must survive every
	// store's encoding (PostgreSQL's jsonb normalises JSON values, not
	// strings).
	result := `{"content": [{"type":"text","text":"sent \"INV-1042\" to jörg\u0000\n"}], "isError":false}`

	t.Run("kept with the status and replayed by a claim", func(t *testing.T) {
		e := newEnv(t, open)
		req := baseRequest()
		row := e.claim(req, at(0)).Row
		got, _ := e.report(tenantA, row.Key, withResult(response(200, "", sec), result))
		if got.Status != ledger.StatusSucceeded || got.Result != result {
			t.Fatalf("report: status %s, result %q", got.Status, got.Result)
		}
		if g := e.get(tenantA, row.Key); g.Result != result {
			t.Fatalf("Get: result %q, want %q", g.Result, result)
		}
		res := e.claim(req, at(2*sec))
		if res.Decision != ledger.DecisionReplay || res.Row.Result != result {
			t.Fatalf("claim: %s with result %q", res.Decision, res.Row.Result)
		}
		e.report(tenantA, row.Key, withResult(response(200, "", 3*sec), `{"content":[]}`))
		if g := e.get(tenantA, row.Key); g.Result != result {
			t.Fatalf("a second report replaced the result: %q", g.Result)
		}
		e.consistent()
	})

	t.Run("dropped when the row stays open", func(t *testing.T) {
		e := newEnv(t, open)
		row := e.claim(baseRequest(), at(0)).Row
		got, _ := e.report(tenantA, row.Key, withResult(response(502, "", sec), `{"isError":true}`))
		if got.Status != ledger.StatusUnknown || got.Result != "" || e.get(tenantA, row.Key).Result != "" {
			t.Fatalf("status %s, result %q", got.Status, got.Result)
		}
	})

	t.Run("too large is refused and changes nothing", func(t *testing.T) {
		e := newEnv(t, open)
		row := e.claim(baseRequest(), at(0)).Row
		big := `"` + strings.Repeat("r", ledger.MaxResultLen-1) + `"`
		_, _, err := e.s.Report(e.ctx, tenantA, row.Key, withResult(response(200, "", sec), big))
		if !errors.Is(err, ledger.ErrInvalidOutcome) || !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("Report of %d bytes: %v, want ErrInvalidOutcome", len(big), err)
		}
		sameRow(t, "row after a refused report", e.get(tenantA, row.Key), row)
		largest := `"` + strings.Repeat("r", ledger.MaxResultLen-2) + `"`
		got, _ := e.report(tenantA, row.Key, withResult(response(200, "", sec), largest))
		if len(got.Result) != ledger.MaxResultLen || e.get(tenantA, row.Key).Result != got.Result {
			t.Fatalf("a result of %d bytes was not kept", ledger.MaxResultLen)
		}
	})
}
