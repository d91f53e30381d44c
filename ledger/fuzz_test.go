package ledger_test

// Fuzz targets. Plain `go test` runs each one over its seed corpus (the JCS
// vectors in testdata/jcs, and anything `go test -fuzz` saved under
// testdata/fuzz); `make fuzz` or
//
//	go test -run '^$' -fuzz '^FuzzCanonicalize$' -fuzztime 30s ./ledger/
//
// explores further.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/agentledger/reconciler/ledger"
)

// addJCSSeeds adds every accepted and rejected JCS vector to f.
func addJCSSeeds(f *testing.F) {
	f.Helper()
	for _, v := range loadJCSVectors(f) {
		f.Add(v.in)
		f.Add(v.canon)
	}
	for name, in := range loadJCSRejects(f) {
		if strings.HasPrefix(name, "depth_10000") {
			continue // large; the nesting tests cover it
		}
		f.Add(in)
	}
}

// canonDepth is the deepest container nesting of a canonical JSON text.
func canonDepth(canon []byte) int {
	depth, max, inString := 0, 0, false
	for i := 0; i < len(canon); i++ {
		switch c := canon[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			if depth > max {
				max = depth
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return max
}

func FuzzCanonicalize(f *testing.F) {
	addJCSSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ledger.Canonicalize(data)
		ref, refErr := jcs.Transform(data)
		if err != nil {
			if refErr == nil && canonDepth(ref) <= 64 {
				t.Fatalf("Canonicalize(%q) = %v, but gowebpki/jcs accepts it as %q", data, err, ref)
			}
			return
		}
		if !utf8.Valid(got) || !json.Valid(got) {
			t.Fatalf("Canonicalize(%q) = %q: not valid UTF-8 JSON", data, got)
		}
		if !json.Valid(data) {
			t.Fatalf("Canonicalize accepted %q, which encoding/json rejects", data)
		}
		again, err := ledger.Canonicalize(got)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("not idempotent: Canonicalize(%q) = %q, then %q, %v", data, got, again, err)
		}
		if refErr != nil {
			t.Fatalf("Canonicalize(%q) = %q, but gowebpki/jcs rejects it: %v", data, got, refErr)
		}
		if !bytes.Equal(got, ref) {
			t.Fatalf("Canonicalize(%q) = %q, gowebpki/jcs says %q", data, got, ref)
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	addJCSSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fp, err := ledger.Fingerprint(data)
		canon, cerr := ledger.Canonicalize(data)
		isObject := len(canon) > 0 && canon[0] == '{'
		if err != nil {
			if !errors.Is(err, ledger.ErrInvalidIntent) || !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("Fingerprint(%q) error %v is not ErrInvalidIntent", data, err)
			}
			if cerr == nil && isObject {
				t.Fatalf("Fingerprint(%q) = %v, but it canonicalizes to the object %q", data, err, canon)
			}
			return
		}
		if cerr != nil || !isObject {
			t.Fatalf("Fingerprint(%q) = %s, but Canonicalize = %q, %v", data, fp, canon, cerr)
		}
		sum := sha256.Sum256(canon)
		if want := hex.EncodeToString(sum[:]); fp != want {
			t.Fatalf("Fingerprint(%q) = %s, want sha256 of %q = %s", data, fp, canon, want)
		}
		if again, err := ledger.Fingerprint(canon); err != nil || again != fp {
			t.Fatalf("Fingerprint(canonical form) = %s, %v; want %s", again, err, fp)
		}
		if !ledger.IsMintedKey(fp) {
			t.Fatalf("Fingerprint = %q, not 64 lower-case hex", fp)
		}
	})
}

