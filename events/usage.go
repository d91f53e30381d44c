package events

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// NearFull is the share of its max_bytes past which a stream counts as
// near its limit (StreamUsage.NearFull): /readyz says degraded, so an
// operator raises the limit or finds the stuck consumer before the relay
// has to hold events in the outbox.
const NearFull = 0.9

// StreamUsage is how much of its byte limit a stream holds.
type StreamUsage struct {
	Stream string
	Bytes  uint64
	// MaxBytes is the stream's limit; 0 or less: none.
	MaxBytes int64
}

// Fill is Bytes over MaxBytes (0 for an unbounded stream).
func (u StreamUsage) Fill() float64 {
	if u.MaxBytes <= 0 {
		return 0
	}
	return float64(u.Bytes) / float64(u.MaxBytes)
}

// NearFull reports whether the stream holds NearFull of its limit or more.
func (u StreamUsage) NearFull() bool { return u.Fill() >= NearFull }

func (u StreamUsage) String() string {
	return fmt.Sprintf("stream %s holds %d of its %d max bytes (%.0f%%)", u.Stream, u.Bytes, u.MaxBytes, 100*u.Fill())
}

// ReadStreamUsage reads the usage of each stream named.
func ReadStreamUsage(ctx context.Context, js jetstream.JetStream, streams ...string) ([]StreamUsage, error) {
	out := make([]StreamUsage, 0, len(streams))
	for _, name := range streams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		info := st.CachedInfo()
		out = append(out, StreamUsage{Stream: name, Bytes: info.State.Bytes, MaxBytes: info.Config.MaxBytes})
	}
	return out, nil
}
