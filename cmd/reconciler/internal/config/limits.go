package config

import (
	"fmt"
	"strings"

	"github.com/agentledger/reconciler/events"
)

// Defaults of the streams' bounds (events.max_bytes, events.max_msg_size,
// events.discard): a tenant that floods the bus, or a stuck consumer, fills
// a stream to a known size instead of the disk, and a full stream refuses
// new events, which wait in the outbox (discard new).
const (
	DefaultStreamMaxBytes   ByteSize = 1 << 30 // each of the two streams
	DefaultStreamMaxMsgSize ByteSize = 1 << 20 // nats-server's default max_payload
	// maxStreamMsgSize is the most JetStream takes (an int32 of bytes).
	maxStreamMsgSize ByteSize = 1<<31 - 1
)

// Discard is events.discard: what the events stream does when full. "new"
// refuses the new event (the relay keeps it in the outbox until there is
// room: nothing acknowledged is lost); "old" drops the oldest events. The
// work stream always refuses new items.
type Discard string

// UnmarshalText reads new or old.
func (d *Discard) UnmarshalText(text []byte) error {
	switch v := strings.TrimSpace(string(text)); v {
	case "new", "old":
		*d = Discard(v)
		return nil
	default:
		return fmt.Errorf("bad discard %q: want new (a full stream refuses events, which wait in the outbox) or old (it drops its oldest)", v)
	}
}

// MarshalText writes the policy.
func (d Discard) MarshalText() ([]byte, error) { return []byte(d), nil }

// streamLimits checks events.max_bytes and events.max_msg_size.
func (v *validator) streamLimits(e EventsConfig) {
	if e.MaxBytes <= 0 {
		v.add("events.max_bytes", "must be more than 0 (a stream without a bound fills the disk), got %s", e.MaxBytes)
	}
	switch {
	case e.MaxMsgSize <= 0 || e.MaxMsgSize > maxStreamMsgSize:
		v.add("events.max_msg_size", "must be between 1B and %s, got %s", maxStreamMsgSize, e.MaxMsgSize)
	case e.MaxBytes > 0 && e.MaxMsgSize > e.MaxBytes:
		v.add("events.max_msg_size", "%s is more than events.max_bytes %s", e.MaxMsgSize, e.MaxBytes)
	}
}

// StreamLimits are the events stream's bounds.
func (e EventsConfig) StreamLimits() events.StreamLimits {
	return events.StreamLimits{MaxBytes: int64(e.MaxBytes), MaxMsgSize: int32(min(e.MaxMsgSize, maxStreamMsgSize)), DiscardOld: e.Discard == "old"}
}
