package bolt

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// fullRow has every field of ledger.Row set, so changing any one of them
// changes the row.
func fullRow() ledger.Row {
	yes := true
	return ledger.Row{
		Tenant: "acme", Key: "k", IntentFingerprint: "fp", MetadataLocalID: "rl_1", RunID: "run", Tool: "tool",
		ToolCallID: "call", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, Status: ledger.StatusPending,
		Attempt: 1, VendorKey: "vk", UpstreamReceiptID: "pi_1", IdempotentReplayed: true, VendorShouldRetry: &yes,
		LastHTTPStatus: 200, Result: `{}`,
		FirstSeenAt: t0, UpdatedAt: t0, SucceededAt: t0, PagedAt: t0, PendingUntil: t0, ReplayWindowUntil: t0, NextCheckAt: t0,
		CompensationOf: "orig", CompensationAction: "refund",
		Request:     &ledger.Request{Method: "POST", Path: "/v1/x"},
		Expect:      &ledger.Expect{Amount: 1, Currency: "usd"},
		Resolution:  &ledger.Resolution{Source: ledger.SourceWebhook, At: t0},
		Autonomy:    ledger.AutonomyApproval,
		Approval:    &ledger.Approval{ID: "ap_1", State: ledger.ApprovalRequested, ExpiresAt: t0},
		Alerts:      []ledger.Alert{{Kind: "late_success", At: t0}},
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
}

// TestRowEqualCoversEveryField changes each field of a row in turn (found
// by reflection, so a field added to ledger.Row later is covered too) and
// wants rowEqual to notice: a field rowEqual skipped would let a claim
// write its caller's stale encoding.
func TestRowEqualCoversEveryField(t *testing.T) {
	base := fullRow()
	if a, b := base, fullRow(); !rowEqual(&a, &b) {
		t.Fatal("two copies of one row differ")
	}
	if c := base.Clone(); !rowEqual(&base, &c) {
		t.Fatal("a row and its clone differ")
	}
	rt := reflect.TypeOf(base)
	for i := range rt.NumField() {
		f := rt.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			changed := fullRow()
			v := reflect.ValueOf(&changed).Elem().Field(i)
			switch {
			case v.Type() == reflect.TypeOf(time.Time{}):
				v.Set(reflect.ValueOf(t0.Add(time.Second)))
			case v.Kind() == reflect.String:
				v.SetString(v.String() + "x")
			case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
				v.SetInt(v.Int() + 1)
			case v.Kind() == reflect.Bool:
				v.SetBool(!v.Bool())
			case v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice:
				v.SetZero()
			default:
				t.Fatalf("field %s of kind %s: teach this test (and rowEqual) about it", f.Name, v.Kind())
			}
			if rowEqual(&base, &changed) || rowEqual(&changed, &base) {
				t.Errorf("rowEqual misses a change of %s", f.Name)
			}
		})
	}
	// Inside the pointers and the slice too.
	for name, change := range map[string]func(r *ledger.Row){
		"Request.Body":      func(r *ledger.Row) { r.Request.Body = "b" },
		"Approval.Note":     func(r *ledger.Row) { r.Approval.Note = "n" },
		"Alerts[0].Detail":  func(r *ledger.Row) { r.Alerts[0].Detail = "d" },
		"Alerts appended":   func(r *ledger.Row) { r.Alerts = append(r.Alerts, r.Alerts[0]) },
		"VendorShouldRetry": func(r *ledger.Row) { no := false; r.VendorShouldRetry = &no },
	} {
		changed := fullRow()
		change(&changed)
		if rowEqual(&base, &changed) {
			t.Errorf("rowEqual misses a change of %s", name)
		}
	}
}

