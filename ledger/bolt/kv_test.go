package bolt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestOverlayMissIsForgottenOnWrite: a group's Get that found nothing is
// remembered (overlayBucket.miss) only until the group writes to that
// bucket; a key written or deleted in between is read afresh, whether the
// key lives in a layer or in bbolt, and a write to another bucket keeps
// the miss remembered (remembered: whether the memo still holds).
func TestOverlayMissIsForgottenOnWrite(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	if s.wal == nil {
		t.Skip("the miss cache is the log's (BOLT_TEST_NOWAL)")
	}
	// One key in bbolt itself, so a later group's read reaches the B+tree.
	if err := s.write(ctx, func(tx *boltTx) error {
		tx.writes++
		return tx.bucket(bucketTools).Put([]byte("in-bbolt"), []byte("1"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	err := s.write(ctx, func(tx *boltTx) error {
		tools, freezes := tx.bucket(bucketTools), tx.bucket(bucketFreezes)
		steps := []struct {
			name string
			do   func() error
			key  string
			want string // "" for absent
			// remembered: the miss memo holds after the Get.
			remembered bool
		}{
			{"absent", nil, "k", "", true},
			{"absent again (remembered)", nil, "k", "", true},
			{"another key", nil, "in-bbolt", "1", true},
			{"put", func() error { return tools.Put([]byte("k"), []byte("v")) }, "k", "v", false},
			{"absent key", nil, "k2", "", true},
			{"put in another bucket", func() error { return freezes.Put([]byte("x"), []byte("y")) }, "k2", "", true},
			{"absent once more", nil, "k2", "", true},
			{"put another key", func() error { return tools.Put([]byte("k9"), []byte("v9")) }, "k2", "", true},
			{"put the absent key", func() error { return tools.Put([]byte("k2"), []byte("v2")) }, "k2", "v2", false},
			{"delete", func() error { return tools.Delete([]byte("k2")) }, "k2", "", false}, // a tombstone is found in the layer
			{"put after delete", func() error { return tools.Put([]byte("k2"), []byte("v3")) }, "k2", "v3", false},
		}
		tx.writes++
		for _, st := range steps {
			if st.do != nil {
				if err := st.do(); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
			}
			if got := string(tools.Get([]byte(st.key))); got != st.want {
				t.Errorf("%s: Get(%q) = %q, want %q", st.name, st.key, got, st.want)
			}
			ob := tools.(*overlayBucket)
			if got := ob.missOK && ob.missAt == ob.top.bucketWrites[ob.i]; got != st.remembered {
				t.Errorf("%s: miss remembered = %v, want %v", st.name, got, st.remembered)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestInboxMissThenPutInOneGroup: a delivery's GetInbox miss is remembered
// across the group's writes to other buckets, so PutInbox need not search
// again; once the group writes the inbox, the same event id is found (a
// second delivery of it in the group is a duplicate) and a second PutInbox
// moves its inbox_by_time entry instead of leaving the first one behind.
func TestInboxMissThenPutInOneGroup(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	err := s.write(ctx, func(tx *boltTx) error {
		if _, err := tx.GetInbox("stripe", "evt_1"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("GetInbox before any put: %v, want ErrNotFound", err)
		}
		// The delivery's other writes, as ingest makes them.
		tx.writes++
		if err := tx.bucket(bucketFreezes).Put([]byte("x"), []byte("y")); err != nil {
			return err
		}
		for i, at := range []time.Time{t0, t0.Add(time.Hour)} {
			if err := tx.PutInbox("stripe", "evt_1", ledger.InboxRecord{FirstSeen: at, Result: ledger.IngestAccepted}); err != nil {
				return err
			}
			rec, err := tx.GetInbox("stripe", "evt_1")
			if err != nil || !rec.FirstSeen.Equal(at) {
				t.Fatalf("put %d: GetInbox = %+v, %v; want first seen %v", i, rec, err, at)
			}
		}
		var byTime int
		if err := tx.bucket(bucketInboxByTime).ForEach(func(k, _ []byte) error { byTime++; return nil }); err != nil {
			return err
		}
		if byTime != 1 {
			t.Errorf("inbox_by_time holds %d entries, want 1 (the second put moves the first)", byTime)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
