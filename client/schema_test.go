package client_test

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// eventSchema is the subset of JSON Schema that schema/event.schema.json uses.
type eventSchema struct {
	Type       string   `json:"type"`
	Required   []string `json:"required"`
	Properties map[string]struct {
		Type      string   `json:"type"`
		Pattern   string   `json:"pattern"`
		Enum      []string `json:"enum"`
		MinLength int      `json:"minLength"`
		MaxLength int      `json:"maxLength"`
		Format    string   `json:"format"`
	} `json:"properties"`
}

func loadEventSchema(t *testing.T) eventSchema {
	t.Helper()
	data, err := os.ReadFile("../schema/event.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s eventSchema
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("schema: %v", err)
	}
	return s
}

// TestEventSchemaMatchesLedgerEvent: the schema names exactly the JSON
// fields of ledger.Event, and requires exactly those always encoded.
func TestEventSchemaMatchesLedgerEvent(t *testing.T) {
	s := loadEventSchema(t)
	var fields, required []string
	typ := reflect.TypeOf(ledger.Event{})
	for i := range typ.NumField() {
		tag := typ.Field(i).Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		fields = append(fields, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			required = append(required, name)
		}
	}
	var props []string
	for p := range s.Properties {
		props = append(props, p)
	}
	slices.Sort(fields)
	slices.Sort(props)
	slices.Sort(required)
	got := slices.Clone(s.Required)
	slices.Sort(got)
	if !slices.Equal(props, fields) {
		t.Errorf("schema properties %v, ledger.Event fields %v", props, fields)
	}
	if !slices.Equal(got, required) {
		t.Errorf("schema required %v, ledger.Event always encodes %v", got, required)
	}
}

// TestEventSchemaValidates: encoded events validate, and broken ones do not.
func TestEventSchemaValidates(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	good := ledger.Event{Key: strings.Repeat("ab", 32), Tenant: "acme", RunID: "run_42", Tool: "stripe.payment_intents.create",
		ToolCallID: "call_1", Status: "succeeded", ReceiptID: "pi_1", Source: ledger.SourceWebhook, VendorEventID: "evt_1", At: at}
	tests := []struct {
		name  string
		mod   func(m map[string]any)
		valid bool
	}{
		{name: "full event", valid: true},
		{name: "minimal escalated event", valid: true, mod: func(m map[string]any) {
			delete(m, "tool_call_id")
			delete(m, "receipt_id")
			delete(m, "vendor_event_id")
			m["status"], m["source"], m["paged_at"] = "escalated", "resolver", at.Format(time.RFC3339Nano)
		}},
		{name: "an unknown field is allowed", valid: true, mod: func(m map[string]any) { m["future"] = 1 }},
		{name: "status pending is never published", mod: func(m map[string]any) { m["status"] = "pending" }},
		{name: "run_id with a dot", mod: func(m map[string]any) { m["run_id"] = "run.1" }},
		{name: "missing key", mod: func(m map[string]any) { delete(m, "key") }},
		{name: "bad time", mod: func(m map[string]any) { m["at"] = "yesterday" }},
	}
	s := loadEventSchema(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(good)
			var m map[string]any
			mustJSON(t, string(b), &m)
			if tt.mod != nil {
				tt.mod(m)
			}
			if err := validate(s, m); (err == "") != tt.valid {
				t.Errorf("validate = %q, want valid=%v", err, tt.valid)
			}
		})
	}
}

func validate(s eventSchema, m map[string]any) string {
	for _, r := range s.Required {
		if _, ok := m[r]; !ok {
			return "missing " + r
		}
	}
	for name, v := range m {
		p, ok := s.Properties[name]
		if !ok {
			continue // additionalProperties: true
		}
		str, ok := v.(string)
		if !ok || p.Type != "string" {
			return name + ": not a string"
		}
		if len(str) < p.MinLength || (p.MaxLength > 0 && len(str) > p.MaxLength) {
			return name + ": length"
		}
		if p.Pattern != "" && !regexp.MustCompile(p.Pattern).MatchString(str) {
			return name + ": pattern"
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, str) {
			return name + ": enum"
		}
		if p.Format == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				return name + ": date-time"
			}
		}
	}
	return ""
}