func FuzzNewClaim(f *testing.F) {
	r := validClaimRequest()
	f.Add(r.Tenant, r.RunID, r.Tool, r.ToolCallID, r.Vendor, string(r.ToolClass), []byte(r.Intent), "",
		r.Request.Method, r.Request.Path, r.Request.ContentType, r.Request.Body, int64(1050), "USD", int64(24*time.Hour), false)
	f.Add("globex", "r", "t", "", "paypal", "write_ledger", []byte(`{}`), "cart-42",
		"", "", "", "", int64(-1), "", int64(0), true)
	f.Add("a", "b", "c", "d", "e", "write_irreversible", []byte(`{"a":[1,2,{"b":null}]}`), vecKeyAcme,
		"PUT", "/x", "text/plain\n", "not\xffutf8", int64(0), "eur", int64(-1), false)
	for _, v := range loadJCSVectors(f) {
		f.Add("acme", "run-1", "tool", "", "stripe", "write_idempotent", v.in, "", "", "", "", "", int64(0), "", int64(0), false)
	}
	f.Fuzz(func(t *testing.T, tenant, runID, tool, toolCallID, vendor, class string, intent []byte, key,
		method, path, contentType, body string, amount int64, currency string, replay int64, frozen bool,
	) {
		req := ledger.ClaimRequest{
			Tenant: tenant, RunID: runID, Tool: tool, ToolCallID: toolCallID, Vendor: vendor,
			ToolClass: ledger.ToolClass(class), Intent: intent, Key: key,
			ReplayWindow: time.Duration(replay), Frozen: frozen,
		}
		if method != "" || path != "" {
			req.Request = &ledger.Request{Method: method, Path: path, ContentType: contentType, Body: body}
		}
		if currency != "" || amount != 0 {
			req.Expect = &ledger.Expect{Amount: amount, Currency: currency}
		}
		c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0)
		if err != nil {
			if !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("NewClaim error %v does not match ErrInvalid", err)
			}
			return
		}
		row := c.Row
		for name, err := range map[string]error{
			"tenant": ledger.ValidateTenant(row.Tenant), "run_id": ledger.ValidateRunID(row.RunID),
			"tool": ledger.ValidateTool(row.Tool), "vendor": ledger.ValidateVendor(row.Vendor), "key": ledger.ValidateKey(row.Key),
		} {
			if err != nil {
				t.Fatalf("NewClaim accepted an invalid %s: %v", name, err)
			}
		}
		fp, err := ledger.Fingerprint(intent)
		if err != nil || fp != row.IntentFingerprint {
			t.Fatalf("row fingerprint %s, Fingerprint(intent) = %s, %v", row.IntentFingerprint, fp, err)
		}
		switch {
		case key == "" && row.Key != ledger.MintKey(tenant, runID, tool, fp):
			t.Fatalf("minted key %s is not MintKey of the request", row.Key)
		case key != "" && row.Key != key:
			t.Fatalf("business key %q became %q", key, row.Key)
		}
		if row.MetadataLocalID != ledger.LocalID(tenant, row.Key, key == "") || len(row.MetadataLocalID) != 35 {
			t.Fatalf("local id %q", row.MetadataLocalID)
		}
		if row.Status != ledger.StatusPending || row.Attempt != 1 || !row.ToolClass.Valid() {
			t.Fatalf("new row status %s attempt %d class %s", row.Status, row.Attempt, row.ToolClass)
		}
		if row.Expect != nil && (row.Expect.Amount < 0 || row.Expect.Currency != strings.ToLower(row.Expect.Currency)) {
			t.Fatalf("expect %+v", row.Expect)
		}
		b, err := json.Marshal(row)
		if err != nil {
			t.Fatalf("an accepted claim's row cannot be stored: %v", err)
		}
		var back ledger.Row
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("stored row does not load: %v", err)
		}
		res, write, err := ledger.DecideClaim(nil, c, ledger.DefaultPolicy())
		switch {
		case err != nil:
			t.Fatalf("DecideClaim(new key): %v", err)
		case frozen && (res.Decision != ledger.DecisionStop || write != nil):
			t.Fatalf("frozen new key: %s, write %v", res.Decision, write)
		case !frozen && (res.Decision != ledger.DecisionProceed || write == nil):
			t.Fatalf("new key: %s, write %v", res.Decision, write)
		}
	})
}

