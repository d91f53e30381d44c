package bolt

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

func TestIdempotencyRecordEncoding(t *testing.T) {
	claim := ledger.IdempotencyRecord{Request: ledger.IdempotencyKeyHash("request"), At: t0, Tenant: "acme", Key: "stripe:pi_1",
		Decision: ledger.DecisionProceed, Inserted: true, Attempt: 3, PendingUntil: t0.Add(15*time.Minute + time.Nanosecond)}
	for _, tc := range []struct {
		name string
		rec  ledger.IdempotencyRecord
	}{
		{"a claim's record", claim},
		{"an outcome's record", ledger.IdempotencyRecord{Request: "r", At: t0, Tenant: "acme", Key: "k"}},
		{"zero", ledger.IdempotencyRecord{}},
		{"a 64-character fingerprint that is not lower-case hex", ledger.IdempotencyRecord{Request: strings.ToUpper(claim.Request), Tenant: "acme", Key: "k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeIdempotency(encodeIdempotency(tc.rec))
			if err != nil || !reflect.DeepEqual(got, tc.rec) {
				t.Fatalf("round trip = %+v %v, want %+v", got, err, tc.rec)
			}
		})
	}
	t.Run("the JSON of the first build is still read", func(t *testing.T) {
		v, err := marshal(claim)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeIdempotency(v)
		if err != nil || !reflect.DeepEqual(got, claim) {
			t.Fatalf("JSON record = %+v %v, want %+v", got, err, claim)
		}
	})
	t.Run("smaller than its JSON", func(t *testing.T) {
		v, _ := marshal(claim)
		if got := len(encodeIdempotency(claim)); got*2 > len(v) {
			t.Fatalf("binary record %d bytes, JSON %d", got, len(v))
		}
	})
	full := encodeIdempotency(claim)
	for _, bad := range [][]byte{nil, {idemBinary}, {9, 0, 0}, full[:len(full)-1], append(bytes.Clone(full), 0)} {
		if _, err := decodeIdempotency(bad); !errors.Is(err, errBadIdempotency) {
			t.Errorf("decode %q: %v, want errBadIdempotency", bad, err)
		}
	}
}

// FuzzIdempotencyRecord feeds arbitrary bytes to the record decoder: no
// panic, and a record that decodes encodes and decodes to itself.
func FuzzIdempotencyRecord(f *testing.F) {
	f.Add(encodeIdempotency(ledger.IdempotencyRecord{Request: "r", At: t0, Tenant: "acme", Key: "k",
		Decision: ledger.DecisionProceed, Inserted: true, Attempt: 1, PendingUntil: t0.Add(time.Minute)}))
	f.Add([]byte(`{"request":"r","at":"2026-03-01T12:00:00Z","tenant":"acme","key":"k"}`))
	f.Add([]byte{idemBinary, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		rec, err := decodeIdempotency(v)
		if err != nil || len(v) > 0 && v[0] == '{' {
			return
		}
		again, err := decodeIdempotency(encodeIdempotency(rec))
		if err != nil || !reflect.DeepEqual(again, rec) {
			t.Fatalf("re-encoded %+v = %+v %v", rec, again, err)
		}
	})
}

// TestPruneIdempotencyRewritten: a record written again (a resend granted
// a new lease) outlives a prune between its two writes; its first by-time
// entry goes, and the second prunes it.
func TestPruneIdempotencyRewritten(t *testing.T) {
	s := mustOpen(t, Options{Policy: ledger.DefaultPolicy()})
	ctx := context.Background()
	put := func(at time.Time) {
		t.Helper()
		rec := ledger.IdempotencyRecord{Request: "r", At: at, Tenant: "acme", Key: "k"}
		if err := s.write(ctx, func(tx *boltTx) error { return tx.PutIdempotency("acme", ledger.IdempotencyKeyHash("v"), rec) }); err != nil {
			t.Fatal(err)
		}
	}
	get := func() (ledger.IdempotencyRecord, error) {
		var rec ledger.IdempotencyRecord
		err := s.write(ctx, func(tx *boltTx) (err error) {
			rec, err = tx.GetIdempotency("acme", ledger.IdempotencyKeyHash("v"))
			return err
		})
		return rec, err
	}
	entries := func() int {
		var n int
		if err := s.view(ctx, func(tx *boltTx) error { n = tx.bucket(bucketIdempotencyByTime).KeyN(); return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	put(t0)
	put(t0.Add(time.Hour))
	if got := entries(); got != 2 {
		t.Fatalf("by-time entries = %d, want 2 (the first write's stays until a prune)", got)
	}
	if n, err := s.PruneIdempotency(ctx, t0.Add(time.Minute)); err != nil || n != 0 {
		t.Fatalf("prune between the writes = %d %v, want 0", n, err)
	}
	if rec, err := get(); err != nil || !rec.At.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after the prune: %+v %v, want the record written again", rec, err)
	}
	if got := entries(); got != 1 {
		t.Fatalf("by-time entries = %d, want 1", got)
	}
	if n, err := s.PruneIdempotency(ctx, t0.Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune after both = %d %v, want 1", n, err)
	}
	if _, err := get(); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("after the second prune: %v, want ErrNotFound", err)
	}
	if got := entries(); got != 0 {
		t.Fatalf("by-time entries = %d, want 0", got)
	}
}
