package storetest

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// listFixture claims rows for two tenants: tenantA gets n rows first seen a
// minute apart (runs alternate run-a/run-b; every third succeeds, every
// fourth of the rest goes unknown) plus two rows first seen at the same
// instant, to pin the tie order. It returns tenantA's rows in the order List
// must return them.
func listFixture(e *env, n int) []ledger.Row {
	e.t.Helper()
	var want []ledger.Row
	for i := range n {
		run := "run-a"
		if i%2 == 1 {
			run = "run-b"
		}
		req := baseRequest(withRunID(run), withIntent(`{"n":`+strconv.Itoa(i)+`}`))
		row := e.claim(req, at(time.Duration(i)*time.Minute)).Row
		switch {
		case i%3 == 0:
			e.report(tenantA, row.Key, response(200, "pi_"+strconv.Itoa(i), time.Duration(i)*time.Minute+time.Second))
		case i%4 == 1:
			e.report(tenantA, row.Key, timeout(time.Duration(i)*time.Minute+time.Second))
		}
		want = append(want, e.get(tenantA, row.Key))
		// Another tenant's rows interleave and must never show.
		e.claim(baseRequest(withTenant(tenantB), withRunID(run), withIntent(`{"n":`+strconv.Itoa(i)+`}`)), at(time.Duration(i)*time.Minute))
	}
	tie := at(time.Duration(n) * time.Minute)
	for _, k := range []string{"tie-a", "tie-b"} {
		want = append(want, e.claim(baseRequest(withKey(k), withRunID("run-a")), tie).Row)
	}
	// Newest first: first_seen descending, then key descending.
	slices.Reverse(want)
	return want
}

// listAll pages through a query, checking every page's shape.
func listAll(t *testing.T, e *env, q ledger.ListQuery) []ledger.Row {
	t.Helper()
	var out []ledger.Row
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("List: more than 100 pages; the cursor does not advance")
		}
		page, err := e.s.List(e.ctx, q)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		limit := q.Limit
		if limit == 0 {
			limit = ledger.DefaultListLimit
		}
		if len(page.Rows) > limit {
			t.Fatalf("List: page of %d rows, limit %d", len(page.Rows), limit)
		}
		out = append(out, page.Rows...)
		if page.NextCursor == "" {
			return out
		}
		if len(page.Rows) == 0 {
			t.Fatal("List: empty page with a next cursor")
		}
		q.Cursor = page.NextCursor
	}
}

func keys(rs []ledger.Row) []string {
	ks := make([]string, len(rs))
	for i, r := range rs {
		ks[i] = r.Key
	}
	return ks
}

func testList(t *testing.T, open Open) {
	const n = 9
	filter := func(rs []ledger.Row, keep func(ledger.Row) bool) []ledger.Row {
		var out []ledger.Row
		for _, r := range rs {
			if keep(r) {
				out = append(out, r)
			}
		}
		return out
	}
	cases := []struct {
		name string
		q    ledger.ListQuery
		want func(all []ledger.Row) []ledger.Row
	}{
		{name: "default limit, one page", q: ledger.ListQuery{Tenant: tenantA},
			want: func(all []ledger.Row) []ledger.Row { return all }},
		{name: "pages of 3", q: ledger.ListQuery{Tenant: tenantA, Limit: 3},
			want: func(all []ledger.Row) []ledger.Row { return all }},
		{name: "pages of 1", q: ledger.ListQuery{Tenant: tenantA, Limit: 1},
			want: func(all []ledger.Row) []ledger.Row { return all }},
		{name: "page as large as the result", q: ledger.ListQuery{Tenant: tenantA, Limit: n + 2},
			want: func(all []ledger.Row) []ledger.Row { return all }},
		{name: "status filter", q: ledger.ListQuery{Tenant: tenantA, Status: ledger.StatusSucceeded, Limit: 2},
			want: func(all []ledger.Row) []ledger.Row {
				return filter(all, func(r ledger.Row) bool { return r.Status == ledger.StatusSucceeded })
			}},
		{name: "status filter with no match", q: ledger.ListQuery{Tenant: tenantA, Status: ledger.StatusFailedPoison},
			want: func(all []ledger.Row) []ledger.Row { return nil }},
		{name: "run_id filter", q: ledger.ListQuery{Tenant: tenantA, RunID: "run-b", Limit: 2},
			want: func(all []ledger.Row) []ledger.Row {
				return filter(all, func(r ledger.Row) bool { return r.RunID == "run-b" })
			}},
		{name: "status and run_id filters", q: ledger.ListQuery{Tenant: tenantA, RunID: "run-a", Status: ledger.StatusPending, Limit: 2},
			want: func(all []ledger.Row) []ledger.Row {
				return filter(all, func(r ledger.Row) bool { return r.RunID == "run-a" && r.Status == ledger.StatusPending })
			}},
		{name: "a tenant without rows sees none", q: ledger.ListQuery{Tenant: "initech"},
			want: func(all []ledger.Row) []ledger.Row { return nil }},
	}
	t.Run("queries", func(t *testing.T) {
		e := newEnv(t, open)
		all := listFixture(e, n)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got := listAll(t, e, tc.q)
				want := tc.want(all)
				if !slices.Equal(keys(got), keys(want)) {
					t.Fatalf("List keys:\n got %v\nwant %v", keys(got), keys(want))
				}
				for i := range got {
					sameRow(t, "listed row", got[i], want[i])
				}
			})
		}
	})
	t.Run("cursor is stable while rows are added", func(t *testing.T) {
		e := newEnv(t, open)
		all := listFixture(e, n)
		q := ledger.ListQuery{Tenant: tenantA, Limit: 4}
		page, err := e.s.List(e.ctx, q)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		// A newer row and a row older than everything arrive between pages:
		// the newer one must not appear on later pages, the older one must.
		e.claim(baseRequest(withKey("newest")), at(time.Hour))
		oldest := e.claim(baseRequest(withKey("oldest")), at(-time.Hour)).Row
		q.Cursor = page.NextCursor
		got := append(page.Rows, listAll(t, e, q)...)
		want := append(slices.Clone(all), oldest)
		if !slices.Equal(keys(got), keys(want)) {
			t.Fatalf("List keys:\n got %v\nwant %v", keys(got), keys(want))
		}
	})
	t.Run("bad queries are refused", func(t *testing.T) {
		e := newEnv(t, open)
		listFixture(e, 2)
		for _, q := range []ledger.ListQuery{
			{Tenant: tenantA, Limit: ledger.MaxListLimit + 1},
			{Tenant: tenantA, Limit: -1},
			{Tenant: tenantA, Cursor: "not a cursor!"},
			{Tenant: tenantA, Cursor: "bm90IGEgY3Vyc29y"},
			{Tenant: tenantA, Status: "settled"},
			{Tenant: tenantA, RunID: "run id with spaces"},
		} {
			if _, err := e.s.List(e.ctx, q); !errors.Is(err, ledger.ErrInvalidListQuery) {
				t.Errorf("List(%+v): got %v, want ErrInvalidListQuery", q, err)
			}
		}
		if _, err := e.s.List(e.ctx, ledger.ListQuery{}); err == nil {
			t.Error("List without a tenant: got no error")
		}
		// A good cursor of tenantA, replayed by tenantB.
		page, err := e.s.List(e.ctx, ledger.ListQuery{Tenant: tenantA, Limit: 1})
		if err != nil || page.NextCursor == "" {
			t.Fatalf("List: %v, next cursor %q", err, page.NextCursor)
		}
		if _, err := e.s.List(e.ctx, ledger.ListQuery{Tenant: tenantB, Cursor: page.NextCursor}); !errors.Is(err, ledger.ErrInvalidListQuery) {
			t.Errorf("another tenant's cursor: got %v, want ErrInvalidListQuery", err)
		}
	})
}

