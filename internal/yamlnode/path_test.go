package yamlnode

import "testing"

func TestPaths(t *testing.T) {
	for _, tc := range []struct{ path, key, join, mp string }{
		{"", "resolver", "resolver", "resolver"},
		{"resolver", "interval", "resolver.interval", "resolver.interval"},
		{"event_types.stripe", "payment_intent.succeeded", "event_types.stripe.payment_intent.succeeded", `event_types.stripe["payment_intent.succeeded"]`},
		{"headers", "", "headers.", `headers[""]`},
		{"m", `a"b`, `m.a"b`, `m["a\"b"]`},
	} {
		if got := JoinPath(tc.path, tc.key); got != tc.join {
			t.Errorf("JoinPath(%q, %q) = %q, want %q", tc.path, tc.key, got, tc.join)
		}
		if got := MapPath(tc.path, tc.key); got != tc.mp {
			t.Errorf("MapPath(%q, %q) = %q, want %q", tc.path, tc.key, got, tc.mp)
		}
	}
	if got := Truncate("abcdef", 3); got != "abc…" {
		t.Errorf("Truncate = %q", got)
	}
	if got := Truncate("abc", 3); got != "abc" {
		t.Errorf("Truncate = %q", got)
	}
	// "é" is two bytes: a cut after its first would leave invalid UTF-8.
	if got := Truncate("aéb", 2); got != "a…" {
		t.Errorf("Truncate = %q, want the cut before the split sequence", got)
	}
}
