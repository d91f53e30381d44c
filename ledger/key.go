package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
)

// Fingerprint returns the intent fingerprint: hex SHA-256 of the intent's
// RFC 8785 canonical JSON. The intent must be a JSON object.
func Fingerprint(intent []byte) (string, error) {
	trimmed := bytes.TrimLeft(intent, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return "", ErrInvalidIntent
	}
	canon, err := Canonicalize(intent)
	if err != nil {
		return "", ErrInvalidIntent.With("%v", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// MintKey returns the idempotency key of a business intent:
// hex SHA-256 of tenant \x1f run_id \x1f tool \x1f fingerprint. The unit
// separator cannot occur in a valid tenant, run_id or tool, so no two
// different tuples share a preimage.
func MintKey(tenant, runID, tool, fingerprint string) string {
	h := sha256.New()
	for i, part := range []string{tenant, runID, tool, fingerprint} {
		if i > 0 {
			h.Write([]byte{0x1f})
		}
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// LocalIDPrefix starts every metadata_local_id.
const LocalIDPrefix = "rl_"

// LocalID returns the metadata_local_id of a tenant's key. A key the ledger
// minted already hashes its tenant in, so its local id is "rl_" and the
// first 32 hex characters of the key (docs/architecture.md §4). Any other key —
// a caller's business key, or a compensation key derived from one — is
// hashed with its tenant first, whatever it looks like: two tenants may
// hold the same such key (a business key of 64 hex characters, the
// compensation of a shared business key) without colliding on the global
// local id index, and a key that may carry customer data never reaches
// vendor metadata.
func LocalID(tenant, key string, minted bool) string {
	if minted {
		return LocalIDPrefix + key[:32]
	}
	sum := sha256.Sum256([]byte(tenant + "\x1f" + key))
	return LocalIDPrefix + hex.EncodeToString(sum[:])[:32]
}

// IsMintedKey reports whether key has the shape of a minted key (64 lower-case hex).
func IsMintedKey(key string) bool {
	if len(key) != 64 {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// CompensationKey returns the key of the compensation of original by action:
// hex SHA-256(original + ":compensate:" + action). The same request always
// derives the same key, so a second compensation request finds the first row.
func CompensationKey(original, action string) string {
	sum := sha256.Sum256([]byte(original + ":compensate:" + action))
	return hex.EncodeToString(sum[:])
}
