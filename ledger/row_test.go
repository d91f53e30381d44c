package ledger_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// fullRow sets every field of Row, including every pointer and slice.
func fullRow() ledger.Row {
	return ledger.Row{
		Tenant: "acme", Key: vecKeyAcme, IntentFingerprint: vecFingerprint, MetadataLocalID: "rl_38af6fb5b479712bbaf3bf71cf2e82f3",
		RunID: "run-1", Tool: "stripe.charge", ToolCallID: "call_01", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Status: ledger.StatusSucceeded, Attempt: 2, VendorKey: "vk_1", UpstreamReceiptID: "pi_1", IdempotentReplayed: true,
		VendorShouldRetry: boolp(true), LastHTTPStatus: 200, Result: `{"content":[{"type":"text","text":"sent"}]}`,
		FirstSeenAt: t0, UpdatedAt: t0.Add(time.Minute), SucceededAt: t0.Add(time.Minute), PagedAt: t0.Add(2 * time.Minute),
		PendingUntil: t0.Add(15 * time.Minute), ReplayWindowUntil: t0.Add(24 * time.Hour), NextCheckAt: t0.Add(time.Hour),
		CompensationOf: "cart-42", CompensationAction: "refund",
		Request:    &ledger.Request{Method: "POST", Path: "/v1/refunds", ContentType: "application/json", Body: `{"charge":"ch_1"}`},
		Expect:     &ledger.Expect{Amount: 1050, Currency: "usd"},
		Resolution: &ledger.Resolution{Source: ledger.SourceWebhook, VendorEventID: "evt_1", Actor: "a", Note: "n", At: t0},
		Alerts:     []ledger.Alert{{Kind: ledger.AlertLateSuccess, Source: ledger.SourceWebhook, VendorEventID: "evt_1", Detail: "d", At: t0}},
		Autonomy:   ledger.AutonomyApproval,
		Approval: &ledger.Approval{ID: ledger.ApprovalID("acme", vecKeyAcme), State: ledger.ApprovalGranted, Reason: "policy: false",
			RequestedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), RequestedBy: "tok_1", Actor: "alice", Note: "ok", DecidedBy: "tok_2", DecidedAt: t0.Add(time.Minute)},
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
}

func TestRowCloneIsDeep(t *testing.T) {
	orig := fullRow()
	assertEveryFieldSet(t, reflect.ValueOf(orig), "Row")
	want := fullRow()

	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("Clone differs:\n got %+v\nwant %+v", c, orig)
	}
	// Change everything the clone points at; the original must not move.
	*c.VendorShouldRetry = false
	c.Request.Method = "PUT"
	c.Request.Body = "changed"
	c.Expect.Amount = 1
	c.Resolution.Note = "changed"
	c.Alerts[0].Detail = "changed"
	c.Alerts = append(c.Alerts, ledger.Alert{Kind: ledger.AlertMismatch})
	c.Approval.State = ledger.ApprovalDenied
	if !reflect.DeepEqual(orig, want) {
		t.Fatalf("changing the clone changed the original:\n got %+v\nwant %+v", orig, want)
	}

	// A field added to Row later must be covered by Clone: every pointer,
	// slice and map in the clone must have its own memory.
	assertNoSharedMemory(t, reflect.ValueOf(orig.Clone()), reflect.ValueOf(orig), "Row")

	t.Run("nil fields stay nil", func(t *testing.T) {
		var r ledger.Row
		if c := r.Clone(); !reflect.DeepEqual(c, r) {
			t.Fatalf("Clone of a zero row = %+v", c)
		}
	})
}

// assertEveryFieldSet fails when a field of v is zero, so fullRow keeps up
// with Row and the clone test covers every field.
func assertEveryFieldSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.IsZero() {
			t.Fatalf("fullRow leaves %s.%s zero; set it so Clone is tested on it", path, v.Type().Field(i).Name)
		}
	}
}

func assertNoSharedMemory(t *testing.T, a, b reflect.Value, path string) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Fatalf("Clone shares %s with the original", path)
		}
		assertNoSharedMemory(t, a.Elem(), b.Elem(), path)
	case reflect.Slice, reflect.Map:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			t.Fatalf("Clone shares %s with the original", path)
		}
		if a.Kind() == reflect.Slice {
			for i := 0; i < a.Len(); i++ {
				assertNoSharedMemory(t, a.Index(i), b.Index(i), path+"[]")
			}
		}
	case reflect.Struct:
		if a.Type() == reflect.TypeOf(time.Time{}) {
			return // a value; its *Location is shared by design
		}
		for i := 0; i < a.NumField(); i++ {
			assertNoSharedMemory(t, a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)
		}
	}
}

// TestRowJSONRoundTrip: the stored and API form keeps every field, and uses
// the design's names.
func TestRowJSONRoundTrip(t *testing.T) {
	r := fullRow()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back ledger.Row
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, r)
	}
	for _, name := range []string{
		`"tenant"`, `"key"`, `"intent_fingerprint"`, `"metadata_local_id"`, `"run_id"`, `"tool"`, `"tool_call_id"`,
		`"vendor"`, `"tool_class"`, `"status"`, `"attempt"`, `"upstream_receipt_id"`, `"idempotent_replayed"`,
		`"vendor_should_retry"`, `"last_http_status"`, `"first_seen_at"`, `"updated_at"`, `"succeeded_at"`, `"paged_at"`,
		`"pending_until"`, `"replay_window_until"`, `"next_check_at"`, `"compensation_of"`, `"compensation_action"`,
		`"request"`, `"expect"`, `"resolution"`, `"alerts"`, `"autonomy"`, `"approval"`,
	} {
		if !strings.Contains(string(b), name+":") {
			t.Errorf("row JSON has no %s member: %s", name, b)
		}
	}

	t.Run("zero times are omitted", func(t *testing.T) {
		r := ledger.Row{Tenant: "acme", FirstSeenAt: t0, UpdatedAt: t0}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"succeeded_at", "paged_at", "pending_until", "replay_window_until", "next_check_at"} {
			if strings.Contains(string(b), name) {
				t.Errorf("zero %s is in the JSON: %s", name, b)
			}
		}
	})
}

func TestEventMsgID(t *testing.T) {
	tests := []struct {
		e    ledger.Event
		want string
	}{
		{ledger.Event{Tenant: "acme", Key: vecKeyAcme, Status: "succeeded"}, "acme:" + vecKeyAcme + ":succeeded"},
		{ledger.Event{Tenant: "acme", Key: "cart-42", Status: ledger.EventEscalated}, "acme:cart-42:escalated"},
		// Two tenants' resolutions of one business key are two messages.
		{ledger.Event{Tenant: "globex", Key: "cart-42", Status: ledger.EventEscalated}, "globex:cart-42:escalated"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.e.MsgID(); got != tt.want {
				t.Fatalf("MsgID = %s, want %s", got, tt.want)
			}
		})
	}
}