func FuzzClassify(f *testing.F) {
	for _, s := range []int{0, 100, 200, 204, 302, 400, 402, 408, 409, 422, 429, 500, 503, 599, 600} {
		f.Add(string(ledger.OutcomeResponse), s, "pi_1", "Stripe-Should-Retry", "false", "idempotent-replayed", "true")
		f.Add(string(ledger.OutcomeResponse), s, "", "stripe-should-retry", "true", "X", "y")
	}
	f.Add(string(ledger.OutcomeTimeout), 0, "", "", "", "", "")
	f.Add(string(ledger.OutcomeNetworkError), 0, "", "STRIPE-SHOULD-RETRY", "False", "", "")
	f.Fuzz(func(t *testing.T, kind string, status int, receipt, h1, v1, h2, v2 string) {
		o := ledger.Outcome{Kind: ledger.OutcomeKind(kind), HTTPStatus: status, ReceiptID: receipt, At: t0}
		if h1 != "" || h2 != "" {
			o.Headers = map[string]string{h1: v1, h2: v2}
		}
		ev := ledger.Classify(o)
		if again := ledger.Classify(o); again.Status != ev.Status || deref(again.ShouldRetry) != deref(ev.ShouldRetry) || again.Replayed != ev.Replayed {
			t.Fatalf("Classify is not deterministic: %+v then %+v", ev, again)
		}
		if ev.Source != ledger.SourceRuntime || ev.HTTPStatus != status || ev.ReceiptID != receipt {
			t.Fatalf("Classify = %+v", ev)
		}
		if o.Validate() != nil {
			return
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("a valid outcome classified into invalid evidence: %v", err)
		}
		switch {
		case o.Kind != ledger.OutcomeResponse || status >= 500 || status == 408 || status < 200 || status >= 300 && status < 400:
			if ev.Status != ledger.StatusUnknown {
				t.Fatalf("Classify(%+v) = %q, want unknown", o, ev.Status)
			}
		case status < 300:
			if ev.Status != ledger.StatusSucceeded {
				t.Fatalf("Classify(%+v) = %q, want succeeded", o, ev.Status)
			}
		case ev.Status == "":
			if status != 409 && status != 429 || ev.ShouldRetry == nil || !*ev.ShouldRetry {
				t.Fatalf("Classify(%+v) keeps a %d pending with should_retry %v", o, status, deref(ev.ShouldRetry))
			}
		case ev.Status == ledger.StatusSucceeded:
			if status != 409 || receipt == "" {
				t.Fatalf("Classify(%+v) = succeeded for a %d", o, status)
			}
		case ev.Status != ledger.StatusFailedPoison:
			t.Fatalf("Classify(%+v) = %q for a 4xx", o, ev.Status)
		}
		// Runtime evidence applies to any row that was granted a call
		// without an error; an open row at attempt 0 (never granted one)
		// refuses it.
		for _, s := range allStatuses {
			row := ledger.Row{Key: "k", Status: s, Attempt: 1, Expect: &ledger.Expect{Amount: 1, Currency: "usd"}}
			if _, err := ledger.Apply(&row, ev, ledger.DefaultPolicy()); err != nil {
				t.Fatalf("Apply(%s row, %+v): %v", s, ev, err)
			}
			ungranted := ledger.Row{Key: "k", Status: s}
			before := ungranted.Clone()
			_, err := ledger.Apply(&ungranted, ev, ledger.DefaultPolicy())
			if s.Open() != errors.Is(err, ledger.ErrInvalidTransition) || (err != nil && !reflect.DeepEqual(ungranted, before)) {
				t.Fatalf("Apply(%s row at attempt 0, %+v) = %v (row %+v)", s, ev, err, ungranted)
			}
		}
	})
}

func FuzzOutcomeValidate(f *testing.F) {
	f.Add("response", 200, "pi_1", []byte("Stripe-Should-Retry\x00false\x00Idempotent-Replayed\x00true"))
	f.Add("timeout", 0, "", []byte("a\x00b\x00A\x00c"))
	f.Add("network_error", 500, "x y", []byte(nil))
	f.Add("", 99, strings.Repeat("r", 256), []byte("\x00"))
	f.Fuzz(func(t *testing.T, kind string, status int, receipt string, headers []byte) {
		o := ledger.Outcome{Kind: ledger.OutcomeKind(kind), HTTPStatus: status, ReceiptID: receipt}
		// headers is name\0value\0name\0value…
		parts := strings.Split(string(headers), "\x00")
		if len(headers) > 0 {
			o.Headers = map[string]string{}
			for i := 0; i+1 < len(parts); i += 2 {
				o.Headers[parts[i]] = parts[i+1]
			}
		}
		err := o.Validate()
		if err != nil {
			if !errors.Is(err, ledger.ErrInvalidOutcome) {
				t.Fatalf("Validate = %v, want ErrInvalidOutcome", err)
			}
			return
		}
		switch o.Kind {
		case ledger.OutcomeResponse:
			if status < 100 || status > 599 {
				t.Fatalf("Validate accepted a response with status %d", status)
			}
		case ledger.OutcomeTimeout, ledger.OutcomeNetworkError:
			if status != 0 {
				t.Fatalf("Validate accepted %s with status %d", o.Kind, status)
			}
		default:
			t.Fatalf("Validate accepted kind %q", kind)
		}
		if ledger.ValidateKey(receipt) != nil && receipt != "" {
			t.Fatalf("Validate accepted receipt %q", receipt)
		}
		if len(o.Headers) > 64 {
			t.Fatalf("Validate accepted %d headers", len(o.Headers))
		}
	})
}
