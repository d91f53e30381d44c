package ledger

import "time"

// Policy holds the timings that the rules need. A store is opened with one
// policy; the per-vendor replay window travels with each claim.
type Policy struct {
	// PendingTTL is the lease of an attempt in flight (default 15 min).
	PendingTTL time.Duration
	// Grace is how long the resolver leaves a row alone after its last attempt (default 60 s).
	Grace time.Duration
}

// DefaultPolicy returns the design's defaults.
func DefaultPolicy() Policy { return Policy{PendingTTL: 15 * time.Minute, Grace: 60 * time.Second} }

func (p Policy) withDefaults() Policy {
	d := DefaultPolicy()
	if p.PendingTTL <= 0 {
		p.PendingTTL = d.PendingTTL
	}
	if p.Grace <= 0 {
		p.Grace = d.Grace
	}
	return p
}
