package bolt

import (
	"context"
	"testing"
)

// TestOverlayMissIsForgottenOnWrite: a group's Get that found nothing is
// remembered (overlayBucket.miss) only until the group writes anything;
// a key written, deleted or written in another bucket in between is read
// afresh, whether the key lives in a layer or in bbolt.
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
		}{
			{"absent", nil, "k", ""},
			{"absent again (remembered)", nil, "k", ""},
			{"another key", nil, "in-bbolt", "1"},
			{"put", func() error { return tools.Put([]byte("k"), []byte("v")) }, "k", "v"},
			{"absent key", nil, "k2", ""},
			{"put in another bucket", func() error { return freezes.Put([]byte("x"), []byte("y")) }, "k2", ""},
			{"absent once more", nil, "k2", ""},
			{"put the absent key", func() error { return tools.Put([]byte("k2"), []byte("v2")) }, "k2", "v2"},
			{"delete", func() error { return tools.Delete([]byte("k2")) }, "k2", ""},
			{"put after delete", func() error { return tools.Put([]byte("k2"), []byte("v3")) }, "k2", "v3"},
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
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
