package client_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentledger/reconciler/client"
)

func TestScrub(t *testing.T) {
	tests := []struct {
		name   string
		fields []string // nil: the defaults
		in     string
		want   string
	}{
		{name: "snake, kebab, camel and spaced spellings",
			in:   `{"amount":1050,"idempotency_key":"a","Idempotency-Key":"b","idempotencyKey":"c","IDEMPOTENCY KEY":"d"}`,
			want: `{"amount":1050}`},
		{name: "request and message ids",
			in:   `{"to":"ap@example.com","request_id":"r","X-Request-Id":"x","messageId":"m","PayPal-Request-Id":"p"}`,
			want: `{"to":"ap@example.com"}`},
		{name: "nested objects and arrays",
			in:   `{"order":{"idempotency_key":"a","items":[{"sku":"1","request_id":"r"},"text",2]},"options":{"headers":{"Idempotency-Key":"k","Accept":"json"}}}`,
			want: `{"order":{"items":[{"sku":"1"},"text",2]},"options":{"headers":{"Accept":"json"}}}`},
		{name: "the ledger's join fields",
			in:   `{"amount":1050,"metadata":{"metadata_local_id":"rl_other","order":"7"},"purchase_units":[{"custom_id":"rl_x","amount":1}]}`,
			want: `{"amount":1050,"metadata":{"order":"7"},"purchase_units":[{"amount":1}]}`},
		{name: "look-alikes stay",
			in:   `{"customer_request_id_note":"keep","key":"keep","request":"keep","idempotency":"keep"}`,
			want: `{"customer_request_id_note":"keep","key":"keep","request":"keep","idempotency":"keep"}`},
		{name: "configured list replaces the defaults", fields: []string{"dedupe_token"},
			in:   `{"DedupeToken":"a","idempotency_key":"kept"}`,
			want: `{"idempotency_key":"kept"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in, want map[string]any
			mustJSON(t, tt.in, &in)
			mustJSON(t, tt.want, &want)
			orig := deepCopy(t, in)
			var got map[string]any
			if tt.fields == nil {
				got = client.Scrub(in)
			} else {
				c, err := client.New("http://127.0.0.1:1", "t", client.WithScrubFields(tt.fields...))
				if err != nil {
					t.Fatal(err)
				}
				got = c.Scrub(in)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Scrub = %v, want %v", got, want)
			}
			if !reflect.DeepEqual(in, orig) {
				t.Errorf("Scrub changed its input: %v", in)
			}
		})
	}
	if client.Scrub(nil) != nil {
		t.Error("Scrub(nil) != nil")
	}
}

func TestScrubSchema(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "property and its required entry",
			in:   `{"type":"object","properties":{"amount":{"type":"integer"},"idempotency_key":{"type":"string"}},"required":["amount","idempotency_key"]}`,
			want: `{"properties":{"amount":{"type":"integer"}},"required":["amount"],"type":"object"}`},
		{name: "nested in an openai function tool, items and $defs",
			in: `{"type":"function","function":{"name":"send","parameters":{"type":"object","properties":{
			       "message":{"type":"object","properties":{"to":{"type":"string"},"messageId":{"type":"string"}},"required":["to","messageId"]},
			       "lines":{"type":"array","items":{"$ref":"#/$defs/line"}}},
			     "$defs":{"line":{"type":"object","properties":{"Request-Id":{"type":"string"},"qty":{"type":"number","maximum":1.50}}}}}}}`,
			want: `{"function":{"name":"send","parameters":{"$defs":{"line":{"properties":{"qty":{"maximum":1.50,"type":"number"}},"type":"object"}},"properties":{"lines":{"items":{"$ref":"#/$defs/line"},"type":"array"},"message":{"properties":{"to":{"type":"string"}},"required":["to"],"type":"object"}},"type":"object"}},"type":"function"}`},
		{name: "a schema without such fields is unchanged but for key order",
			in:   `{"type":"object","properties":{"b":{},"a":{}}}`,
			want: `{"properties":{"a":{},"b":{}},"type":"object"}`},
		{name: "not json", in: `{"type":`, wantErr: true},
		{name: "not an object", in: `[1,2]`, wantErr: true},
		{name: "trailing data", in: `{} {}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.ScrubSchema([]byte(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Errorf("ScrubSchema = %s, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ScrubSchema: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("ScrubSchema =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
}

func deepCopy(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(m)
	var out map[string]any
	mustJSON(t, string(b), &out)
	return out
}
