package bolt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// crashed opens path with opts, claims keys, and abandons the store as a
// crash would: the claims are in the log only (the flush interval is far
// away), never in bbolt.
func crashed(t *testing.T, path string, opts Options, keys ...string) {
	t.Helper()
	opts.WALFlushInterval = time.Hour
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		mustClaim(t, s, claimReq("acme", k, "run_1", 1), t0)
	}
	abandon(s)
}

func mustHave(t *testing.T, s *Store, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := s.Get(context.Background(), "acme", k); err != nil {
			t.Fatalf("key %s: %v", k, err)
		}
	}
	mustConsistent(t, s)
}

// A file of today's format (no log) opens with the log and gains one; a
// log left by a crash is replayed whichever way the file is opened next.
func TestWALSwitchBothWays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, claimReq("acme", "before-the-log", "run_1", 1), t0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	crashed(t, path, Options{}, "in-the-log-only")
	if names, _ := (osFS{}).List(walDir(path)); len(names) == 0 {
		t.Fatal("no log segment after the crash: the test proves nothing")
	}
	s, err = Open(path, Options{NoWAL: true}) // replays, then removes the log
	if err != nil {
		t.Fatal(err)
	}
	mustHave(t, s, "before-the-log", "in-the-log-only")
	if _, err := os.Stat(walDir(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log directory after a NoWAL open: %v, want it removed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	crashed(t, path, Options{}, "second-crash")
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustHave(t, s, "before-the-log", "in-the-log-only", "second-crash")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean close leaves bbolt holding everything and no segment.
	if names, _ := (osFS{}).List(walDir(path)); len(names) != 0 {
		t.Errorf("segments after Close: %v, want none", names)
	}
}

// The log's tail torn by a crash is cut on open; a bad record anywhere
// else refuses the file instead of losing what follows it.
func TestWALTornTailAndDamage(t *testing.T) {
	setup := func(t *testing.T) (string, []string) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		// Tiny segments: the claims span several.
		crashed(t, path, Options{WALSegmentSize: 4 << 10}, "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10", "k11", "k12")
		names, err := (osFS{}).List(walDir(path))
		if err != nil || len(names) < 2 {
			t.Fatalf("segments %v (%v): want several", names, err)
		}
		slices.Sort(names)
		return path, names
	}
	t.Run("torn tail", func(t *testing.T) {
		path, names := setup(t)
		last := filepath.Join(walDir(path), names[len(names)-1])
		b, err := os.ReadFile(last)
		if err != nil {
			t.Fatal(err)
		}
		_, _, n, bad := parseRecord(b)
		if bad != "" {
			t.Fatalf("last segment's first record: %s", bad)
		}
		// Half of the last record reached the disk, and garbage after it.
		b[n/2] ^= 0xff
		if err := os.WriteFile(last, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("open with a torn tail: %v", err)
		}
		defer s.Close()
		mustHave(t, s, "k1") // in the first segment
		if _, err := s.Get(context.Background(), "acme", "k12"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("k12, after the torn record: %v, want ErrNotFound", err)
		}
	})
	t.Run("damage before the tail", func(t *testing.T) {
		path, names := setup(t)
		first := filepath.Join(walDir(path), names[0])
		b, err := os.ReadFile(first)
		if err != nil {
			t.Fatal(err)
		}
		b[walHeader+3] ^= 0xff
		if err := os.WriteFile(first, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = Open(path, Options{})
		if !errors.Is(err, errLogDamaged) {
			t.Fatalf("open with a damaged first segment: %v, want errLogDamaged", err)
		}
	})
}

// Flush returns once bbolt itself holds every acknowledged write.
func TestFlushPutsEverythingInBbolt(t *testing.T) {
	s := mustOpen(t, Options{WALFlushInterval: time.Hour})
	r := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row
	mustFlush(t, s)
	var v []byte
	if err := s.db.View(func(tx *bolt.Tx) error {
		rv, err := newTx(nil, tx).rowValue("acme", r.Key)
		v = cloneBytes(rv)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if s.wal != nil && len(v) == 0 {
		t.Fatal("row not in bbolt after Flush")
	}
	if _, err := decodeRow(v); s.wal != nil && err != nil {
		t.Fatal(err)
	}
}

// FuzzWALRecord feeds arbitrary bytes to the log's record and mutation
// decoders (replay reads whatever a crash left on disk): no panic, and a
// record that parses re-encodes to the same bytes.
func FuzzWALRecord(f *testing.F) {
	g := &layer{}
	g.set(0, "acme\x00k1", entry{v: []byte(`{"v":1}`)})
	g.set(2, "gone", entry{del: true})
	g.setSeq(5, 42)
	f.Add(encodeLayer(nil, g))
	f.Add([]byte{})
	f.Add(make([]byte, walHeader))
	f.Fuzz(func(t *testing.T, b []byte) {
		if idx, payload, n, bad := parseRecord(b); bad == "" {
			if n > len(b) || idx == 0 && len(payload) == 0 {
				t.Fatalf("record of %d bytes from %d", n, len(b))
			}
		}
		_ = decodeMutations(b, func(kind byte, bi int, k, v []byte, seq uint64) error {
			if bi >= len(allBuckets) || kind < mutPut || kind > mutSequence {
				t.Fatalf("mutation kind %d bucket %d", kind, bi)
			}
			return nil
		})
	})
}
