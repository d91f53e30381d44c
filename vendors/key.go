package vendors

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/agentledger/reconciler/internal/yamlnode"
	"github.com/agentledger/reconciler/ledger"
)

// KeyFormat is the alphabet of the keys a vendor takes.
type KeyFormat string

// The key formats.
const (
	// FormatPrintable: printable ASCII, the ledger's own key alphabet (the
	// default).
	FormatPrintable KeyFormat = "printable"
	// FormatToken: [A-Za-z0-9_-].
	FormatToken KeyFormat = "token"
	// FormatUUID4: a lowercase UUID of version 4 (Linear's client ids).
	FormatUUID4 KeyFormat = "uuid4"
)

// UnmarshalText accepts the three formats.
func (f *KeyFormat) UnmarshalText(b []byte) error {
	switch v := KeyFormat(strings.TrimSpace(string(b))); v {
	case FormatPrintable, FormatToken, FormatUUID4:
		*f = v
		return nil
	}
	return fmt.Errorf("unknown key format %q: want printable, token or uuid4", yamlnode.Truncate(string(b), 40))
}

// MinKeyLen is the shortest max_key_len a profile may set: a digest cut to
// 32 hex digits keeps 128 bits, so two keys of one tenant never collide.
const MinKeyLen = 32

// VendorKey is the key to send to this vendor for the ledger key key. A key
// that already fits max_key_len and key_format is sent unchanged; any other
// is replaced by a digest that fits: the SHA-256 of the key in hex, cut to
// max_key_len (uuid4: its first 16 bytes with the version and variant bits
// set). It depends on nothing but key and the profile, so every retry,
// replay and process derives the same one.
func (p Profile) VendorKey(key string) string {
	return DeriveKey(key, p.MaxKeyLen, p.KeyFormat)
}

// DeriveKey is Profile.VendorKey for a max length (0: the ledger's) and
// format ("": printable).
func DeriveKey(key string, maxLen int, format KeyFormat) string {
	if maxLen <= 0 || maxLen > ledger.MaxKeyLen {
		maxLen = ledger.MaxKeyLen
	}
	if format == FormatUUID4 {
		if isUUID4(key) {
			return key
		}
		sum := sha256.Sum256([]byte(key))
		u := sum[:16]
		u[6] = u[6]&0x0f | 0x40 // version 4
		u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
		h := hex.EncodeToString(u)
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	if len(key) > 0 && len(key) <= maxLen && fits(key, format) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])
	return h[:min(maxLen, len(h))]
}

func fits(key string, format KeyFormat) bool {
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch format {
		case FormatToken:
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return false
			}
		default:
			if c < 0x21 || c > 0x7e {
				return false
			}
		}
	}
	return true
}

// isUUID4 reports whether s is a lowercase canonical UUID of version 4
// with the RFC 4122 variant.
func isUUID4(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return s[14] == '4' && strings.IndexByte("89ab", s[19]) >= 0
}
