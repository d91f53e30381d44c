package memstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// Store is an in-memory ledger.Store. The zero value is not usable; call New.
type Store struct {
	// Flows runs the shared ledger flows under the mutex (Claim, Report,
	// Apply, Ingest, Escalate, Reschedule).
	ledger.Flows

	policy ledger.Policy
	notify chan struct{}

	mu     sync.Mutex
	closed bool
	state
}

// state is everything a transaction may change. Every field is guarded by
// Store.mu.
type state struct {
	rows       map[rowID]ledger.Row
	byLocalID  map[string]rowID
	keyTenants map[string][]string    // key → sorted tenants holding it
	due        []dueEntry             // open rows only, by next_check_at
	seen       map[string][]seenEntry // tenant → rows by first_seen_at
	outbox     []ledger.OutboxRecord  // by Seq
	lastSeq    uint64                 // never reused once committed
	inbox      map[inboxID]ledger.InboxRecord
	inboxOrder []inboxEntry
	orphans    map[string][]ledger.Delivery // local id → parked deliveries, oldest first
	approvals  map[string]rowID             // approval id → row (approvals.go)
	open       []approvalEntry              // open approvals by expiry (Row.ApprovalOpen)
	freezes    map[freezeID]ledger.Freeze   // the kill switch (freeze.go); nil until the first put
	tools      map[toolID]ledger.Tool       // the tool registry (tools.go); nil until the first put
	// idempotency holds the Idempotency-Key records (idempotency.go); nil
	// until the first put.
	idempotency map[idempotencyID]ledger.IdempotencyRecord
	// journal holds each row's journal, oldest first (journal.go); revoked
	// the console's sign-outs. Both nil until the first write.
	journal     map[rowID][]ledger.JournalEntry
	lastJournal uint64
	revoked     map[string]time.Time
}

var _ ledger.Store = (*Store)(nil)

// New returns an empty store that applies p.
func New(p ledger.Policy) *Store {
	s := &Store{
		policy: p,
		notify: make(chan struct{}, 1),
		state: state{
			rows:       map[rowID]ledger.Row{},
			byLocalID:  map[string]rowID{},
			keyTenants: map[string][]string{},
			seen:       map[string][]seenEntry{},
			inbox:      map[inboxID]ledger.InboxRecord{},
			orphans:    map[string][]ledger.Delivery{},
			approvals:  map[string]rowID{},
		},
	}
	s.Flows = ledger.Flows{Policy: p, Update: func(ctx context.Context, fn func(ledger.Tx) error) error {
		return s.update(ctx, func(t *tx) error { return fn(t) })
	}}
	return s
}

// Close drops the data; every later call returns ledger.ErrUnavailable.
// Closing twice is not an error.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.state = state{}
	return nil
}

// update runs fn as one transaction: under the lock, with an undo journal
// that rolls back every write when fn fails.
func (s *Store) update(ctx context.Context, fn func(tx *tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ledger.ErrUnavailable
	}
	t := &tx{s: &s.state}
	if err := fn(t); err != nil {
		t.rollback()
		return err
	}
	if t.appended {
		// Coalesced: a full channel already promises the relay a look.
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
	return nil
}

// view runs fn under the lock without a journal; fn must not write.
func (s *Store) view(ctx context.Context, fn func(st *state) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ledger.ErrUnavailable
	}
	return fn(&s.state)
}

// Get implements ledger.Claims.
func (s *Store) Get(ctx context.Context, tenant, key string) (ledger.Row, error) {
	var row ledger.Row
	err := s.view(ctx, func(st *state) error {
		r, ok := st.rows[rowID{tenant, key}]
		if !ok {
			return ledger.ErrNotFound
		}
		row = r.Clone()
		return nil
	})
	return row, err
}

