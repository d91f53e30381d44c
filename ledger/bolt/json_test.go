package bolt

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestEncodingMatchesEncodingJSON: every value the store writes encodes
// byte for byte as encoding/json encodes it, and decodes to what
// encoding/json decodes, so files written before and after the switch to
// go-json-experiment's engine are one format. Each value has every field
// set (by fill), so a field added later is covered without touching this
// test; the strings carry what encoding/json escapes (<, >, &, U+2028).
func TestEncodingMatchesEncodingJSON(t *testing.T) {
	for _, tt := range []struct {
		name string
		v    any
	}{
		{"row", &storedRow{}},
		{"freeze", &storedFreeze{}},
		{"event", &ledger.Event{}},
		{"inbox record", &ledger.InboxRecord{}},
		{"delivery", &ledger.Delivery{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fill(reflect.ValueOf(tt.v).Elem(), 1)
			want, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding differs:\n got %s\nwant %s", got, want)
			}
			for _, zero := range []bool{false, true} {
				w := reflect.New(reflect.TypeOf(tt.v).Elem())
				g := reflect.New(reflect.TypeOf(tt.v).Elem())
				data := want
				if zero { // omitted fields decode alike too
					data, _ = json.Marshal(reflect.New(reflect.TypeOf(tt.v).Elem()).Interface())
				}
				if err := json.Unmarshal(data, w.Interface()); err != nil {
					t.Fatal(err)
				}
				if err := unmarshal(data, g.Interface()); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(g.Interface(), w.Interface()) {
					t.Fatalf("decoding %s differs:\n got %+v\nwant %+v", data, g.Elem(), w.Elem())
				}
			}
		})
	}
}

// fill sets every exported field of v, recursively, to a value that is not
// the zero value.
func fill(v reflect.Value, n int) {
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Date(2026, 11, 30, 12, 0, 0, 123456789+n, time.UTC)))
		return
	case v.Type() == reflect.TypeFor[json.RawMessage]():
		v.SetBytes([]byte(`{"a": [1, 2.50, "<x&y>"], "b": null}`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s<&>\u2028é" + string(rune('a'+n%26)))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(40 + n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(40 + n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5 + float64(n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), n+i+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, n+i+1)
			fill(e, n+i+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n+i+1)
			}
		}
	}
}

// BenchmarkRowCodec decodes and encodes one stored row — an unknown row as
// the webhook path reads and writes it — with the store's codec and with
// encoding/json, which write the same bytes.
func BenchmarkRowCodec(b *testing.B) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	r := storedRow{V: rowVersion, Row: ledger.Row{
		Tenant: "acme", Key: strings.Repeat("ab", 32), IntentFingerprint: strings.Repeat("cd", 32),
		MetadataLocalID: "rl_" + strings.Repeat("ab", 16), RunID: "run_1", Tool: "stripe.create_payment_intent",
		ToolCallID: "call_1", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, Status: ledger.StatusUnknown,
		Attempt: 1, LastHTTPStatus: 504, FirstSeenAt: now, UpdatedAt: now, PendingUntil: now,
		ReplayWindowUntil: now.Add(24 * time.Hour), NextCheckAt: now.Add(time.Minute),
	}}
	data, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dec  func([]byte, any) error
		enc  func(any) ([]byte, error)
	}{
		{"store", unmarshal, marshal},
		{"encoding_json", json.Unmarshal, json.Marshal},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var got storedRow
				if err := tc.dec(data, &got); err != nil {
					b.Fatal(err)
				}
				if _, err := tc.enc(got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
