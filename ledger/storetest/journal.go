package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// journalOf reads a row's journal; every store of the repo keeps one.
func (e *env) journalOf(tenant, key string) []ledger.JournalEntry {
	e.t.Helper()
	j, ok := e.s.(ledger.Journals)
	if !ok {
		e.t.Fatalf("%T does not implement ledger.Journals", e.s)
	}
	got, err := j.RowJournal(e.ctx, tenant, key)
	if err != nil {
		e.t.Fatalf("RowJournal: %v", err)
	}
	return got
}

// outcomes lists the journal's entries as kind/outcome.
func outcomes(js []ledger.JournalEntry) string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = string(j.Kind) + "/" + j.Outcome
	}
	return strings.Join(out, " ")
}

func finding(outcome, detail string, d time.Duration) ledger.JournalEntry {
	return ledger.JournalEntry{Kind: ledger.JournalResolver, Outcome: outcome, Detail: detail, At: at(d)}
}

// testJournal checks the row journal: a delivery that changes nothing is
// noted (a duplicate, a late one for a closed row) and one that changes the
// row is not; a resolver's findings and a page's reason are written in the
// transaction of their action and with it only; another tenant's delivery
// is never noted on a row; a row keeps its newest MaxJournalPerRow entries;
// retention deletes them with the row.
func testJournal(t *testing.T, open Open) {
	cases := []struct {
		name string
		run  func(e *env, row ledger.Row) (tenant, key, want string)
	}{
		{"changing delivery is not noted, its duplicate is", func(e *env, row ledger.Row) (string, string, string) {
			d := byLocalID(row, "evt_1", receipt(evSucceeded, "pi_1"))
			d.Verified = "stripe endpoint main: Stripe-Signature"
			for range 2 {
				if _, err := e.s.Ingest(e.ctx, d); err != nil {
					e.t.Fatalf("Ingest: %v", err)
				}
			}
			j := e.journalOf(row.Tenant, row.Key)
			if len(j) == 1 && (j[0].VendorEventID != "evt_1" || j[0].Verified != d.Verified || !j[0].At.Equal(d.At)) {
				e.t.Fatalf("duplicate entry %+v: want vendor event evt_1, verified %q, at %s", j[0], d.Verified, d.At)
			}
			return row.Tenant, row.Key, "webhook/duplicate"
		}},
		{"late delivery for a closed row", func(e *env, row ledger.Row) (string, string, string) {
			e.report(row.Tenant, row.Key, response(200, "pi_1", 2*time.Second))
			if _, err := e.s.Ingest(e.ctx, byLocalID(row, "evt_2", receipt(evSucceeded, "pi_1"))); err != nil {
				e.t.Fatalf("Ingest: %v", err)
			}
			j := e.journalOf(row.Tenant, row.Key)
			if len(j) == 1 && !strings.Contains(j[0].Detail, "closed") {
				e.t.Fatalf("late delivery detail %q: want it to say the row was closed", j[0].Detail)
			}
			return row.Tenant, row.Key, "webhook/no_change"
		}},
		{"another tenant's duplicate is not noted", func(e *env, row ledger.Row) (string, string, string) {
			d := byLocalID(row, "evt_3", evProgress)
			if _, err := e.s.Ingest(e.ctx, d); err != nil {
				e.t.Fatalf("Ingest: %v", err)
			}
			d.Tenant = tenantB // the same event id at tenant B's endpoint: a duplicate there
			if _, err := e.s.Ingest(e.ctx, d); err != nil {
				e.t.Fatalf("Ingest: %v", err)
			}
			if got := e.journalOf(tenantB, row.Key); len(got) != 0 {
				e.t.Fatalf("tenant B's journal of the key: %s, want none", outcomes(got))
			}
			return row.Tenant, row.Key, "webhook/no_change"
		}},
		{"findings with the apply that settles", func(e *env, row ledger.Row) (string, string, string) {
			ctx := ledger.WithJournal(e.ctx, finding(ledger.NoteNotFound, "search by local id: none", time.Minute),
				finding(ledger.NoteFound, "pi_1 succeeded", time.Minute))
			ev := ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", At: at(time.Minute)}
			if _, _, err := e.s.Apply(ctx, row.Tenant, row.Key, ev); err != nil {
				e.t.Fatalf("Apply: %v", err)
			}
			return row.Tenant, row.Key, "resolver/not_found resolver/found"
		}},
		{"a failed apply writes no finding", func(e *env, row ledger.Row) (string, string, string) {
			bad := finding(ledger.NoteFound, "", time.Minute)
			bad.Kind = "gossip"
			ctx := ledger.WithJournal(e.ctx, finding(ledger.NoteFound, "pi_1", time.Minute), bad)
			ev := ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", At: at(time.Minute)}
			if _, _, err := e.s.Apply(ctx, row.Tenant, row.Key, ev); err == nil {
				e.t.Fatal("Apply with an invalid journal entry: no error")
			}
			if got := e.get(row.Tenant, row.Key); got.Status != ledger.StatusPending {
				e.t.Fatalf("row after the failed apply: %s, want pending (rolled back)", got.Status)
			}
			return row.Tenant, row.Key, ""
		}},
		{"findings with a reschedule, the page's reason with escalate once", func(e *env, row ledger.Row) (string, string, string) {
			ctx := ledger.WithJournal(e.ctx, finding(ledger.NoteLookupFailed, "HTTP 503", time.Minute))
			if err := e.s.Reschedule(ctx, row.Tenant, row.Key, at(time.Hour)); err != nil {
				e.t.Fatalf("Reschedule: %v", err)
			}
			page := ledger.JournalEntry{Kind: ledger.JournalPage, Outcome: ledger.NotePaged, Detail: "still pending after the replay window", At: at(2 * time.Hour)}
			ctx = ledger.WithJournal(e.ctx, finding(ledger.NoteWindowExpired, "", 2*time.Hour), page)
			for range 2 {
				if _, _, err := e.s.Escalate(ctx, row.Tenant, row.Key, at(2*time.Hour)); err != nil {
					e.t.Fatalf("Escalate: %v", err)
				}
			}
			return row.Tenant, row.Key, "resolver/lookup_failed resolver/window_expired page/paged"
		}},
		{"a row keeps its newest entries", func(e *env, row ledger.Row) (string, string, string) {
			for i := range ledger.MaxJournalPerRow + 5 {
				ctx := ledger.WithJournal(e.ctx, finding(ledger.NoteNotFound, fmt.Sprint(i), time.Duration(i)*time.Second))
				if err := e.s.Reschedule(ctx, row.Tenant, row.Key, at(time.Hour)); err != nil {
					e.t.Fatalf("Reschedule: %v", err)
				}
			}
			j := e.journalOf(row.Tenant, row.Key)
			if len(j) != ledger.MaxJournalPerRow || j[0].Detail != "5" || j[len(j)-1].Detail != fmt.Sprint(ledger.MaxJournalPerRow+4) {
				e.t.Fatalf("journal of %d entries from %q to %q; want %d from \"5\"", len(j), j[0].Detail, j[len(j)-1].Detail, ledger.MaxJournalPerRow)
			}
			for i := 1; i < len(j); i++ {
				if j[i].Seq <= j[i-1].Seq {
					e.t.Fatalf("entry %d seq %d after %d: want increasing", i, j[i].Seq, j[i-1].Seq)
				}
			}
			return row.Tenant, row.Key, strings.TrimSpace(strings.Repeat("resolver/not_found ", ledger.MaxJournalPerRow))
		}},
		{"retention deletes the journal with the row", func(e *env, row ledger.Row) (string, string, string) {
			ctx := ledger.WithJournal(e.ctx, finding(ledger.NoteFound, "pi_1", time.Minute))
			ev := ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", At: at(time.Minute)}
			if _, _, err := e.s.Apply(ctx, row.Tenant, row.Key, ev); err != nil {
				e.t.Fatalf("Apply: %v", err)
			}
			if got := outcomes(e.journalOf(row.Tenant, row.Key)); got != "resolver/found" {
				e.t.Fatalf("journal before retention: %q, want resolver/found", got)
			}
			e.ackAll()
			cutoff := at(48 * time.Hour)
			if n := e.deleteExpired(cutoff, e.expired(cutoff, 10)); n != 1 {
				e.t.Fatalf("DeleteExpired: %d rows, want 1", n)
			}
			e.consistent()
			return row.Tenant, row.Key, ""
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			row := e.claim(baseRequest(), at(0)).Row
			tenant, key, want := tc.run(e, row)
			if got := outcomes(e.journalOf(tenant, key)); got != want {
				t.Fatalf("journal: %q, want %q", got, want)
			}
			e.consistent()
		})
	}
}

