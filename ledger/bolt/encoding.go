package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// Bucket names. The layout is part of the file format: changing a key or
// value shape means a new schemaVersion.
var (
	bucketRows        = []byte("rows_seq")      // be64(seq) (bucket.NextSequence) → {"v":1,"row":{…}}
	bucketLocalIDs    = []byte("local_ids")     // metadata_local_id → be64(seq) ‖ tenant \x00 key (unique)
	bucketKeys        = []byte("keys")          // key \x00 tenant → be64(seq) (business keys: joins on an echoed key, finds the row)
	bucketDue         = []byte("due")           // be64(next_check_at) ‖ tenant \x00 key → empty; open rows only
	bucketByTime      = []byte("by_time")       // tenant \x00 be64(first_seen_at) ‖ key → empty
	bucketOutbox      = []byte("outbox")        // be64(seq) → JSON ledger.Event
	bucketInbox       = []byte("inbox")         // vendor \x00 event id → JSON ledger.InboxRecord
	bucketInboxByTime = []byte("inbox_by_time") // be64(first_seen) ‖ vendor \x00 event id → empty
	bucketOrphans     = []byte("orphans")       // local id \x00 vendor \x00 event id → JSON ledger.Delivery
	bucketMeta        = []byte("meta")          // schema_version → decimal
	bucketFreezes     = []byte("freezes")       // tenant \x00 target → {"v":1,"freeze":{…}} (freeze.go)
	bucketTools       = []byte("tools")         // tenant \x00 name → {"v":1,"tool":{…}} (tools.go)
	// The approval gate's indexes, kept by PutRow (approvals.go).
	bucketApprovals         = []byte("approvals")           // approval id → tenant \x00 key
	bucketApprovalsDue      = []byte("approvals_due")       // be64(expires_at) ‖ tenant \x00 key → empty; open approvals only
	bucketApprovalsByTenant = []byte("approvals_by_tenant") // tenant \x00 be64(expires_at) ‖ key → empty; open approvals only
	// Retention's indexes, kept by PutRow (retention.go).
	bucketSettled       = []byte("settled")       // be64(settled_at) ‖ tenant \x00 key → empty; settled rows only
	bucketCompensations = []byte("compensations") // tenant \x00 original \x00 key → empty; open compensations only
	// The Idempotency-Key records (idempotency.go).
	bucketIdempotency       = []byte("idempotency")         // scope \x00 key hash → ledger.IdempotencyRecord, binary (idempotency.go)
	bucketIdempotencyByTime = []byte("idempotency_by_time") // be64(at) ‖ scope \x00 key hash → empty (a rewritten record may leave an older entry)
)

// bucketRowsV2 is the rows bucket of schema 2 and older (tenant \x00 key →
// row, hash-ordered). Open migrates it into bucketRows (migrate.go) and
// deletes it; it stays at index 0 of allBuckets because the write-ahead
// log's records name buckets by index, and a log left by a schema-2 build
// is replayed into the old layout before the migration.
var bucketRowsV2 = []byte("rows")

// allBuckets is an array, so a transaction's handle cache can be sized by
// it. Open creates any bucket a file lacks (but bucketRowsV2): adding one
// (freezes) needs no new schemaVersion, and an older build ignores it.
// The order is part of the log's format: new buckets go at the end.
var allBuckets = [...][]byte{
	bucketRowsV2, bucketLocalIDs, bucketKeys, bucketDue, bucketByTime,
	bucketOutbox, bucketInbox, bucketInboxByTime, bucketOrphans, bucketMeta,
	bucketFreezes, bucketTools, bucketApprovals, bucketApprovalsDue, bucketApprovalsByTenant,
	bucketSettled, bucketCompensations,
	bucketIdempotency, bucketIdempotencyByTime,
	bucketJournal, bucketRevoked,
	bucketRows,
}

// metaSchemaVersion is the meta key holding the file's schema version.
var metaSchemaVersion = []byte("schema_version")

// schemaVersion is the layout this build writes. A file with a higher
// version was written by a newer build whose layout this one cannot know, so
// Open refuses it rather than corrupt it.
//
// Version 2 added the approval gate: rows with an approval, kept in step
// with the approvals buckets. An older build would rewrite such a row
// without its approval (and its attempt-0 gate) and skip the indexes, so
// it must refuse the file; Open upgrades a version-1 file in place (it
// holds no approvals, so the new buckets start empty and consistent).
//
// Version 3 keys rows by sequence (bucketRows: inserts append instead of
// dirtying a random hash-ordered page) and finds them through local_ids
// and keys, whose values now carry the sequence. Open migrates an older
// file in chunks (migrate.go), stamping 3 before the first chunk so that
// an older build never opens a half-migrated file.
const schemaVersion = 3

