package drill

import (
	"errors"
	"testing"
)

// A drill whose set-up fails must report FAIL, not a PASS with no checks.
func TestCheckerAbortFails(t *testing.T) {
	var c checker
	r := c.abort(Result{Name: "x", Expected: 1}, errors.New("no client"))
	if r.Pass || r.Detail != "set-up: no client" {
		t.Fatalf("abort = pass %v detail %q, want a failure naming the set-up error", r.Pass, r.Detail)
	}
}
