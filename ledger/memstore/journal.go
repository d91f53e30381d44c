package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The row journal (ledger.JournalTx, ledger.Journals), the complete row
// search (ledger.Finder) and the console's sign-outs (ledger.Revocations).

var (
	_ ledger.JournalTx   = (*tx)(nil)
	_ ledger.Journals    = (*Store)(nil)
	_ ledger.Finder      = (*Store)(nil)
	_ ledger.Revocations = (*Store)(nil)
)

// AppendJournal implements ledger.JournalTx.
func (t *tx) AppendJournal(e ledger.JournalEntry) error {
	if t.s.journal == nil {
		t.s.journal = map[rowID][]ledger.JournalEntry{}
	}
	id := rowID{e.Tenant, e.Key}
	prev, had := t.s.journal[id]
	t.s.lastJournal++
	e.Seq = t.s.lastJournal
	next := append(slices.Clone(prev), e)
	if len(next) > ledger.MaxJournalPerRow {
		next = next[len(next)-ledger.MaxJournalPerRow:]
	}
	t.s.journal[id] = next
	t.undo = append(t.undo, func() {
		if had {
			t.s.journal[id] = prev
		} else {
			delete(t.s.journal, id)
		}
	})
	return nil
}

// RowJournal implements ledger.Journals.
func (s *Store) RowJournal(ctx context.Context, tenant, key string) ([]ledger.JournalEntry, error) {
	var out []ledger.JournalEntry
	err := s.view(ctx, func(st *state) error {
		out = slices.Clone(st.journal[rowID{tenant, key}])
		return nil
	})
	return out, err
}

// FindRows implements ledger.Finder: the local id index, else a scan of
// every row under the lock.
func (s *Store) FindRows(ctx context.Context, q ledger.FindQuery) (ledger.Found, error) {
	if err := q.Validate(); err != nil {
		return ledger.Found{}, err
	}
	var f ledger.Found
	err := s.view(ctx, func(st *state) error {
		if q.LocalID != "" {
			if id, ok := st.byLocalID[q.LocalID]; ok && id.tenant == q.Tenant {
				f.Rows = append(f.Rows, st.rows[id].Clone())
			}
			return nil
		}
		for _, r := range st.rows {
			if q.Match(r) {
				f.Rows = append(f.Rows, r.Clone())
			}
		}
		return nil
	})
	f.Rows = q.Answer(f.Rows)
	return f, err
}

// RevokeSession implements ledger.Revocations.
func (s *Store) RevokeSession(ctx context.Context, id string, until, now time.Time) error {
	if err := ledger.ValidateSessionID(id); err != nil {
		return err
	}
	return s.update(ctx, func(t *tx) error {
		if t.s.revoked == nil {
			t.s.revoked = map[string]time.Time{}
		}
		for k, u := range t.s.revoked {
			if u.Before(now) {
				delete(t.s.revoked, k)
			}
		}
		t.s.revoked[id] = until.UTC()
		return nil // not journalled: nothing after this can fail
	})
}

// SessionRevoked implements ledger.Revocations.
func (s *Store) SessionRevoked(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.view(ctx, func(st *state) error {
		_, ok = st.revoked[id]
		return nil
	})
	return ok, err
}
