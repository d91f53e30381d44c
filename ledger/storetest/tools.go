package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// toolOf is a complete write entry of tenant, registered at t0+d.
func toolOf(tenant, name string, d time.Duration) ledger.Tool {
	return ledger.Tool{
		Tenant: tenant, Name: name, Vendor: vendor, Class: ledger.ClassWriteIdempotent,
		SideEffect: "charge", KeyPlacement: ledger.KeyPlacement{Header: "Idempotency-Key"},
		IntentFields: []string{"amount", "currency", "customer"},
		Checklist: ledger.Checklist{
			SideEffectDocumented: true, KeyBornInRuntime: true, LedgerOrUniqueField: true,
			TimeoutLeavesUnknown: true, ErrorClassesMapped: true, DuplicateDeliveryTest: true,
			CheckedBy: "alice@example.com",
		},
		Autonomy:  ledger.AutonomyAutonomous,
		Policy:    `intent.amount <= 50000 && intent.currency == "usd"`,
		UpdatedAt: at(d),
	}
}

// toolString shows an entry with its times in UTC, so entries compare by
// every field and by instant.
func toolString(t ledger.Tool) string {
	t.CreatedAt, t.UpdatedAt, t.Checklist.CheckedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC(), t.Checklist.CheckedAt.UTC()
	return fmt.Sprintf("%+v", t)
}

func sameTools(t *testing.T, what string, got, want []ledger.Tool) {
	t.Helper()
	g := make([]string, len(got))
	for i, x := range got {
		g[i] = toolString(x)
	}
	w := make([]string, len(want))
	for i, x := range want {
		w[i] = toolString(x)
	}
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("%s:\n got %q\nwant %q", what, g, w)
	}
}

func (e *env) putTool(tl ledger.Tool) (ledger.Tool, bool) {
	e.t.Helper()
	got, changed, err := e.s.PutTool(e.ctx, tl)
	if err != nil {
		e.t.Fatalf("PutTool(%s/%s): %v", tl.Tenant, tl.Name, err)
	}
	return got, changed
}

func (e *env) listTools(tenant string) []ledger.Tool {
	e.t.Helper()
	got, err := e.s.ListTools(e.ctx, tenant)
	if err != nil {
		e.t.Fatalf("ListTools(%q): %v", tenant, err)
	}
	return got
}