func testDue(t *testing.T, open Open) {
	grace := ledger.DefaultPolicy().Grace
	// Six rows claimed a minute apart, so each is due at claim + grace:
	// 0 stays pending, 1 goes unknown (due again at report + grace),
	// 2 succeeds, 3 fails, 4 is escalated (still open), 5 stays pending.
	setup := func(e *env) map[int]ledger.Row {
		rs := map[int]ledger.Row{}
		for i := range 6 {
			c := at(time.Duration(i) * time.Minute)
			row := e.claim(baseRequest(withIntent(`{"n":`+strconv.Itoa(i)+`}`)), c).Row
			switch i {
			case 1:
				e.report(tenantA, row.Key, timeout(time.Duration(i)*time.Minute+10*time.Second))
			case 2:
				e.report(tenantA, row.Key, response(200, "pi_2", time.Duration(i)*time.Minute+time.Second))
			case 3:
				e.report(tenantA, row.Key, response(400, "", time.Duration(i)*time.Minute+time.Second))
			case 4:
				if _, ok, err := e.s.Escalate(e.ctx, tenantA, row.Key, c.Add(time.Second)); err != nil || !ok {
					e.t.Fatalf("Escalate: %v %v", ok, err)
				}
			}
			rs[i] = e.get(tenantA, row.Key)
		}
		return rs
	}
	cases := []struct {
		name  string
		now   time.Duration
		limit int
		want  []int // row numbers, earliest first
	}{
		{name: "nothing due before the first grace", now: grace - time.Microsecond, limit: 10},
		{name: "due at exactly next_check_at", now: grace, limit: 10, want: []int{0}},
		{name: "unknown is due after its report's grace", now: time.Minute + 10*time.Second + grace, limit: 10, want: []int{0, 1}},
		{name: "settled rows are never due", now: 1000 * time.Hour, limit: 10, want: []int{0, 1, 4, 5}},
		{name: "limit keeps the earliest", now: 1000 * time.Hour, limit: 2, want: []int{0, 1}},
		{name: "limit 1", now: 1000 * time.Hour, limit: 1, want: []int{0}},
		{name: "limit 0 returns nothing", now: 1000 * time.Hour, limit: 0},
	}
	e := newEnv(t, open)
	rs := setup(e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.s.Due(e.ctx, at(tc.now), tc.limit)
			if err != nil {
				t.Fatalf("Due: %v", err)
			}
			var want []string
			for _, i := range tc.want {
				want = append(want, rs[i].Key)
			}
			if !slices.Equal(keys(got), want) {
				t.Fatalf("Due keys:\n got %v\nwant %v", keys(got), want)
			}
			for _, r := range got {
				sameRow(t, "due row vs stored row", r, e.get(r.Tenant, r.Key))
			}
		})
	}
}
