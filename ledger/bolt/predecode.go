package bolt

import (
	"bytes"
	"context"

	"github.com/agentledger/reconciler/ledger"
)

// Decoding the row a delivery joins is the largest single cost of a
// webhook in the committer's serial section after the encoding of the
// updated row (decodeRow ~8 µs of RowByLocalID's ~14 µs; BENCHMARKS.md,
// issue 32). Ingest reads and decodes that row in the caller's goroutine,
// in parallel with every other caller, through a read view of the store;
// RowByLocalID uses the decoded row when — and only when — the bytes the
// committer finds under that local id are the very bytes decoded
// (bytes.Equal: decodeRow is a function of the bytes alone). A row written
// in between (a claim's report, another delivery in the same or an earlier
// group) has other bytes and is decoded in the committer as before, so
// what a flow reads never depends on the hint.

// preRead is a joined row read and decoded ahead of the committer. It is
// handed out once: the flow owns the row it is given, and a flow that runs
// again (its group rolled back) or reads the row twice decodes afresh.
type preRead struct {
	localID string
	v       []byte
	row     ledger.Row
	used    bool // the committer's alone once the op is queued
}

type preReadKey struct{}

// Ingest is ledger.Flows.Ingest with the joined row decoded in the
// caller's goroutine (see above).
func (s *Store) Ingest(ctx context.Context, d ledger.Delivery) (ledger.IngestResult, error) {
	if d.LocalID != "" && !d.Ignore {
		if p := s.readAhead(ctx, d.LocalID); p != nil {
			ctx = context.WithValue(ctx, preReadKey{}, p)
		}
	}
	return s.Flows.Ingest(ctx, d)
}

// readAhead reads and decodes the row under localID; nil when there is
// none or anything fails (the committer then reads it, and reports what
// fails, in order).
func (s *Store) readAhead(ctx context.Context, localID string) *preRead {
	var p *preRead
	_ = s.view(ctx, func(tx *boltTx) error {
		seq, _, ok := splitLidValue(tx.bucket(bucketLocalIDs).Get([]byte(localID)))
		if !ok {
			return nil
		}
		v := tx.bucket(bucketRows).Get(seq)
		if v == nil {
			return nil
		}
		row, err := decodeRow(v)
		if err != nil {
			return nil
		}
		// v is the transaction's: keep a copy.
		p = &preRead{localID: localID, v: bytes.Clone(v), row: row}
		return nil
	})
	return p
}

func preReadFrom(ctx context.Context) *preRead {
	p, _ := ctx.Value(preReadKey{}).(*preRead)
	return p
}

// decodeJoined decodes v, the row the committer found under localID: the
// caller's decoding when it read these same bytes, decodeRow otherwise.
func (t *boltTx) decodeJoined(localID string, v []byte) (ledger.Row, error) {
	if p := t.preRead; p != nil && !p.used && p.localID == localID && bytes.Equal(p.v, v) {
		p.used = true
		if t.store != nil {
			t.store.metrics.preDecoded.Add(1)
		}
		return p.row, nil
	}
	return decodeRow(v)
}
