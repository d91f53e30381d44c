package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// FuzzClaimBody feeds arbitrary bytes to the claim body decoder. Whatever
// the input: no panic; a refusal is a 400 bad_json with a bounded message;
// an acceptance is valid JSON whose fields are exactly the documented ones,
// survives a round trip unchanged, and is safe to hand to ledger.NewClaim.
func FuzzClaimBody(f *testing.F) {
	for _, seed := range []string{
		`{"run_id":"run_1","tool":"stripe.create_payment_intent","tool_call_id":"call_1","vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd"}}`,
		`{"run_id":"r","tool":"t","vendor":"resend","tool_class":"write_ledger","intent":{"to":"a@b.c","template_id":"tpl"},"key":"cart/42",` +
			`"request":{"method":"POST","path":"/v1/emails","content_type":"application/json","body":{"x":[1,2,{"y":null}]}},"expect":{"amount":0,"currency":"EUR"}}`,
		`{"run_id":"r","tool":"t","vendor":"v","tool_class":"write_irreversible","intent":{"a":10.50,"b":1e2,"c":"\u00e9\ud83d\ude00"},"expect":null,"request":null}`,
		`{"run_id":"r","run_id":"s"}`,
		`{"RUN_ID":"r"}`,
		`{"expect":{"amount":1,"currency":"usd","extra":1}}`,
		`{"expect":{"amount":"1"}}`,
		`{"request":[]}`,
		`{} {}`,
		`{}x`,
		`[]`,
		`null`,
		`"str"`,
		``,
		`{"intent":{"a":1,"a":2}}`,
		"{\"run_id\":\"\xff\xfe\"}",
		`{"intent":` + string(bytes.Repeat([]byte("["), 100)) + `}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeClaim(data)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "bad_json" {
				t.Fatalf("refusal is not a 400 bad_json: %v", err)
			}
			if len(ae.Message) == 0 || len(ae.Message) > 200 {
				t.Fatalf("message of %d bytes: %q", len(ae.Message), ae.Message)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if err := checkNames(data, claimNames); err != nil {
			t.Fatalf("accepted %q: %v", data, err)
		}
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b2, err := decodeClaim(enc)
		if err != nil {
			t.Fatalf("round trip refused %s: %v", enc, err)
		}
		enc2, _ := json.Marshal(b2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the body:\n%s\n%s", enc, enc2)
		}
		_, err = ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: b.RunID, Tool: b.Tool, ToolCallID: b.ToolCallID, Vendor: b.Vendor,
			ToolClass: b.ToolClass, Intent: b.Intent, Key: b.Key, Request: b.Request, Expect: b.Expect,
			ReplayWindow: time.Hour,
		}, ledger.DefaultPolicy(), time.Unix(0, 0))
		if err != nil && !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("NewClaim failed with a non-input error: %v", err)
		}
	})
}

// names lists the member names an object may carry, for the oracle
// checkNames; a nil entry accepts any value.
type names map[string]names

// claimNames is POST /v1/claims's body as documented in openapi.yaml.
var claimNames = names{
	"run_id": nil, "tool": nil, "tool_call_id": nil, "vendor": nil, "tool_class": nil,
	"intent": nil, "key": nil,
	"request": {"method": nil, "path": nil, "content_type": nil, "body": nil},
	"expect":  {"amount": nil, "currency": nil},
}

// checkNames is an oracle independent of the decoder under test: it walks
// data with encoding/json's tokenizer and fails on a non-object, a name not
// in want (exact case), or a name given twice. A null stands for an absent
// nested object.
func checkNames(data []byte, want names) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("not an object: %v", tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name := tok.(string)
		sub, ok := want[name]
		if !ok {
			return fmt.Errorf("unknown name %q", name)
		}
		if seen[name] {
			return fmt.Errorf("duplicate name %q", name)
		}
		seen[name] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return err
		}
		if sub != nil && string(val) != "null" {
			if err := checkNames(val, sub); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// BenchmarkDecodeClaim is the strict decode of the claim body the load
// program (cmd/httpload) sends, next to encoding/json's strict
// decoder alone (DisallowUnknownFields; it lets duplicate and case-variant
// names through, so the API's old path ran a token walk before it).
func BenchmarkDecodeClaim(b *testing.B) {
	body := []byte(`{"run_id":"run_12345","tool":"stripe.create_payment_intent","tool_call_id":"call_991","vendor":"stripe",` +
		`"tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd","customer":"cus_4QFJOjw2pOmAGJ"}}`)
	b.Run("api", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeClaim(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json_strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c claimBody
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
