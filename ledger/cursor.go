package ledger

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"
)

// listCursorVersion starts every List cursor, so the format can change.
// Version 1 was per store; a version-1 cursor is refused like any other
// unknown string, and the caller starts the listing again.
const listCursorVersion = 2

// EncodeListCursor makes the opaque cursor of a List page whose last row
// is (firstSeen, key): a version byte, firstSeen in Unix nanoseconds (8
// bytes, big-endian), the key, and a 4-byte checksum over the tenant and
// that position, base64url-encoded. Every store uses it, so a cursor means
// the same position whichever store served the page. The checksum is no
// secret — a cursor only positions a walk inside the caller's own tenant —
// it lets List refuse a made-up or damaged cursor, or another tenant's,
// instead of guessing.
func EncodeListCursor(tenant string, firstSeen time.Time, key string) string {
	pos := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(key)), uint64(firstSeen.UnixNano()))
	pos = append(pos, key...)
	b := append([]byte{listCursorVersion}, pos...)
	b = append(b, listCursorSum(tenant, pos)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeListCursor returns the position EncodeListCursor put in cursor for
// the same tenant. Anything else is ErrInvalidListQuery.
func DecodeListCursor(tenant, cursor string) (time.Time, string, error) {
	at, key, err := decodeListPosition(tenant, cursor)
	if err != nil || ValidateKey(key) != nil {
		return time.Time{}, "", ErrInvalidListQuery.With("cursor")
	}
	return at, key, nil
}

// maxCursorPos bounds the text part of a cursor's position: a key, or a
// tenant, a separator and a key (EncodeApprovalCursor).
const maxCursorPos = MaxIDLen + 1 + MaxKeyLen

// decodeListPosition checks cursor's version and checksum for scope (a
// tenant, or another cursor's scope) and returns its time and text.
func decodeListPosition(scope, cursor string) (time.Time, string, error) {
	bad := ErrInvalidListQuery.With("cursor")
	if len(cursor) > base64.RawURLEncoding.EncodedLen(1+8+maxCursorPos+4) {
		return time.Time{}, "", bad
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < 1+8+1+4 || b[0] != listCursorVersion {
		return time.Time{}, "", bad
	}
	pos, sum := b[1:len(b)-4], b[len(b)-4:]
	if string(sum) != string(listCursorSum(scope, pos)) {
		return time.Time{}, "", bad
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(pos[:8]))).UTC(), string(pos[8:]), nil
}

func listCursorSum(tenant string, pos []byte) []byte {
	h := sha256.New()
	h.Write([]byte("reconciler list cursor\x00"))
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write(pos)
	return h.Sum(nil)[:4]
}
