package webhooks

import (
	"sync"
	"time"
)

// replayCache remembers a value of each accepted delivery (Mailgun's
// signature token) with the hash of its body, for the tolerance: after
// that the timestamp check refuses the delivery anyway. The same value
// with the same body is a redelivery and passes (the inbox answers it as
// a duplicate); with another body it is a signature glued to a forged
// event and is refused. It lives in this process only: replicas do not
// share it (docs/architecture.md §7a).
type replayCache struct {
	mu      sync.Mutex
	ttl     time.Duration
	entries map[string]replayEntry
	// order is the insertion order, for expiry and for the size bound.
	order []string
}

type replayEntry struct {
	body    string
	expires time.Time
}

// maxReplayEntries bounds the cache; past it the oldest entry goes first.
const maxReplayEntries = 1 << 16

func newReplayCache(ttl time.Duration) *replayCache {
	return &replayCache{ttl: ttl, entries: map[string]replayEntry{}}
}

// check records value for body and reports whether that is consistent
// with what was seen before.
func (c *replayCache) check(value, body string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.order) > 0 {
		oldest := c.order[0]
		e, ok := c.entries[oldest]
		if ok && now.Before(e.expires) && len(c.order) < maxReplayEntries {
			break
		}
		if ok && !now.Before(e.expires) || len(c.order) >= maxReplayEntries {
			delete(c.entries, oldest)
		}
		c.order = c.order[1:]
	}
	if e, ok := c.entries[value]; ok {
		return e.body == body
	}
	c.entries[value] = replayEntry{body: body, expires: now.Add(c.ttl)}
	c.order = append(c.order, value)
	return true
}
