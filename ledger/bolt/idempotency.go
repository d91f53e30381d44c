package bolt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The Idempotency-Key records (ledger.IdempotencyTx): one value per key,
// filed under scope \x00 key hash, and an index by the record's write time
// so PruneIdempotency walks only what it removes. The flows write them in
// the same transaction (and group commit) as the row.
//
// A record is written on the claim path, so it costs as little as it can:
// a compact binary value (encodeIdempotency) rather than JSON, and no read
// before the write. A record written again (a resend granted a new lease)
// leaves its older by-time entry behind; the prune drops such an entry
// without the record, which its newer entry keeps (idempotencyLive).

var _ ledger.IdempotencyTx = (*boltTx)(nil)

// GetIdempotency implements ledger.IdempotencyTx. The committer runs one
// op at a time, so the read needs no lock.
func (t *boltTx) GetIdempotency(scope, keyHash string) (ledger.IdempotencyRecord, error) {
	v := t.bucket(bucketIdempotency).Get(join(scope, keyHash))
	if v == nil {
		return ledger.IdempotencyRecord{}, ledger.ErrNotFound
	}
	return decodeIdempotency(v)
}

// PutIdempotency implements ledger.IdempotencyTx.
func (t *boltTx) PutIdempotency(scope, keyHash string, rec ledger.IdempotencyRecord) error {
	k := join(scope, keyHash)
	t.writes++
	if err := t.bucket(bucketIdempotency).Put(k, encodeIdempotency(rec)); err != nil {
		return fmt.Errorf("put idempotency record: %w", err)
	}
	if err := t.bucket(bucketIdempotencyByTime).Put(inboxByTimeKey(rec.At, k), nil); err != nil {
		return fmt.Errorf("put idempotency record: %w", err)
	}
	return nil
}

// PruneIdempotency forgets the Idempotency-Key records last written before
// cutoff, pruneChunk index entries per group commit, and returns how many
// records it removed.
func (s *Store) PruneIdempotency(ctx context.Context, cutoff time.Time) (int, error) {
	n, err := s.pruneByTime(ctx, bucketIdempotencyByTime, bucketIdempotency, cutoff, idempotencyLive(cutoff))
	if err != nil {
		return n, fmt.Errorf("prune idempotency records: %w", err)
	}
	return n, nil
}

// idempotencyLive reports whether a record reached through an old by-time
// entry was written again at or after cutoff: the prune then keeps it (its
// newer entry will prune it). A record it cannot decode is not kept.
func idempotencyLive(cutoff time.Time) func(v []byte) bool {
	return func(v []byte) bool {
		rec, err := decodeIdempotency(v)
		return err == nil && !rec.At.Before(cutoff)
	}
}

// The record's value: idemBinary, then a flags byte, then the fields:
//
//	at            int64 Unix nanoseconds, big-endian (8 bytes)
//	pending_until int64 Unix nanoseconds, big-endian (8 bytes; flag idemHasPending)
//	attempt       uvarint
//	request       32 bytes (flag idemRawRequest: a SHA-256 in hex, stored raw),
//	              or as the strings below
//	tenant, key, decision: uvarint length, then the bytes
//
// About 100 bytes for a claim's record where JSON took 280, so more of
// them share a page. A value starting with '{' is the JSON of the build
// that introduced the records, still read.
const (
	idemBinary     = 2
	idemInserted   = 1 << 0
	idemHasPending = 1 << 1
	idemHasAt      = 1 << 2
	idemRawRequest = 1 << 3
)

var errBadIdempotency = errors.New("malformed record")

func encodeIdempotency(rec ledger.IdempotencyRecord) []byte {
	b := make([]byte, 0, 2+8+8+binary.MaxVarintLen64+4*binary.MaxVarintLen16+
		len(rec.Request)+len(rec.Tenant)+len(rec.Key)+len(rec.Decision))
	var flags byte
	if rec.Inserted {
		flags |= idemInserted
	}
	if !rec.PendingUntil.IsZero() {
		flags |= idemHasPending
	}
	if !rec.At.IsZero() {
		flags |= idemHasAt
	}
	var raw [sha256.Size]byte
	if lowerHex(rec.Request) && len(rec.Request) == hex.EncodedLen(len(raw)) {
		var src [2 * sha256.Size]byte // decoded from the stack
		if _, err := hex.Decode(raw[:], src[:copy(src[:], rec.Request)]); err == nil {
			flags |= idemRawRequest
		}
	}
	b = append(b, idemBinary, flags)
	if flags&idemHasAt != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(rec.At.UnixNano()))
	}
	if flags&idemHasPending != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(rec.PendingUntil.UnixNano()))
	}
	b = binary.AppendUvarint(b, uint64(max(rec.Attempt, 0)))
	if flags&idemRawRequest != 0 {
		b = append(b, raw[:]...)
	} else {
		b = binary.AppendUvarint(b, uint64(len(rec.Request)))
		b = append(b, rec.Request...)
	}
	for _, s := range [...]string{rec.Tenant, rec.Key, string(rec.Decision)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// decodeIdempotency decodes a record; its strings are copies (bbolt owns v).
func decodeIdempotency(v []byte) (ledger.IdempotencyRecord, error) {
	var rec ledger.IdempotencyRecord
	if len(v) > 0 && v[0] == '{' {
		if err := unmarshal(v, &rec); err != nil {
			return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", err)
		}
		return rec, nil
	}
	if len(v) < 2 || v[0] != idemBinary {
		return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", errBadIdempotency)
	}
	flags, p := v[1], v[2:]
	nanos := func() (time.Time, bool) {
		if len(p) < 8 {
			return time.Time{}, false
		}
		t := time.Unix(0, int64(binary.BigEndian.Uint64(p))).UTC()
		p = p[8:]
		return t, true
	}
	ok := true
	if flags&idemHasAt != 0 {
		rec.At, ok = nanos()
	}
	if ok && flags&idemHasPending != 0 {
		rec.PendingUntil, ok = nanos()
	}
	rec.Inserted = flags&idemInserted != 0
	attempt, n := binary.Uvarint(p)
	if !ok || n <= 0 || attempt > 1<<31 {
		return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", errBadIdempotency)
	}
	rec.Attempt, p = int(attempt), p[n:]
	var strs [4]string
	first := 0
	if flags&idemRawRequest != 0 {
		if len(p) < sha256.Size {
			return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", errBadIdempotency)
		}
		strs[0], p, first = hex.EncodeToString(p[:sha256.Size]), p[sha256.Size:], 1
	}
	for i := first; i < len(strs); i++ {
		l, n := binary.Uvarint(p)
		if n <= 0 || l > uint64(len(p)-n) {
			return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", errBadIdempotency)
		}
		strs[i], p = string(p[n:n+int(l)]), p[n+int(l):]
	}
	if len(p) != 0 {
		return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", errBadIdempotency)
	}
	rec.Request, rec.Tenant, rec.Key, rec.Decision = strs[0], strs[1], strs[2], ledger.Decision(strs[3])
	return rec, nil
}

// lowerHex reports whether s is lower-case hex (what hex.EncodeToString
// makes, so the raw form decodes back to s).
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
