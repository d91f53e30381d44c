package ledger_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

func TestListCursor(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	good := ledger.EncodeListCursor("acme", at, "order-7")
	raw, _ := base64.RawURLEncoding.DecodeString(good)
	flip := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	v1 := append([]byte{1}, raw[1:]...)
	tests := []struct {
		name, tenant, cursor string
		ok                   bool
	}{
		{name: "round trip", tenant: "acme", cursor: good, ok: true},
		{name: "another tenant", tenant: "globex", cursor: good},
		{name: "a flipped time bit", tenant: "acme", cursor: flip(3)},
		{name: "a flipped key byte", tenant: "acme", cursor: flip(10)},
		{name: "a flipped checksum", tenant: "acme", cursor: flip(len(raw) - 1)},
		{name: "version 1", tenant: "acme", cursor: base64.RawURLEncoding.EncodeToString(v1)},
		{name: "not base64url", tenant: "acme", cursor: "not a cursor!"},
		{name: "too short", tenant: "acme", cursor: base64.RawURLEncoding.EncodeToString(raw[:12])},
		{name: "too long", tenant: "acme", cursor: strings.Repeat("A", 1000)},
		{name: "empty", tenant: "acme", cursor: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotAt, gotKey, err := ledger.DecodeListCursor(tc.tenant, tc.cursor)
			if !tc.ok {
				if !errors.Is(err, ledger.ErrInvalidListQuery) {
					t.Fatalf("got %v %q %v, want ErrInvalidListQuery", gotAt, gotKey, err)
				}
				return
			}
			if err != nil || !gotAt.Equal(at) || gotKey != "order-7" {
				t.Fatalf("got %v %q %v, want %v order-7", gotAt, gotKey, err, at)
			}
		})
	}
}

// FuzzDecodeListCursor: a cursor is untrusted input (a query parameter).
// Whatever the bytes, decoding does not panic, and what it accepts
// re-encodes to the same cursor.
func FuzzDecodeListCursor(f *testing.F) {
	f.Add("acme", ledger.EncodeListCursor("acme", time.Unix(1700000000, 5), "k"))
	f.Add("acme", "AgAAAAAAAAAAazxxxx")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, tenant, cursor string) {
		at, key, err := ledger.DecodeListCursor(tenant, cursor)
		if err != nil {
			return
		}
		if again := ledger.EncodeListCursor(tenant, at, key); again != cursor {
			t.Fatalf("accepted %q, which re-encodes as %q", cursor, again)
		}
	})
}
