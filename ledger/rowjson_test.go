package ledger

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// AppendRowJSON must be encoding/json's bytes for every row: the fields
// set and unset, strings that need escaping, times in another zone.
func TestRowJSONAsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 30, 1, 123456789, time.UTC)
	no := false
	full := Row{
		Tenant: "acme", Key: "k1", IntentFingerprint: "fp", MetadataLocalID: "l1", RunID: "run_1", Tool: "stripe.x",
		ToolCallID: "call_1", Vendor: "stripe", ToolClass: ClassWriteIdempotent, Status: StatusPending,
		Attempt: 3, VendorKey: "vk", UpstreamReceiptID: "pi_1", IdempotentReplayed: true, VendorShouldRetry: &no,
		LastHTTPStatus: 502, Result: `{"ok":true,"html":"<b>&"}`, FirstSeenAt: at, UpdatedAt: at.Add(time.Second),
		SucceededAt: at, PagedAt: at, PendingUntil: at.Add(15 * time.Minute), ReplayWindowUntil: at.Add(24 * time.Hour),
		NextCheckAt: at, CompensationOf: "k0", CompensationAction: "refund",
		Request:     &Request{Method: "POST", Path: "/v1/x?a=1&b=<2>", ContentType: "application/json", Body: "{\"a\":\"\u2028\"}"},
		Expect:      &Expect{Amount: 100, Currency: "usd"},
		Resolution:  &Resolution{Source: SourceHuman, Actor: "ops", Note: "é\x00", At: at},
		Autonomy:    Autonomy("approval"),
		Approval:    &Approval{ID: "ap_1", Reason: "large", RequestedAt: at, ExpiresAt: at},
		Alerts:      []Alert{{Kind: AlertKind("late_success"), Source: SourceWebhook, At: at}},
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	odd := full
	odd.Tenant, odd.Key, odd.RunID, odd.Tool = "a\"b", "k\\1", "run\u00e9\xff", "t\u2029<>&\t"
	odd.Alerts = []Alert{}
	odd.FirstSeenAt = at.In(time.FixedZone("CET", 3600))
	rows := []Row{full, odd, {}, {Tenant: "acme", Key: "k", Status: StatusPending, Attempt: 1, FirstSeenAt: at, UpdatedAt: at}}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []rune("aZ09 _-.:/\"\\<>&\t\n\u007f\u00e9\u2028\U0001F600")
	word := func() string {
		var sb strings.Builder
		for range rng.IntN(12) {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	for range 300 {
		r := full
		r.Tenant, r.Key, r.Tool, r.ToolCallID, r.Result, r.Traceparent = word(), word(), word(), word(), word(), word()
		rows = append(rows, r)
	}
	for i, r := range rows {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendRowJSON([]byte("prefix"), &r)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if string(got) != "prefix"+string(want) {
			t.Fatalf("row %d: AppendRowJSON\n%s\nencoding/json\n%s", i, got[len("prefix"):], want)
		}
	}
	if _, err := AppendRowJSON(nil, &Row{FirstSeenAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Fatal("a year past 9999 encoded; encoding/json refuses it")
	}
}

// rowJSONFields are the members AppendRowJSON writes, in its order: a
// field added to Row without a writer there fails the test below.
var rowJSONFields = []string{
	"tenant", "key", "intent_fingerprint", "metadata_local_id", "run_id", "tool", "tool_call_id",
	"vendor", "tool_class", "status", "attempt", "vendor_key", "upstream_receipt_id",
	"idempotent_replayed", "vendor_should_retry", "last_http_status", "result",
	"first_seen_at", "updated_at", "succeeded_at", "paged_at", "pending_until",
	"replay_window_until", "next_check_at", "compensation_of", "compensation_action",
	"request", "expect", "resolution", "autonomy", "approval", "alerts", "traceparent",
}

// A field added to Row must be added to AppendRowJSON too.
func TestRowJSONKnowsEveryRowField(t *testing.T) {
	var names []string
	rt := reflect.TypeFor[Row]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	if !reflect.DeepEqual(names, rowJSONFields) {
		t.Fatalf("Row's JSON fields are\n%v\nAppendRowJSON writes\n%v\n(ledger/rowjson.go must follow the row)", names, rowJSONFields)
	}
}
