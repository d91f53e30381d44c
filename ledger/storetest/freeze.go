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

// freezeOf is a valid kill-switch entry made at t0+d.
func freezeOf(tenant, target string, d time.Duration) ledger.Freeze {
	return ledger.Freeze{Tenant: tenant, Target: target, Actor: "ops@example.com", Note: "vendor incident INC-42", At: at(d)}
}

// freezeString shows an entry with its time in UTC, so entries compare by
// every field and by instant.
func freezeString(f ledger.Freeze) string {
	return fmt.Sprintf("%s/%s actor=%q note=%q at=%s", f.Tenant, f.Target, f.Actor, f.Note, f.At.UTC().Format(time.RFC3339Nano))
}

func (e *env) listFreezes() []ledger.Freeze {
	e.t.Helper()
	fs, err := e.s.ListFreezes(e.ctx)
	if err != nil {
		e.t.Fatalf("ListFreezes: %v", err)
	}
	return fs
}

func (e *env) putFreeze(f ledger.Freeze) {
	e.t.Helper()
	if err := e.s.PutFreeze(e.ctx, f); err != nil {
		e.t.Fatalf("PutFreeze(%s/%s): %v", f.Tenant, f.Target, err)
	}
}

func (e *env) deleteFreeze(tenant, target string) {
	e.t.Helper()
	if err := e.s.DeleteFreeze(e.ctx, tenant, target); err != nil {
		e.t.Fatalf("DeleteFreeze(%s/%s): %v", tenant, target, err)
	}
}

// sameFreezes fails unless got is want, in order, field by field.
func sameFreezes(t *testing.T, what string, got, want []ledger.Freeze) {
	t.Helper()
	g := make([]string, len(got))
	for i, f := range got {
		g[i] = freezeString(f)
	}
	w := make([]string, len(want))
	for i, f := range want {
		w[i] = freezeString(f)
	}
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("%s:\n got %q\nwant %q", what, g, w)
	}
}

