package console

import (
	"context"
	"testing"
	"time"
)

// testSessions seals with a fixed key and identifies one admin token.
func testSessions(tb testing.TB, key string) *sessions {
	tb.Helper()
	now := func() time.Time { return time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC) }
	ss, err := newSessions(Options{SessionKey: key, SessionTTL: time.Hour, Identify: func(tok string) (Identity, bool) {
		return Identity{Role: "admin", Fingerprint: "fp"}, tok == "admin-token-0123456789"
	}}, now, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return ss
}

// FuzzSessionCookie: a cookie value comes from the browser, so from
// anyone. Whatever it holds, opening it never panics, and only what this
// key sealed opens — alice's sessions, the only ones sealed under it (in
// any fuzzing process): another key's (mallory's) or a forged value never.
func FuzzSessionCookie(f *testing.F) {
	const key = "fuzz-session-key-0123456789abcdef0123"
	ss := testSessions(f, key)
	sealed, _ := ss.create(Identity{Role: "admin"}, "admin-token-0123456789", "alice")
	other, _ := testSessions(f, "another-session-key-0123456789abcdef").create(Identity{Role: "admin"}, "admin-token-0123456789", "mallory")
	for _, s := range []string{sealed, other, "", "AAAA", "not base64!", sealed[:len(sealed)-1], sealed + "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, ok := ss.open(v)
		if !ok {
			return
		}
		if s.actor != "alice" || s.token != "admin-token-0123456789" || s.id.Role != "admin" {
			t.Fatalf("opened %+v", s)
		}
	})
}

// TestSessionOpen: a sealed session opens with its fields, not under
// another key, not past its expiry, and not once its token is unknown.
func TestSessionOpen(t *testing.T) {
	ss := testSessions(t, "open-session-key-0123456789abcdef01234")
	v, s := ss.create(Identity{Role: "admin"}, "admin-token-0123456789", "alice")
	got, ok := ss.open(v)
	if !ok || got.sid != s.sid || got.csrf != s.csrf || got.actor != "alice" || !got.expires.Equal(s.expires.Truncate(time.Second)) {
		t.Fatalf("open: %v %+v, want %+v", ok, got, s)
	}
	if _, ok := testSessions(t, "other-session-key-0123456789abcdef01234").open(v); ok {
		t.Fatal("another key opened the cookie")
	}
	unknown, _ := ss.create(Identity{Role: "admin"}, "a-token-nobody-has-0123", "eve")
	if _, ok := ss.open(unknown); ok {
		t.Fatal("a cookie whose token is no longer known opened")
	}
	now := ss.now
	ss.now = func() time.Time { return s.expires.Add(time.Second) }
	_, ok = ss.open(v)
	ss.now = now
	if ok {
		t.Fatal("an expired cookie opened")
	}
	if err := ss.delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	if _, ok := ss.get(context.Background(), v); ok {
		t.Fatal("a signed-out cookie is still a session")
	}
}
