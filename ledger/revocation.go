package ledger

import (
	"context"
	"time"
)

// Revocations are the console's sign-outs, kept in the store every
// replica shares: a session cookie sealed with a key the replicas share is
// valid at each of them until it expires, unless its id is revoked here.
// Records are kept until the session would have expired anyway; a store
// forgets older ones as it writes new ones.
type Revocations interface {
	// RevokeSession records that session id is signed out; until is when
	// the session would expire (the record is pruned after it). It also
	// forgets records whose until is before now.
	RevokeSession(ctx context.Context, id string, until, now time.Time) error
	// SessionRevoked reports whether id was revoked.
	SessionRevoked(ctx context.Context, id string) (bool, error)
}

// ValidateSessionID checks a session id: 16-128 printable ASCII characters.
func ValidateSessionID(id string) error {
	if !printableASCII(id, 16, 128) {
		return ErrInvalidRequest.With("session id")
	}
	return nil
}