// testFreezes checks the kill switch's storage: upsert, idempotent delete,
// the list's order, tenant isolation, validation, and that a freeze touches
// no row and writes no outbox record.
func testFreezes(t *testing.T, open Open) {
	cases := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"a new store has no freezes", func(t *testing.T, e *env) {
			if got := e.listFreezes(); len(got) != 0 {
				t.Fatalf("ListFreezes: got %d entries, want none", len(got))
			}
		}},
		{"list is ordered by tenant then target", func(t *testing.T, e *env) {
			// Put out of order; class and tool targets mix; "acme" < "acme-eu"
			// < "globex" by bytes, and "a.b" < "a_b" ('.' < '_').
			puts := []ledger.Freeze{
				freezeOf(tenantB, "stripe.refunds.create", 3*time.Second),
				freezeOf(tenantA, string(ledger.ClassWriteIrreversible), time.Second),
				freezeOf("acme-eu", "a.b", 4*time.Second),
				freezeOf(tenantA, "a_b", 5*time.Second),
				freezeOf(tenantA, "a.b", 6*time.Second),
				freezeOf(tenantA, "Z", 7*time.Second),
			}
			for _, f := range puts {
				e.putFreeze(f)
			}
			want := []ledger.Freeze{puts[5], puts[4], puts[3], puts[1], puts[2], puts[0]}
			sameFreezes(t, "ListFreezes", e.listFreezes(), want)
		}},
		{"put replaces the entry of the same tenant and target", func(t *testing.T, e *env) {
			e.putFreeze(freezeOf(tenantA, "stripe.charges.create", time.Second))
			again := ledger.Freeze{Tenant: tenantA, Target: "stripe.charges.create", Actor: "bob", Note: "still broken", At: at(time.Minute)}
			e.putFreeze(again)
			sameFreezes(t, "ListFreezes after a second put", e.listFreezes(), []ledger.Freeze{again})
		}},
		{"delete is idempotent and per tenant", func(t *testing.T, e *env) {
			a, b := freezeOf(tenantA, "stripe.charges.create", time.Second), freezeOf(tenantB, "stripe.charges.create", time.Second)
			e.putFreeze(a)
			e.putFreeze(b)
			e.deleteFreeze(tenantA, "stripe.charges.create")
			sameFreezes(t, "after deleting acme's", e.listFreezes(), []ledger.Freeze{b})
			e.deleteFreeze(tenantA, "stripe.charges.create") // again
			e.deleteFreeze(tenantA, "never.frozen")
			sameFreezes(t, "after deleting again", e.listFreezes(), []ledger.Freeze{b})
			e.deleteFreeze(tenantB, "stripe.charges.create")
			sameFreezes(t, "after deleting globex's", e.listFreezes(), nil)
			e.putFreeze(a) // a deleted entry can come back
			sameFreezes(t, "after freezing again", e.listFreezes(), []ledger.Freeze{a})
		}},
		{"invalid entries are refused and change nothing", func(t *testing.T, e *env) {
			good := freezeOf(tenantA, "stripe.charges.create", time.Second)
			e.putFreeze(good)
			bad := map[string]func(*ledger.Freeze){
				"tenant with a space":  func(f *ledger.Freeze) { f.Tenant = "ac me" },
				"empty tenant":         func(f *ledger.Freeze) { f.Tenant = "" },
				"target with a slash":  func(f *ledger.Freeze) { f.Target = "stripe/charges" },
				"empty target":         func(f *ledger.Freeze) { f.Target = "" },
				"target too long":      func(f *ledger.Freeze) { f.Target = strings.Repeat("t", ledger.MaxIDLen+1) },
				"no actor":             func(f *ledger.Freeze) { f.Actor = "" },
				"actor with a newline": func(f *ledger.Freeze) { f.Actor = "eve\nadmin" },
				"blank note":           func(f *ledger.Freeze) { f.Note = "  " },
				"note too long":        func(f *ledger.Freeze) { f.Note = strings.Repeat("n", ledger.MaxNoteLen+1) },
				"note not UTF-8":       func(f *ledger.Freeze) { f.Note = "\xff" },
				"no time":              func(f *ledger.Freeze) { f.At = time.Time{} },
			}
			for name, mod := range bad {
				f := good
				f.Note = "changed"
				mod(&f)
				if err := e.s.PutFreeze(e.ctx, f); !errors.Is(err, ledger.ErrInvalidFreeze) {
					t.Errorf("PutFreeze with %s: got %v, want ErrInvalidFreeze", name, err)
				}
			}
			for _, id := range [][2]string{{"ac me", "x"}, {tenantA, ""}, {tenantA, "a/b"}} {
				if err := e.s.DeleteFreeze(e.ctx, id[0], id[1]); !errors.Is(err, ledger.ErrInvalidFreeze) {
					t.Errorf("DeleteFreeze(%q, %q): got %v, want ErrInvalidFreeze", id[0], id[1], err)
				}
			}
			sameFreezes(t, "ListFreezes after refused writes", e.listFreezes(), []ledger.Freeze{good})
		}},
		{"a freeze touches no row and writes no outbox record", func(t *testing.T, e *env) {
			row := e.claim(baseRequest(), at(0)).Row
			before := len(e.pending())
			e.putFreeze(freezeOf(tenantA, row.Tool, time.Second))
			e.putFreeze(freezeOf(tenantA, string(row.ToolClass), time.Second))
			e.deleteFreeze(tenantA, row.Tool)
			if got := len(e.pending()); got != before {
				t.Fatalf("outbox: %d records after freezing, want %d", got, before)
			}
			sameRow(t, "row after freezing", e.get(tenantA, row.Key), row)
			e.consistent()
		}},
		{"concurrent puts all land", func(t *testing.T, e *env) {
			const n = 16
			var wg sync.WaitGroup
			errs := make(chan error, n)
			var want []ledger.Freeze
			for i := range n {
				f := freezeOf(tenantA, fmt.Sprintf("tool.%02d", i), time.Duration(i)*time.Second)
				want = append(want, f)
				wg.Go(func() { errs <- e.s.PutFreeze(e.ctx, f) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("PutFreeze: %v", err)
				}
			}
			sameFreezes(t, "ListFreezes", e.listFreezes(), want)
		}},
		{"a closed store is unavailable", func(t *testing.T, e *env) {
			if err := e.s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := e.s.PutFreeze(e.ctx, freezeOf(tenantA, "x", 0)); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("PutFreeze after Close: got %v, want ErrUnavailable", err)
			}
			if err := e.s.DeleteFreeze(e.ctx, tenantA, "x"); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("DeleteFreeze after Close: got %v, want ErrUnavailable", err)
			}
			if _, err := e.s.ListFreezes(e.ctx); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("ListFreezes after Close: got %v, want ErrUnavailable", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newEnv(t, open)) })
	}
}
