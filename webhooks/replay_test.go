package webhooks

import (
	"strconv"
	"testing"
	"time"
)

func TestReplayCache(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := newReplayCache(time.Hour)
	steps := []struct {
		name        string
		token, body string
		at          time.Time
		want        bool
	}{
		{"first sight", "tok", "b1", t0, true},
		{"same body again (a redelivery)", "tok", "b1", t0.Add(time.Minute), true},
		{"another body (a replay)", "tok", "b2", t0.Add(2 * time.Minute), false},
		{"another token", "tok2", "b2", t0.Add(2 * time.Minute), true},
		{"after the ttl the token is forgotten", "tok", "b2", t0.Add(2 * time.Hour), true},
	}
	for _, s := range steps {
		if got := c.check(s.token, s.body, s.at); got != s.want {
			t.Fatalf("%s: check = %v, want %v", s.name, got, s.want)
		}
	}
	if len(c.entries) != 1 || len(c.order) != 1 {
		t.Fatalf("expired entries kept: %d entries, %d in order", len(c.entries), len(c.order))
	}
}

func TestReplayCacheBound(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := newReplayCache(time.Hour)
	for i := range maxReplayEntries + 10 {
		c.check("tok"+strconv.Itoa(i), "b", t0)
	}
	if len(c.entries) > maxReplayEntries || len(c.order) > maxReplayEntries {
		t.Fatalf("cache holds %d entries, bound %d", len(c.entries), maxReplayEntries)
	}
	if c.check("tok"+strconv.Itoa(maxReplayEntries+9), "other", t0) {
		t.Fatal("the newest token was evicted")
	}
}