// testTools checks the registry's storage: versions and times from
// NextTool, an unchanged put that writes nothing, the list's order, tenant
// isolation, validation naming the field, deletes, and that the registry
// touches no row and writes no outbox record.
func testTools(t *testing.T, open Open) {
	cases := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"a new store has no tools", func(t *testing.T, e *env) {
			if got := e.listTools(""); len(got) != 0 {
				t.Fatalf("ListTools: got %d entries, want none", len(got))
			}
			if _, err := e.s.GetTool(e.ctx, tenantA, "x"); !errors.Is(err, ledger.ErrToolNotFound) || !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("GetTool of nothing: got %v, want ErrToolNotFound", err)
			}
		}},
		{"put registers version 1 and get returns it", func(t *testing.T, e *env) {
			in := toolOf(tenantA, "stripe.payment_intents.create", time.Second)
			got, changed := e.putTool(in)
			if !changed || got.Version != 1 || !got.CreatedAt.Equal(at(time.Second)) || !got.UpdatedAt.Equal(at(time.Second)) || !got.Checklist.CheckedAt.Equal(at(time.Second)) {
				t.Fatalf("first put: changed=%v %+v, want version 1 created, updated and checked at t0+1s", changed, got)
			}
			back, err := e.s.GetTool(e.ctx, tenantA, in.Name)
			if err != nil {
				t.Fatalf("GetTool: %v", err)
			}
			sameTools(t, "GetTool", []ledger.Tool{back}, []ledger.Tool{got})
		}},
		{"an unchanged put keeps version and times", func(t *testing.T, e *env) {
			first, _ := e.putTool(toolOf(tenantA, "email.send", time.Second))
			again, changed := e.putTool(toolOf(tenantA, "email.send", time.Hour))
			if changed {
				t.Fatal("an identical put reported a change")
			}
			sameTools(t, "after an identical put", []ledger.Tool{again}, []ledger.Tool{first})
			sameTools(t, "stored", e.listTools(tenantA), []ledger.Tool{first})
		}},
		{"a change bumps the version and keeps created_at", func(t *testing.T, e *env) {
			first, _ := e.putTool(toolOf(tenantA, "email.send", time.Second))
			next := toolOf(tenantA, "email.send", time.Minute)
			next.Policy = `intent.amount < 100`
			got, changed := e.putTool(next)
			if !changed || got.Version != 2 || !got.CreatedAt.Equal(first.CreatedAt) || !got.UpdatedAt.Equal(at(time.Minute)) {
				t.Fatalf("second put: changed=%v %+v, want version 2, created %v, updated t0+1m", changed, got, first.CreatedAt)
			}
			if !got.Checklist.CheckedAt.Equal(first.Checklist.CheckedAt) {
				t.Fatalf("checked_at moved without a change of the boxes: %v, want %v", got.Checklist.CheckedAt, first.Checklist.CheckedAt)
			}
			box := next
			box.Checklist.DuplicateDeliveryTest = false
			box.UpdatedAt = at(time.Hour)
			got, _ = e.putTool(box)
			if got.Version != 3 || !got.Checklist.CheckedAt.Equal(at(time.Hour)) {
				t.Fatalf("a box changed: version %d checked_at %v, want 3 and t0+1h", got.Version, got.Checklist.CheckedAt)
			}
			given := box
			given.Checklist.CheckedAt = at(30 * time.Second)
			given.UpdatedAt = at(2 * time.Hour)
			if got, _ = e.putTool(given); !got.Checklist.CheckedAt.Equal(at(30 * time.Second)) {
				t.Fatalf("a given checked_at: got %v", got.Checklist.CheckedAt)
			}
		}},
		{"list is ordered by tenant then name", func(t *testing.T, e *env) {
			var puts []ledger.Tool
			for _, id := range [][2]string{{tenantB, "z"}, {tenantA, "b.x"}, {"acme-eu", "a"}, {tenantA, "b_x"}, {tenantA, "B"}} {
				got, _ := e.putTool(toolOf(id[0], id[1], time.Second))
				puts = append(puts, got)
			}
			sameTools(t, "ListTools all", e.listTools(""), []ledger.Tool{puts[4], puts[1], puts[3], puts[2], puts[0]})
			sameTools(t, "ListTools acme", e.listTools(tenantA), []ledger.Tool{puts[4], puts[1], puts[3]})
			sameTools(t, "ListTools of a tenant with none", e.listTools("initech"), nil)
		}},
		{"delete removes one entry of one tenant", func(t *testing.T, e *env) {
			e.putTool(toolOf(tenantA, "email.send", time.Second))
			b, _ := e.putTool(toolOf(tenantB, "email.send", time.Second))
			if err := e.s.DeleteTool(e.ctx, tenantA, "email.send"); err != nil {
				t.Fatalf("DeleteTool: %v", err)
			}
			if err := e.s.DeleteTool(e.ctx, tenantA, "email.send"); !errors.Is(err, ledger.ErrToolNotFound) {
				t.Fatalf("DeleteTool again: got %v, want ErrToolNotFound", err)
			}
			sameTools(t, "after delete", e.listTools(""), []ledger.Tool{b})
			again, _ := e.putTool(toolOf(tenantA, "email.send", time.Minute))
			if again.Version != 1 || !again.CreatedAt.Equal(at(time.Minute)) {
				t.Fatalf("registered again: %+v, want a new entry (version 1)", again)
			}
		}},
		{"invalid entries are refused, name their field and change nothing", func(t *testing.T, e *env) {
			good, _ := e.putTool(toolOf(tenantA, "stripe.charges.create", time.Second))
			bad := []struct {
				field string
				mod   func(*ledger.Tool)
			}{
				{"tenant", func(x *ledger.Tool) { x.Tenant = "ac me" }},
				{"tool name", func(x *ledger.Tool) { x.Name = "a/b" }},
				{"vendor", func(x *ledger.Tool) { x.Vendor = "Stripe" }},
				{"class", func(x *ledger.Tool) { x.Class = "write" }},
				{"side_effect", func(x *ledger.Tool) { x.SideEffect = " " }},
				{"side_effect", func(x *ledger.Tool) { x.SideEffect = "a\nb" }},
				{"key_placement", func(x *ledger.Tool) { x.KeyPlacement = ledger.KeyPlacement{} }},
				{"key_placement", func(x *ledger.Tool) { x.KeyPlacement.BodyField = "idempotency_key" }},
				{"key_placement", func(x *ledger.Tool) { x.KeyPlacement = ledger.KeyPlacement{None: true} }},
				{"key_placement.header", func(x *ledger.Tool) { x.KeyPlacement.Header = "Idempotency Key" }},
				{"key_placement.body_field", func(x *ledger.Tool) { x.KeyPlacement = ledger.KeyPlacement{BodyField: "a b"} }},
				{"intent_fields", func(x *ledger.Tool) { x.IntentFields = []string{"amount", "amount"} }},
				{"intent_fields", func(x *ledger.Tool) { x.IntentFields = []string{""} }},
				{"checklist.checked_by", func(x *ledger.Tool) { x.Checklist.CheckedBy = "" }},
				{"autonomy", func(x *ledger.Tool) { x.Autonomy = "sometimes" }},
				{"name", func(x *ledger.Tool) { x.Name, x.Autonomy = "stripe..create", ledger.AutonomyOutbox }},
				{"policy", func(x *ledger.Tool) { x.Policy = strings.Repeat("1", ledger.MaxPolicyLen+1) }},
				{"policy", func(x *ledger.Tool) { x.Policy = "true\x00" }},
				{"updated_at", func(x *ledger.Tool) { x.UpdatedAt = time.Time{} }},
			}
			for _, b := range bad {
				in := toolOf(tenantA, "stripe.charges.create", time.Minute)
				in.SideEffect = "changed"
				b.mod(&in)
				_, _, err := e.s.PutTool(e.ctx, in)
				var ie *ledger.InvalidError
				if !errors.Is(err, ledger.ErrInvalid) || !errors.As(err, &ie) || ie.Field != b.field {
					t.Errorf("PutTool with a bad %s: got %v, want an InvalidError of field %s", b.field, err, b.field)
				}
			}
			read := ledger.Tool{Tenant: tenantA, Name: "stripe.customers.retrieve", Vendor: vendor, Class: ledger.ClassRead, UpdatedAt: at(0)}
			if _, _, err := e.s.PutTool(e.ctx, read); err != nil {
				t.Errorf("a read tool without side effect or key: %v", err)
			}
			read.Policy = "true"
			if _, _, err := e.s.PutTool(e.ctx, read); !errors.Is(err, ledger.ErrInvalid) {
				t.Errorf("a read tool with a policy: got %v, want ErrInvalid", err)
			}
			for _, id := range [][2]string{{"ac me", "x"}, {tenantA, ""}, {tenantA, "a/b"}} {
				if _, err := e.s.GetTool(e.ctx, id[0], id[1]); !errors.Is(err, ledger.ErrInvalid) {
					t.Errorf("GetTool(%q, %q): got %v, want ErrInvalid", id[0], id[1], err)
				}
				if err := e.s.DeleteTool(e.ctx, id[0], id[1]); !errors.Is(err, ledger.ErrInvalid) {
					t.Errorf("DeleteTool(%q, %q): got %v, want ErrInvalid", id[0], id[1], err)
				}
			}
			if _, err := e.s.ListTools(e.ctx, "ac me"); !errors.Is(err, ledger.ErrInvalid) {
				t.Errorf("ListTools of a bad tenant: got %v, want ErrInvalid", err)
			}
			got, err := e.s.GetTool(e.ctx, tenantA, good.Name)
			if err != nil {
				t.Fatal(err)
			}
			sameTools(t, "entry after refused writes", []ledger.Tool{got}, []ledger.Tool{good})
		}},
		{"the registry touches no row and writes no outbox record", func(t *testing.T, e *env) {
			row := e.claim(baseRequest(), at(0)).Row
			before := len(e.pending())
			e.putTool(toolOf(tenantA, row.Tool, time.Second))
			if err := e.s.DeleteTool(e.ctx, tenantA, row.Tool); err != nil {
				t.Fatal(err)
			}
			if got := len(e.pending()); got != before {
				t.Fatalf("outbox: %d records after registry writes, want %d", got, before)
			}
			sameRow(t, "row after registry writes", e.get(tenantA, row.Key), row)
			e.consistent()
		}},
		{"concurrent puts of one new name all land, one version at a time", func(t *testing.T, e *env) {
			const n = 8
			var wg sync.WaitGroup
			results := make(chan ledger.Tool, n)
			errs := make(chan error, n)
			for i := range n {
				in := toolOf(tenantA, "email.send", time.Duration(i)*time.Second)
				in.SideEffect = fmt.Sprintf("email %d", i)
				wg.Go(func() {
					got, _, err := e.s.PutTool(e.ctx, in)
					errs <- err
					results <- got
				})
			}
			wg.Wait()
			close(errs)
			close(results)
			for err := range errs {
				if err != nil {
					t.Fatalf("PutTool: %v", err)
				}
			}
			versions := map[int64]bool{}
			for r := range results {
				if versions[r.Version] {
					t.Fatalf("two puts answered version %d", r.Version)
				}
				versions[r.Version] = true
			}
			got := e.listTools(tenantA)
			if len(got) != 1 || got[0].Version != n {
				t.Fatalf("after %d different puts: %+v, want one entry at version %d", n, got, n)
			}
		}},
		{"a closed store is unavailable", func(t *testing.T, e *env) {
			if err := e.s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if _, _, err := e.s.PutTool(e.ctx, toolOf(tenantA, "x", 0)); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("PutTool after Close: got %v, want ErrUnavailable", err)
			}
			if _, err := e.s.GetTool(e.ctx, tenantA, "x"); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("GetTool after Close: got %v, want ErrUnavailable", err)
			}
			if err := e.s.DeleteTool(e.ctx, tenantA, "x"); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("DeleteTool after Close: got %v, want ErrUnavailable", err)
			}
			if _, err := e.s.ListTools(e.ctx, ""); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("ListTools after Close: got %v, want ErrUnavailable", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newEnv(t, open)) })
	}
}