// testFindRows checks ledger.Finder: by local id, receipt id and tool call
// id, newest first, within the tenant, and every match however many rows
// the tenant holds.
func testFindRows(t *testing.T, open Open) {
	e := newEnv(t, open)
	f, ok := e.s.(ledger.Finder)
	if !ok {
		t.Fatalf("%T does not implement ledger.Finder", e.s)
	}
	var rows []ledger.Row
	for i := range 3000 {
		mods := []reqMod{withKey(fmt.Sprintf("find-%04d", i)), withIntent(fmt.Sprintf(`{"n":%d}`, i)),
			func(r *ledger.ClaimRequest) { r.ToolCallID = fmt.Sprintf("call_%d", i%1000) }}
		if i%2 == 1 {
			mods = append(mods, withTenant(tenantB))
		}
		rows = append(rows, e.claim(baseRequest(mods...), at(time.Duration(i)*time.Second)).Row)
	}
	// The oldest row of tenant A takes a receipt: a scan of the newest
	// 2,000 would miss it.
	e.report(tenantA, rows[0].Key, response(200, "pi_oldest", time.Hour))
	cases := []struct {
		name string
		q    ledger.FindQuery
		want []string
	}{
		{"local id", ledger.FindQuery{Tenant: tenantA, LocalID: rows[2].MetadataLocalID}, []string{rows[2].Key}},
		{"local id of another tenant", ledger.FindQuery{Tenant: tenantA, LocalID: rows[3].MetadataLocalID}, nil},
		{"receipt id of the oldest row", ledger.FindQuery{Tenant: tenantA, ReceiptID: "pi_oldest"}, []string{rows[0].Key}},
		{"receipt id in another tenant", ledger.FindQuery{Tenant: tenantB, ReceiptID: "pi_oldest"}, nil},
		{"tool call id, newest first", ledger.FindQuery{Tenant: tenantA, ToolCallID: "call_4"}, []string{rows[2004].Key, rows[1004].Key, rows[4].Key}},
		{"tool call id, limited", ledger.FindQuery{Tenant: tenantB, ToolCallID: "call_5", Limit: 2}, []string{rows[2005].Key, rows[1005].Key}},
		{"no match", ledger.FindQuery{Tenant: tenantA, ToolCallID: "call_"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.FindRows(e.ctx, tc.q)
			if err != nil {
				t.Fatalf("FindRows: %v", err)
			}
			if got.Cut || strings.Join(keys(got.Rows), " ") != strings.Join(tc.want, " ") {
				t.Fatalf("FindRows: %v cut=%v, want %v", keys(got.Rows), got.Cut, tc.want)
			}
		})
	}
	if _, err := f.FindRows(e.ctx, ledger.FindQuery{Tenant: tenantA, ReceiptID: "a", ToolCallID: "b"}); err == nil {
		t.Fatal("FindRows with two fields: no error")
	}
}

