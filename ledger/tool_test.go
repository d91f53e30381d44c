package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// checkedTool is a write tool with every box checked, asking for autonomy.
func checkedTool(class ledger.ToolClass, autonomy ledger.Autonomy) ledger.Tool {
	return ledger.Tool{
		Tenant: "acme", Name: "stripe.refunds.create", Vendor: "stripe", Class: class, SideEffect: "refund",
		KeyPlacement: ledger.KeyPlacement{Header: "Idempotency-Key"},
		Checklist: ledger.Checklist{
			SideEffectDocumented: true, KeyBornInRuntime: true, LedgerOrUniqueField: true,
			TimeoutLeavesUnknown: true, ErrorClassesMapped: true, DuplicateDeliveryTest: true, CheckedBy: "alice",
		},
		Autonomy: autonomy, UpdatedAt: t0,
	}
}

func TestEffectiveAutonomy(t *testing.T) {
	open := checkedTool(ledger.ClassWriteIdempotent, ledger.AutonomyAutonomous)
	open.Checklist.TimeoutLeavesUnknown, open.Checklist.DuplicateDeliveryTest = false, false
	openOutbox := open
	openOutbox.Autonomy = ledger.AutonomyOutbox
	read := ledger.Tool{Class: ledger.ClassRead}
	tests := []struct {
		name       string
		tool       ledger.Tool
		want       ledger.Autonomy
		wantReason string
	}{
		{"autonomous and checked", checkedTool(ledger.ClassWriteIdempotent, ledger.AutonomyAutonomous), ledger.AutonomyAutonomous, ""},
		{"empty autonomy is autonomous", checkedTool(ledger.ClassWriteLedger, ""), ledger.AutonomyAutonomous, ""},
		{"outbox and checked", checkedTool(ledger.ClassWriteIdempotent, ledger.AutonomyOutbox), ledger.AutonomyOutbox, ""},
		{"approval asked", checkedTool(ledger.ClassWriteIdempotent, ledger.AutonomyApproval), ledger.AutonomyApproval, "the tool is registered with autonomy approval"},
		{"write_irreversible is never autonomous", checkedTool(ledger.ClassWriteIrreversible, ledger.AutonomyAutonomous), ledger.AutonomyApproval, "a write_irreversible tool is never autonomous"},
		{"write_irreversible may be outbox", checkedTool(ledger.ClassWriteIrreversible, ledger.AutonomyOutbox), ledger.AutonomyOutbox, ""},
		{"an open box makes approval", open, ledger.AutonomyApproval, "checklist not complete: timeout_leaves_unknown, duplicate_delivery_test"},
		{"an open box wins over outbox", openOutbox, ledger.AutonomyApproval, "checklist not complete: timeout_leaves_unknown, duplicate_delivery_test"},
		{"a read is autonomous", read, ledger.AutonomyAutonomous, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := tt.tool.EffectiveAutonomy()
			if got != tt.want || reason != tt.wantReason {
				t.Fatalf("EffectiveAutonomy: got %s %q, want %s %q", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

func TestToolCheck(t *testing.T) {
	tl := checkedTool(ledger.ClassWriteIdempotent, "")
	if err := tl.Check("stripe", ledger.ClassWriteIdempotent); err != nil {
		t.Fatalf("the registered vendor and class: %v", err)
	}
	for _, c := range []struct {
		vendor string
		class  ledger.ToolClass
	}{{"paypal", ledger.ClassWriteIdempotent}, {"stripe", ledger.ClassWriteLedger}} {
		err := tl.Check(c.vendor, c.class)
		if !errors.Is(err, ledger.ErrToolMismatch) || errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("Check(%s, %s): got %v, want ErrToolMismatch (not invalid input)", c.vendor, c.class, err)
		}
	}
	read := ledger.Tool{Name: "stripe.customers.retrieve", Vendor: "stripe", Class: ledger.ClassRead}
	if err := read.Check("stripe", ledger.ClassWriteIdempotent); !errors.Is(err, ledger.ErrToolMismatch) {
		t.Errorf("a claim of a read tool: got %v, want ErrToolMismatch", err)
	}
}

func TestToolValidateShapes(t *testing.T) {
	good := []func(*ledger.Tool){
		func(*ledger.Tool) {},
		func(x *ledger.Tool) { x.KeyPlacement = ledger.KeyPlacement{BodyField: "idempotency_key"} },
		func(x *ledger.Tool) { x.KeyPlacement = ledger.KeyPlacement{ExternalIDField: "client_ref"} },
		func(x *ledger.Tool) { x.KeyPlacement = ledger.KeyPlacement{Argument: "idempotency_key"} },
		func(x *ledger.Tool) {
			x.Class, x.KeyPlacement = ledger.ClassWriteLedger, ledger.KeyPlacement{None: true}
		},
		func(x *ledger.Tool) { x.Autonomy = ledger.AutonomyOutbox }, // a dotted name is a valid subject
		func(x *ledger.Tool) { x.Checklist = ledger.Checklist{} },   // nothing checked, nobody named
		func(x *ledger.Tool) { x.Policy = `intent.amount <= 50000` },
	}
	for i, mod := range good {
		tl := checkedTool(ledger.ClassWriteIdempotent, "")
		mod(&tl)
		if err := tl.Validate(); err != nil {
			t.Errorf("good entry %d: %v", i, err)
		}
	}
	bad := checkedTool(ledger.ClassWriteIdempotent, "")
	bad.Class = "write_maybe"
	err := bad.Validate()
	var ie *ledger.InvalidError
	if !errors.As(err, &ie) || ie.Field != "class" || !errors.Is(err, ledger.ErrInvalidToolEntry) {
		t.Fatalf("unknown class: got %v, want an InvalidError of field class matching ErrInvalidToolEntry", err)
	}
	if want := `invalid class: want read, write_idempotent, write_ledger or write_irreversible, got "write_maybe"`; err.Error() != want {
		t.Fatalf("message: got %q, want %q", err, want)
	}
	bad = checkedTool(ledger.ClassWriteLedger, "")
	bad.SideEffect = ""
	if err := bad.Validate(); !errors.As(err, &ie) || ie.Field != "side_effect" {
		t.Fatalf("a write without side_effect: got %v", err)
	}
}

func TestNextTool(t *testing.T) {
	in := checkedTool(ledger.ClassWriteIdempotent, "")
	in.UpdatedAt = t0.Add(1500 * time.Nanosecond)
	first, changed := ledger.NextTool(nil, in)
	if !changed || first.Version != 1 || first.Autonomy != ledger.AutonomyAutonomous || !first.CreatedAt.Equal(t0.Add(time.Microsecond)) {
		t.Fatalf("new entry: %+v changed=%v, want version 1, autonomy autonomous, times to the microsecond", first, changed)
	}
	if !first.Checklist.CheckedAt.Equal(first.UpdatedAt) {
		t.Fatalf("checked_at %v, want the update time %v", first.Checklist.CheckedAt, first.UpdatedAt)
	}
	in.UpdatedAt = t0.Add(time.Hour)
	if same, changed := ledger.NextTool(&first, in); changed || same.Version != 1 || !same.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("identical put: %+v changed=%v, want the stored entry", same, changed)
	}
	in.Checklist.CheckedBy = "bob"
	next, changed := ledger.NextTool(&first, in)
	if !changed || next.Version != 2 || !next.Checklist.CheckedAt.Equal(t0.Add(time.Hour)) || !next.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("another checker: %+v changed=%v, want version 2 checked at the update", next, changed)
	}
}
