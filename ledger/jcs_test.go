package ledger_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/gowebpki/jcs"

	"github.com/agentledger/reconciler/ledger"
)

// jcsVector is one testdata/jcs/NAME.json input and its NAME.canon output.
type jcsVector struct {
	name      string
	in, canon []byte
}

func loadJCSVectors(tb testing.TB) []jcsVector {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "jcs", "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(paths) < 10 {
		tb.Fatalf("found %d JCS vectors in testdata/jcs, want at least 10", len(paths))
	}
	var vs []jcsVector
	for _, p := range paths {
		in, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		canon, err := os.ReadFile(strings.TrimSuffix(p, ".json") + ".canon")
		if err != nil {
			tb.Fatalf("vector %s has no .canon file: %v", p, err)
		}
		vs = append(vs, jcsVector{name: strings.TrimSuffix(filepath.Base(p), ".json"), in: in, canon: canon})
	}
	return vs
}

// loadJCSRejects returns testdata/jcs/reject/*.json by name.
func loadJCSRejects(tb testing.TB) map[string][]byte {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "jcs", "reject", "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(paths) < 20 {
		tb.Fatalf("found %d rejection vectors, want at least 20", len(paths))
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = b
	}
	return out
}

func TestCanonicalizeVectors(t *testing.T) {
	for _, v := range loadJCSVectors(t) {
		t.Run(v.name, func(t *testing.T) {
			got, err := ledger.Canonicalize(v.in)
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if !bytes.Equal(got, v.canon) {
				t.Fatalf("Canonicalize:\n got %q\nwant %q", got, v.canon)
			}
			again, err := ledger.Canonicalize(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("Canonicalize(canonical) = %q, %v; want it unchanged", again, err)
			}
			ref, err := jcs.Transform(v.in)
			if err != nil {
				t.Fatalf("gowebpki/jcs rejects a vector we accept: %v", err)
			}
			if !bytes.Equal(ref, v.canon) {
				t.Fatalf("gowebpki/jcs disagrees with the vector:\n got %q\nwant %q", ref, v.canon)
			}
		})
	}
}

func TestFingerprintOfVectorsIsSHA256OfCanon(t *testing.T) {
	for _, v := range loadJCSVectors(t) {
		if !bytes.HasPrefix(bytes.TrimLeft(v.in, " \t\r\n"), []byte("{")) {
			continue // not an intent
		}
		t.Run(v.name, func(t *testing.T) {
			got, err := ledger.Fingerprint(v.in)
			if err != nil {
				t.Fatalf("Fingerprint: %v", err)
			}
			sum := sha256.Sum256(v.canon)
			if want := hex.EncodeToString(sum[:]); got != want {
				t.Fatalf("Fingerprint = %s, want %s", got, want)
			}
		})
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	for name, in := range loadJCSRejects(t) {
		t.Run(name, func(t *testing.T) {
			fp, err := ledger.Fingerprint(in)
			if !errors.Is(err, ledger.ErrInvalidIntent) {
				t.Fatalf("Fingerprint = %q, %v; want ErrInvalidIntent", fp, err)
			}
			if !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("errors.Is(%v, ErrInvalid) = false, want true", err)
			}
			if strings.HasPrefix(name, "nonobject_") {
				return // valid JSON, just not an object: only Fingerprint refuses it
			}
			got, err := ledger.Canonicalize(in)
			if err == nil {
				t.Fatalf("Canonicalize = %s, nil; want an error", short(got))
			}
			if strings.HasPrefix(name, "depth_") {
				return // gowebpki/jcs allows 10000 levels; ours is the tighter intent bound
			}
			if ref, err := jcs.Transform(in); err == nil {
				t.Fatalf("gowebpki/jcs accepts what we reject: %q", short(ref))
			}
		})
	}
}

// TestCanonicalizeNumbersRFC8785 is the table of RFC 8785 Appendix B: IEEE
// 754 bit patterns and their ECMAScript serialization. NaN and Infinity have
// no JSON form, so they are left out.
func TestCanonicalizeNumbersRFC8785(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%016x", tt.bits), func(t *testing.T) {
			f := math.Float64frombits(tt.bits)
			// Feed both the Go shortest form and a 17-digit form: the
			// canonical output must not depend on how the input spelled it.
			for _, lit := range []string{strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'e', 16, 64)} {
				got, err := ledger.Canonicalize([]byte(lit))
				if err != nil {
					t.Fatalf("Canonicalize(%s): %v", lit, err)
				}
				if string(got) != tt.want {
					t.Fatalf("Canonicalize(%s) = %s, want %s", lit, got, tt.want)
				}
			}
		})
	}
}

