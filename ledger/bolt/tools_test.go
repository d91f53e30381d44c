package bolt

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

func testTool(tenant, name string) ledger.Tool {
	return ledger.Tool{
		Tenant: tenant, Name: name, Vendor: "stripe", Class: ledger.ClassWriteLedger, SideEffect: "email",
		KeyPlacement: ledger.KeyPlacement{None: true}, Autonomy: ledger.AutonomyApproval,
		Policy: `intent.to.endsWith("@example.com")`, UpdatedAt: t0,
	}
}

func TestToolsSurviveReopen(t *testing.T) {
	s := mustOpen(t, Options{})
	ctx := t.Context()
	var want []ledger.Tool
	for _, tl := range []ledger.Tool{testTool("acme", "email.send"), testTool("acme", "crm.write"), testTool("globex", "email.send")} {
		got, _, err := s.PutTool(ctx, tl)
		if err != nil {
			t.Fatalf("PutTool: %v", err)
		}
		want = append(want, got)
	}
	s = reopen(t, s)
	got, err := s.ListTools(ctx, "")
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal([]ledger.Tool{want[1], want[0], want[2]})
	if string(gb) != string(wb) {
		t.Fatalf("after reopen:\n got %s\nwant %s", gb, wb)
	}
	if err := s.DeleteTool(ctx, "acme", "crm.write"); err != nil {
		t.Fatalf("DeleteTool: %v", err)
	}
	s = reopen(t, s)
	if _, err := s.GetTool(ctx, "acme", "crm.write"); !errors.Is(err, ledger.ErrToolNotFound) {
		t.Fatalf("a deleted tool after reopen: got %v, want ErrToolNotFound", err)
	}
	mustConsistent(t, s)
}

// An identical put, and a delete of nothing, write nothing: their groups
// end without a commit.
func TestUnchangedToolCommitsNothing(t *testing.T) {
	s := mustOpen(t, Options{})
	ctx := t.Context()
	if _, _, err := s.PutTool(ctx, testTool("acme", "email.send")); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	if _, changed, err := s.PutTool(ctx, testTool("acme", "email.send")); err != nil || changed {
		t.Fatalf("identical PutTool: changed=%v err=%v", changed, err)
	}
	if err := s.DeleteTool(ctx, "acme", "nothing"); !errors.Is(err, ledger.ErrToolNotFound) {
		t.Fatalf("DeleteTool of nothing: %v", err)
	}
	after := s.Stats()
	if got := after.ReadOnly - before.ReadOnly; got != after.Groups-before.Groups {
		t.Fatalf("%d groups ran, %d of them read-only; want every one read-only", after.Groups-before.Groups, got)
	}
}