// testRevocations checks ledger.Revocations: a revoked id is revoked, others
// are not, and records past their session's expiry are forgotten.
func testRevocations(t *testing.T, open Open) {
	e := newEnv(t, open)
	r, ok := e.s.(ledger.Revocations)
	if !ok {
		t.Fatalf("%T does not implement ledger.Revocations", e.s)
	}
	const a, b = "session-aaaaaaaaaaaaaaaa", "session-bbbbbbbbbbbbbbbb"
	revoked := func(id string) bool {
		t.Helper()
		ok, err := r.SessionRevoked(e.ctx, id)
		if err != nil {
			t.Fatalf("SessionRevoked: %v", err)
		}
		return ok
	}
	if err := r.RevokeSession(e.ctx, a, at(time.Hour), at(0)); err != nil {
		t.Fatalf("RevokeSession: %v", err)
	}
	if !revoked(a) || revoked(b) {
		t.Fatalf("after revoking a: a %v, b %v; want true, false", revoked(a), revoked(b))
	}
	if err := r.RevokeSession(e.ctx, b, at(3*time.Hour), at(2*time.Hour)); err != nil {
		t.Fatalf("RevokeSession: %v", err)
	}
	if revoked(a) || !revoked(b) {
		t.Fatalf("after a's session expired: a %v, b %v; want false (forgotten), true", revoked(a), revoked(b))
	}
	if err := r.RevokeSession(e.ctx, "short", at(time.Hour), at(0)); err == nil {
		t.Fatal("RevokeSession of a malformed id: no error")
	}
}
