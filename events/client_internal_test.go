package events

import (
	"strings"
	"testing"
)

// TestRedactURLs: no token, user or password of a NATS URL reaches a log
// line, in a single URL or a cluster list.
func TestRedactURLs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://s3cr3t-token@127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://alice:pa55word@nats-1:4222,nats://tok3n@nats-2:4222", "nats://nats-1:4222,nats://nats-2:4222"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"", ""},
	} {
		got := redactURLs(tc.in)
		if got != tc.want {
			t.Errorf("redactURLs(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"s3cr3t", "pa55word", "tok3n", "alice"} {
			if strings.Contains(got, secret) {
				t.Errorf("redactURLs(%q) = %q keeps %q", tc.in, got, secret)
			}
		}
	}
}