// TestClaimUsesCallerEncoding: an autonomous claim's insert is written with
// the bytes its caller encoded, and those are the bytes the committer would
// have written; every other write encodes in the committer, and a hint that
// does not match the row written is never used.
func TestClaimUsesCallerEncoding(t *testing.T) {
	ctx := context.Background()
	stored := func(t *testing.T, s *Store, tenant, key string) ledger.Row {
		t.Helper()
		row, err := s.Get(ctx, tenant, key)
		if err != nil {
			t.Fatal(err)
		}
		want, err := encodeRow(row)
		if err != nil {
			t.Fatal(err)
		}
		if got := rawRow(t, s, tenant, key); !bytes.Equal(got, want) {
			t.Fatalf("stored bytes\n%s\nwant\n%s", got, want)
		}
		return row
	}
	hits := func(s *Store) uint64 { return s.metrics.preEncoded.Load() }

	t.Run("autonomous insert, then a replay", func(t *testing.T) {
		s := mustOpen(t, Options{})
		res := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0)
		if res.Decision != ledger.DecisionProceed || hits(s) != 1 {
			t.Fatalf("decision %s, %d pre-encoded inserts; want proceed, 1", res.Decision, hits(s))
		}
		if row := stored(t, s, "acme", res.Row.Key); row.Status != ledger.StatusPending || row.Attempt != 1 {
			t.Fatalf("stored %s attempt %d", row.Status, row.Attempt)
		}
		// The same claim again is a wait on the stored row: no insert.
		mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0.Add(time.Second))
		if hits(s) != 1 {
			t.Fatalf("pre-encoded inserts = %d after a repeat, want 1", hits(s))
		}
	})
	t.Run("approval gate: encoded in the committer", func(t *testing.T) {
		s := mustOpen(t, Options{})
		c, err := ledger.NewClaim(claimReq("acme", "", "run_1", 1), s.policy, t0)
		if err != nil {
			t.Fatal(err)
		}
		c.Gate = ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "refunds need a human"}
		res, err := s.Claim(ctx, c)
		if err != nil || res.Decision != ledger.DecisionAwaitApproval {
			t.Fatalf("claim = %s, %v", res.Decision, err)
		}
		if hits(s) != 0 {
			t.Fatalf("pre-encoded inserts = %d, want 0", hits(s))
		}
		if row := stored(t, s, "acme", res.Row.Key); row.Approval == nil || row.Attempt != 0 {
			t.Fatalf("stored row lost its approval: %+v", row)
		}
	})
	t.Run("parked orphans change the row after the insert", func(t *testing.T) {
		s := mustOpen(t, Options{})
		c, err := ledger.NewClaim(claimReq("acme", "", "run_1", 1), s.policy, t0)
		if err != nil {
			t.Fatal(err)
		}
		d := ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_1", LocalID: c.Row.MetadataLocalID, At: t0.Add(-time.Second),
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_7", At: t0.Add(-time.Second)}}
		if res, err := s.Ingest(ctx, d); err != nil || res.Outcome != ledger.IngestOrphan {
			t.Fatalf("ingest = %+v, %v", res, err)
		}
		res, err := s.Claim(ctx, c)
		if err != nil || res.Row.Status != ledger.StatusSucceeded {
			t.Fatalf("claim = %+v, %v", res, err)
		}
		if row := stored(t, s, "acme", c.Row.Key); row.Status != ledger.StatusSucceeded || row.UpstreamReceiptID != "pi_7" {
			t.Fatalf("stored %s %q, want the orphan applied", row.Status, row.UpstreamReceiptID)
		}
	})
	t.Run("a hint for another row is ignored", func(t *testing.T) {
		s := mustOpen(t, Options{})
		c, err := ledger.NewClaim(claimReq("acme", "", "run_1", 1), s.policy, t0)
		if err != nil {
			t.Fatal(err)
		}
		other := c.Row.Clone()
		other.RunID = "run_other"
		v, err := encodeRow(other)
		if err != nil {
			t.Fatal(err)
		}
		hctx := context.WithValue(ctx, preRowKey{}, &preRow{row: other, v: v})
		if _, err := s.Flows.Claim(hctx, c); err != nil {
			t.Fatal(err)
		}
		if hits(s) != 0 {
			t.Fatalf("pre-encoded inserts = %d, want 0", hits(s))
		}
		if row := stored(t, s, "acme", c.Row.Key); row.RunID != "run_1" {
			t.Fatalf("stored run %q, want run_1", row.RunID)
		}
	})
}