// TestCanonicalizeNumbersAgreeWithReference formats random doubles from
// every binade with both implementations.
func TestCanonicalizeNumbersAgreeWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		lit := []byte(strconv.FormatFloat(f, 'g', -1, 64))
		got, err := ledger.Canonicalize(lit)
		if err != nil {
			t.Fatalf("Canonicalize(%s): %v", lit, err)
		}
		want, err := jcs.Transform(lit)
		if err != nil {
			t.Fatalf("jcs.Transform(%s): %v", lit, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Canonicalize(%s) = %s, gowebpki/jcs says %s", lit, got, want)
		}
		back, err := strconv.ParseFloat(string(got), 64)
		if err != nil || back != f && !(f == 0 && back == 0) {
			t.Fatalf("Canonicalize(%s) = %s, which parses back as %v (%v)", lit, got, back, err)
		}
	}
}

func TestCanonicalizeControlCharacterEscapes(t *testing.T) {
	short := map[rune]string{'\b': `\b`, '\t': `\t`, '\n': `\n`, '\f': `\f`, '\r': `\r`}
	for r := rune(0); r < 0x20; r++ {
		want, ok := short[r]
		if !ok {
			want = fmt.Sprintf(`\u%04x`, r) // lower-case hex
		}
		t.Run(fmt.Sprintf("U+%04X", r), func(t *testing.T) {
			in := fmt.Sprintf(`{"k":"a\u%04Xb"}`, r) // upper-case hex on input
			got, err := ledger.Canonicalize([]byte(in))
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", in, err)
			}
			if want := `{"k":"a` + want + `b"}`; string(got) != want {
				t.Fatalf("Canonicalize(%s) = %s, want %s", in, got, want)
			}
		})
	}
	t.Run("printable characters are never escaped", func(t *testing.T) {
		for _, r := range []rune{0x7f, '/', '<', '>', '&', '\'', 0x80, 0x2028, 0x2029, 0xfeff, 0x1f600} {
			in := jsonQuote(string(r))
			got, err := ledger.Canonicalize([]byte(in))
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", in, err)
			}
			if want := `"` + string(r) + `"`; string(got) != want {
				t.Fatalf("Canonicalize(%s) = %q, want %q", in, got, want)
			}
		}
	})
}

// short trims b for a failure message.
func short(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%q… (%d bytes)", b[:200], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// jsonQuote writes s with every rune as a \u escape (surrogate pairs above
// the BMP), so the test input never carries the raw character.
func jsonQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, u := range utf16.Encode([]rune(s)) {
		fmt.Fprintf(&b, `\u%04x`, u)
	}
	b.WriteByte('"')
	return b.String()
}

// TestCanonicalizeKeyOrderUTF16 builds objects from random keys, many above
// the BMP, and checks the member order against a sort by UTF-16 code units
// (RFC 8785 §3.2.3), which differs from Go's byte order for such keys.
func TestCanonicalizeKeyOrderUTF16(t *testing.T) {
	alphabet := []rune{'a', 'B', '1', 0xe9, 0x20ac, 0xe000, 0xfb33, 0xffff, 0x10000, 0x1f600, 0x1f602, 0x10ffff}
	rng := rand.New(rand.NewPCG(3, 4))
	byteOrderDiffered := false
	for i := 0; i < 300; i++ {
		seen := map[string]bool{}
		var keys []string
		for n := 1 + rng.IntN(6); len(keys) < n; {
			var k []rune
			for l := rng.IntN(3); l >= 0; l-- {
				k = append(k, alphabet[rng.IntN(len(alphabet))])
			}
			if !seen[string(k)] {
				seen[string(k)] = true
				keys = append(keys, string(k))
			}
		}
		var in strings.Builder
		in.WriteByte('{')
		for j, k := range keys {
			if j > 0 {
				in.WriteByte(',')
			}
			q := jsonQuote(k)
			fmt.Fprintf(&in, "%s:%d", q, j)
		}
		in.WriteByte('}')

		want := slices.Clone(keys)
		slices.SortFunc(want, func(a, b string) int {
			return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		})
		if !slices.IsSorted(want) {
			byteOrderDiffered = true
		}
		var wantOut strings.Builder
		wantOut.WriteByte('{')
		for j, k := range want {
			if j > 0 {
				wantOut.WriteByte(',')
			}
			// The alphabet needs no escaping, so the output holds the raw key.
			fmt.Fprintf(&wantOut, "\"%s\":%d", k, slices.Index(keys, k))
		}
		wantOut.WriteByte('}')

		got, err := ledger.Canonicalize([]byte(in.String()))
		if err != nil {
			t.Fatalf("Canonicalize(%s): %v", in.String(), err)
		}
		if string(got) != wantOut.String() {
			t.Fatalf("Canonicalize(%s)\n got %s\nwant %s", in.String(), got, wantOut.String())
		}
	}
	if !byteOrderDiffered {
		t.Fatal("no generated object had a UTF-16 order different from byte order; the test proves nothing")
	}
}