// rowVersion is the version of the JSON envelope of one row.
const rowVersion = 1

// sep separates the parts of a compound key. Tenants, keys, vendors, local
// ids and event ids are all validated printable ASCII, so it cannot occur
// inside a part and prefix scans are unambiguous.
const sep = 0x00

// storedRow is the versioned envelope of a row value.
type storedRow struct {
	V   int        `json:"v"`
	Row ledger.Row `json:"row"`
}

func encodeRow(r ledger.Row) ([]byte, error) {
	b, err := marshal(storedRow{V: rowVersion, Row: r})
	if err != nil {
		// Only a request body that is not valid JSON can fail to encode.
		return nil, fmt.Errorf("%w: encode row: %v", ledger.ErrInvalidRequest, err)
	}
	return b, nil
}

// decodeRow decodes a stored row. The decoder copies every string and
// json.RawMessage it produces, so the result does not alias v (which bbolt
// owns and reuses once the transaction ends).
func decodeRow(v []byte) (ledger.Row, error) {
	var s storedRow
	if err := unmarshal(v, &s); err != nil {
		return ledger.Row{}, fmt.Errorf("decode row: %w", err)
	}
	if s.V != rowVersion {
		return ledger.Row{}, fmt.Errorf("decode row: unsupported row version %d", s.V)
	}
	return s.Row, nil
}

// join builds a compound key from its parts separated by sep.
func join(parts ...string) []byte {
	n := len(parts) - 1
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, sep)
		}
		b = append(b, p...)
	}
	return b
}

// rowKey is tenant \x00 key: what every index but local_ids and keys holds
// of a row (they resolve through those), and the tail of local_ids' value.
func rowKey(tenant, key string) []byte { return join(tenant, key) }

// splitRowKey splits tenant \x00 key.
func splitRowKey(k []byte) (tenant, key string, ok bool) {
	i := bytes.IndexByte(k, sep)
	if i < 0 {
		return "", "", false
	}
	return string(k[:i]), string(k[i+1:]), true
}

// timeKey encodes t as 8 big-endian bytes of Unix nanoseconds, so byte
// order is time order. Times before 1970 clamp to 0 and times after 2262
// (the int64 nanosecond range) to the maximum; both are far outside any
// time the ledger stores, and clamping keeps the order total.
func timeKey(t time.Time) uint64 {
	switch {
	case t.Before(minTime):
		return 0
	case t.After(maxTime):
		return math.MaxUint64
	}
	return uint64(t.UnixNano())
}

var (
	minTime = time.Unix(0, 0)
	maxTime = time.Unix(0, math.MaxInt64)
)

func appendUint64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// dueKey is be64(next_check_at) ‖ tenant \x00 key.
func dueKey(r *ledger.Row) []byte {
	b := make([]byte, 0, 8+len(r.Tenant)+1+len(r.Key))
	b = appendUint64(b, timeKey(r.NextCheckAt))
	return append(b, rowKey(r.Tenant, r.Key)...)
}

// byTimeKey is tenant \x00 be64(first_seen_at) ‖ key.
func byTimeKey(r *ledger.Row) []byte {
	b := make([]byte, 0, len(r.Tenant)+1+8+len(r.Key))
	b = append(b, r.Tenant...)
	b = append(b, sep)
	b = appendUint64(b, timeKey(r.FirstSeenAt))
	return append(b, r.Key...)
}

// keysKey is key \x00 tenant.
func keysKey(key, tenant string) []byte { return join(key, tenant) }

func seqKey(seq uint64) []byte { return appendUint64(make([]byte, 0, 8), seq) }

// inboxKey is vendor \x00 event id.
func inboxKey(vendor, eventID string) []byte { return join(vendor, eventID) }

// inboxByTimeKey is be64(first_seen) ‖ vendor \x00 event id.
func inboxByTimeKey(firstSeen time.Time, ik []byte) []byte {
	b := make([]byte, 0, 8+len(ik))
	b = appendUint64(b, timeKey(firstSeen))
	return append(b, ik...)
}

// orphanKey is local id \x00 vendor \x00 event id.
func orphanKey(d ledger.Delivery) []byte { return join(d.LocalID, d.Vendor, d.EventID) }

// orphanPrefix is local id \x00.
func orphanPrefix(localID string) []byte { return append([]byte(localID), sep) }

// cloneBytes copies a slice that bbolt owns.
func cloneBytes(b []byte) []byte { return append([]byte(nil), b...) }