// List implements ledger.Claims: it walks the tenant's first_seen index
// backwards from the cursor.
func (s *Store) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	if err := q.Validate(); err != nil {
		return ledger.Page{}, err
	}
	var after *seenEntry
	if q.Cursor != "" {
		at, key, err := ledger.DecodeListCursor(q.Tenant, q.Cursor)
		if err != nil {
			return ledger.Page{}, err
		}
		after = &seenEntry{at: at, key: key}
	}
	var page ledger.Page
	err := s.view(ctx, func(st *state) error {
		idx := st.seen[q.Tenant]
		i := len(idx)
		if after != nil {
			i, _ = slices.BinarySearchFunc(idx, *after, compareSeen)
		}
		for i--; i >= 0; i-- {
			r := st.rows[rowID{q.Tenant, idx[i].key}]
			if q.Status != "" && r.Status != q.Status || q.RunID != "" && r.RunID != q.RunID {
				continue
			}
			if len(page.Rows) == q.Limit {
				// One more match exists, so this page is not the last.
				last := page.Rows[len(page.Rows)-1]
				page.NextCursor = ledger.EncodeListCursor(q.Tenant, last.FirstSeenAt, last.Key)
				break
			}
			page.Rows = append(page.Rows, r.Clone())
		}
		return nil
	})
	if err != nil {
		return ledger.Page{}, err
	}
	return page, nil
}

// PruneInbox implements ledger.Resolutions: it walks the inbox's time
// order from the oldest entry and stops at the first one it keeps.
func (s *Store) PruneInbox(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	err := s.update(ctx, func(t *tx) error {
		st := t.s
		for n < len(st.inboxOrder) && st.inboxOrder[n].at.Before(cutoff) {
			delete(st.inbox, st.inboxOrder[n].id)
			n++
		}
		// Not journalled: nothing after this point can fail.
		st.inboxOrder = st.inboxOrder[n:]
		return nil
	})
	return n, err
}

// Due implements ledger.Schedule.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]ledger.Row, error) {
	var rows []ledger.Row
	err := s.view(ctx, func(st *state) error {
		for _, e := range st.due {
			if len(rows) >= limit || e.at.After(now) {
				break
			}
			rows = append(rows, st.rows[e.id].Clone())
		}
		return nil
	})
	return rows, err
}

// PendingEvents implements ledger.Outbox.
func (s *Store) PendingEvents(ctx context.Context, limit int) ([]ledger.OutboxRecord, error) {
	var recs []ledger.OutboxRecord
	err := s.view(ctx, func(st *state) error {
		n := min(max(limit, 0), len(st.outbox))
		recs = slices.Clone(st.outbox[:n])
		return nil
	})
	return recs, err
}

// EventsAfter implements ledger.Outbox.
func (s *Store) EventsAfter(ctx context.Context, after uint64, limit int) ([]ledger.OutboxRecord, error) {
	var recs []ledger.OutboxRecord
	err := s.view(ctx, func(st *state) error {
		i, _ := slices.BinarySearchFunc(st.outbox, after+1, func(r ledger.OutboxRecord, seq uint64) int {
			return compareUint(r.Seq, seq)
		})
		n := min(max(limit, 0), len(st.outbox)-i)
		recs = slices.Clone(st.outbox[i : i+n])
		return nil
	})
	return recs, err
}

// CountEvents implements ledger.Outbox.
func (s *Store) CountEvents(ctx context.Context) (int, error) {
	var n int
	err := s.view(ctx, func(st *state) error {
		n = len(st.outbox)
		return nil
	})
	return n, err
}

// AckEvents implements ledger.Outbox.
func (s *Store) AckEvents(ctx context.Context, seqs ...uint64) error {
	return s.update(ctx, func(t *tx) error {
		st := t.s
		for _, seq := range seqs {
			i, found := slices.BinarySearchFunc(st.outbox, seq, func(r ledger.OutboxRecord, seq uint64) int {
				return compareUint(r.Seq, seq)
			})
			if found {
				st.outbox = slices.Delete(st.outbox, i, i+1)
			}
		}
		return nil
	})
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Notify implements ledger.Outbox.
func (s *Store) Notify() <-chan struct{} { return s.notify }