// TestCanonicalizeSurrogateEscapes: a pair of \u escapes is one character; a
// lone surrogate is ill-formed (RFC 8785 §3.2.2.2 requires an error), and
// must not collapse into U+FFFD, or "\ud800", "\udfff" and "\ufffd" would be
// one intent.
func TestCanonicalizeSurrogateEscapes(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr bool
	}{
		{name: "pair", in: `"\ud83d\ude00"`, want: "\"\U0001F600\""},
		{name: "pair upper-case hex", in: `"\uD83D\uDE00"`, want: "\"\U0001F600\""},
		{name: "highest code point", in: `"\udbff\udfff"`, want: "\"\U0010FFFF\""},
		{name: "replacement character itself", in: `"\ufffd"`, want: "\"\uFFFD\""},
		{name: "escaped backslash before u", in: `"\\ud800"`, want: `"\\ud800"`},
		{name: "lone high", in: `"\ud800"`, wantErr: true},
		{name: "lone high at end of key", in: `{"\udbff":1}`, wantErr: true},
		{name: "lone low", in: `"x\udc00"`, wantErr: true},
		{name: "swapped pair", in: `"\ude00\ud83d"`, wantErr: true},
		{name: "high then text", in: `"\ud83dx"`, wantErr: true},
		{name: "high then short escape", in: `"\ud83d\n"`, wantErr: true},
		{name: "two highs", in: `"\ud83d\ud83d"`, wantErr: true},
		{name: "in a nested array", in: `{"a":[["\udfff"]]}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ledger.Canonicalize([]byte(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Canonicalize(%s) = %q, nil; want an error", tt.in, got)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("Canonicalize(%s) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestCanonicalizeNestingBound(t *testing.T) {
	nest := func(n int, inner string) string {
		return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
	}
	tests := []struct {
		name    string
		in      string
		wantErr bool
	}{
		{name: "64 arrays around a number", in: nest(64, "1")},
		{name: "64 empty arrays", in: nest(64, "")},
		{name: "63 arrays around an empty object", in: nest(63, "{}")},
		{name: "65 arrays around a number", in: nest(65, "1"), wantErr: true},
		{name: "65 empty arrays", in: nest(65, ""), wantErr: true},
		{name: "64 arrays around an empty object", in: nest(64, "{}"), wantErr: true},
		{name: "objects count too", in: strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), wantErr: true},
		{name: "100000 arrays fail fast", in: nest(100000, ""), wantErr: true},
		{name: "wide is not deep", in: "[" + strings.Repeat("[[]],", 1000) + "[]]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ledger.Canonicalize([]byte(tt.in))
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("Canonicalize error = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestFingerprintSameIntent: spellings of one intent share a fingerprint,
// and any change to what the intent says changes it.
func TestFingerprintSameIntent(t *testing.T) {
	base := `{"amount":10.5,"currency":"usd","to":"cus_123"}`
	tests := []struct {
		name  string
		other string
		same  bool
	}{
		{name: "trailing zero", other: `{"amount":10.50,"currency":"usd","to":"cus_123"}`, same: true},
		{name: "exponent", other: `{"amount":1.05e1,"currency":"usd","to":"cus_123"}`, same: true},
		{name: "member order", other: `{"to":"cus_123","currency":"usd","amount":10.5}`, same: true},
		{name: "whitespace", other: "{ \"amount\" : 10.5 ,\n\t\"currency\" : \"usd\" , \"to\" : \"cus_123\" }\n", same: true},
		{name: "escaped letters", other: `{"amount":10.5,"currency":"\u0075sd","to":"cus_123"}`, same: true},
		{name: "different amount", other: `{"amount":10.51,"currency":"usd","to":"cus_123"}`},
		{name: "amount as string", other: `{"amount":"10.5","currency":"usd","to":"cus_123"}`},
		{name: "currency case", other: `{"amount":10.5,"currency":"USD","to":"cus_123"}`},
		{name: "extra member", other: `{"amount":10.5,"currency":"usd","to":"cus_123","memo":null}`},
		{name: "missing member", other: `{"amount":10.5,"currency":"usd"}`},
		{name: "wrapped in array", other: `{"amount":[10.5],"currency":"usd","to":"cus_123"}`},
	}
	want, err := ledger.Fingerprint([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ledger.Fingerprint([]byte(tt.other))
			if err != nil {
				t.Fatalf("Fingerprint: %v", err)
			}
			if (got == want) != tt.same {
				t.Fatalf("Fingerprint(%s) = %s, base %s; want same=%v", tt.other, got, want, tt.same)
			}
		})
	}
}
