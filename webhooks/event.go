package webhooks

import (
	"errors"

	"github.com/agentledger/reconciler/matcher"
)

// Event is a verified vendor event, normalised for matching.
type Event = matcher.Event

// Rejections of a delivery. Each answers 400 and stores nothing.
var (
	// ErrBadSignature: no signature matched any configured secret or key.
	ErrBadSignature = errors.New("bad signature")
	// ErrStale: the signed timestamp is older, or further in the future, than the tolerance.
	ErrStale = errors.New("timestamp outside tolerance")
	// ErrUnparsable: the body or a signature header cannot be parsed.
	ErrUnparsable = errors.New("unparsable")
)
