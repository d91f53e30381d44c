package resolver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// journal lists a row's journal as kind/outcome.
func (e *env) journal(row ledger.Row) []ledger.JournalEntry {
	e.t.Helper()
	j, err := e.store.(ledger.Journals).RowJournal(context.Background(), row.Tenant, row.Key)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func kinds(js []ledger.JournalEntry) string {
	var out []string
	for _, j := range js {
		out = append(out, string(j.Kind)+"/"+j.Outcome)
	}
	return strings.Join(out, " ")
}

// TestPassesWriteTheirFindingsToTheJournal: every pass leaves what it found
// in the row's journal, with the write that ends it — a miss with the
// reschedule, the window judged expired and the page's reason with the
// escalate, a lookup that found the object with the apply that settles it.
func TestPassesWriteTheirFindingsToTheJournal(t *testing.T) {
	for _, useBolt := range []bool{false, true} {
		t.Run(map[bool]string{false: "memstore", true: "bolt"}[useBolt], func(t *testing.T) {
			t.Run("window closed: misses, then the page", func(t *testing.T) {
				e := newEnv(t, useBolt)
				row := e.claim("stripe", "/v1/payment_intents", 30*time.Minute, piBody)
				e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
				e.clock.Advance(time.Hour)
				e.pass()
				j := e.journal(row)
				if got, want := kinds(j), "resolver/not_found resolver/window_expired page/paged"; got != want {
					t.Fatalf("journal after the paging pass: %q, want %q", got, want)
				}
				if !strings.Contains(j[0].Detail, row.MetadataLocalID) || !strings.Contains(j[2].Detail, "replay window") {
					t.Fatalf("details %q / %q: want the local id searched and why it paged", j[0].Detail, j[2].Detail)
				}
				e.clock.Advance(2 * time.Hour)
				e.pass() // paged already: the miss is noted, no second page
				if got, want := kinds(e.journal(row)), "resolver/not_found resolver/window_expired page/paged resolver/not_found resolver/window_expired"; got != want {
					t.Fatalf("journal after a second pass: %q, want %q", got, want)
				}
			})
			t.Run("committed then timed out: found, settled", func(t *testing.T) {
				e := newEnv(t, useBolt)
				row := e.claim("stripe", "/v1/payment_intents", 24*time.Hour, piBody)
				if err := e.runtimeCall(row); err != nil {
					t.Fatal(err)
				}
				e.report(row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
				e.clock.Advance(time.Hour)
				e.pass()
				if got := e.get(row); got.Status != ledger.StatusSucceeded {
					t.Fatalf("row %s, want succeeded", got.Status)
				}
				j := e.journal(row)
				if got, want := kinds(j), "resolver/found"; got != want {
					t.Fatalf("journal: %q, want %q", got, want)
				}
				if !strings.Contains(j[0].Detail, "succeeded") {
					t.Fatalf("finding %q: want the object's state", j[0].Detail)
				}
			})
		})
	}
}
