package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// A webhook's ingest is the ledger's ingest flow in one locked transaction
// (store.go), but its reads are known before it starts: the event id's
// inbox record (and the replay token's, when the delivery has one), then
// the row under the delivery's local id. Each is a lock and a read; run one
// after the other they cost a round trip each, and the writes (row update,
// outbox, inbox, journal, orphan) a last one with the COMMIT. So Ingest
// sends the reads it will make as one pipeline, with the transaction's
// BEGIN, the first time the flow asks for the event's inbox record, in the
// order the flow takes the locks (event id, replay token, local id): the
// server runs each SELECT only once the lock before it is granted, so it
// reads what the flow would have read. The flow's later reads of those
// names are answered from it; any other read goes to the server as usual.
// A known row's delivery is then two round trips (the reads, the COMMIT),
// was three; a duplicate reads the row too, as its journal note does.
//
// Nothing is guessed: every answer is a read made under the lock the flow
// would have taken, in the same transaction, before any write of it. A
// re-run of the transaction (a lost race, a dropped connection) prefetches
// again.

// ingestKey marks a context whose Update prefetches a delivery's reads.
type ingestKey struct{}

// Ingest implements ledger.Store: the ledger's ingest flow, its reads
// pipelined (see above).
func (s *Store) Ingest(ctx context.Context, d ledger.Delivery) (ledger.IngestResult, error) {
	return s.Flows.Ingest(context.WithValue(ctx, ingestKey{}, &d), d)
}

// prefetch is one transaction's pipelined reads of a delivery.
type prefetch struct {
	d    ledger.Delivery
	sent bool
	// inbox holds the records read, by pairName(vendor, event id); each is
	// answered once (a second read of one name goes to the server).
	inbox map[string]inboxRead
	// row is the row read under d.LocalID (nil: not read, or answered).
	row *rowRead
}

type inboxRead struct {
	rec ledger.InboxRecord
	err error // ledger.ErrNotFound when there is none
}

type rowRead struct {
	row ledger.Row
	err error
}

func newPrefetch(d ledger.Delivery) *prefetch { return &prefetch{d: d} }

// readsRow reports whether the flow reads the row under the local id.
func (p *prefetch) readsRow() bool { return p.d.LocalID != "" && !p.d.Ignore }

// replayTokenID is ledger's name of a replay token's inbox record.
func replayTokenID(token string) string { return "replay-token:" + token }

// inboxSQL reads one inbox record.
const inboxSQL = `SELECT first_seen, result FROM inbox WHERE vendor = $1 AND event_id = $2`

// loadPrefetch sends the pipeline: the event id's lock and record, the replay
// token's, the local id's lock and row. An error fails the transaction
// (which the store re-runs when the error says it may).
func (t *pgTx) loadPrefetch() error {
	p := t.pre
	p.sent = true
	names := [][2]string{{p.d.Vendor, p.d.EventID}}
	if p.d.ReplayToken != "" {
		names = append(names, [2]string{p.d.Vendor, replayTokenID(p.d.ReplayToken)})
	}
	b := &pgx.Batch{}
	for _, n := range names {
		queueLock(b, lockInbox, pairName(n[0], n[1]))
		b.Queue(inboxSQL, n[0], n[1])
	}
	if p.readsRow() {
		queueLock(b, lockLocalID, p.d.LocalID)
		b.Queue(`SELECT doc FROM rows WHERE metadata_local_id = $1 FOR UPDATE`, p.d.LocalID)
	}
	br := t.q.SendBatch(t.ctx, b)
	err := p.read(br, names)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = dbErr("prefetch", cerr)
	}
	if err != nil {
		p.inbox, p.row = nil, nil
	}
	return err
}

// read takes the pipeline's answers in order.
func (p *prefetch) read(br pgx.BatchResults, names [][2]string) error {
	p.inbox = make(map[string]inboxRead, len(names))
	for _, n := range names {
		if _, err := br.Exec(); err != nil {
			return dbErr("advisory lock", err)
		}
		var (
			r      inboxRead
			at     time.Time
			result string
		)
		switch err := br.QueryRow().Scan(&at, &result); {
		case errors.Is(err, pgx.ErrNoRows):
			r.err = ledger.ErrNotFound
		case err != nil:
			return dbErr("get inbox", err)
		default:
			r.rec = ledger.InboxRecord{FirstSeen: at.UTC(), Result: ledger.IngestOutcome(result)}
		}
		p.inbox[pairName(n[0], n[1])] = r
	}
	if !p.readsRow() {
		return nil
	}
	if _, err := br.Exec(); err != nil {
		return dbErr("advisory lock", err)
	}
	var doc []byte
	switch err := br.QueryRow().Scan(&doc); {
	case errors.Is(err, pgx.ErrNoRows):
		p.row = &rowRead{err: ledger.ErrNotFound}
	case err != nil:
		return dbErr("row by local id", err)
	default:
		row, err := decodeRow(doc)
		p.row = &rowRead{row: row, err: err}
	}
	return nil
}

// prefetchedInbox answers GetInbox from the pipeline when it holds the
// record (sending the pipeline on the delivery's first read).
func (t *pgTx) prefetchedInbox(vendor, eventID string) (ledger.InboxRecord, bool, error) {
	p := t.pre
	if p == nil || !t.write {
		return ledger.InboxRecord{}, false, nil
	}
	if !p.sent {
		if vendor != p.d.Vendor || eventID != p.d.EventID || len(t.atCommit) > 0 {
			return ledger.InboxRecord{}, false, nil
		}
		if err := t.loadPrefetch(); err != nil {
			return ledger.InboxRecord{}, true, err
		}
	}
	name := pairName(vendor, eventID)
	r, ok := p.inbox[name]
	if !ok {
		return ledger.InboxRecord{}, false, nil
	}
	delete(p.inbox, name)
	return r.rec, true, r.err
}

// prefetchedRow answers RowByLocalID from the pipeline when it read that
// local id's row.
func (t *pgTx) prefetchedRow(localID string) (ledger.Row, bool, error) {
	p := t.pre
	// A write queued since would be flushed before the flow's own read;
	// the ingest flow writes nothing before it, so this only guards.
	if p == nil || p.row == nil || localID != p.d.LocalID || len(t.atCommit) > 0 {
		return ledger.Row{}, false, nil
	}
	r := p.row
	p.row = nil
	return r.row, true, r.err
}
