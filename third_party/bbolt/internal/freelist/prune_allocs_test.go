package freelist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"go.etcd.io/bbolt/internal/common"
)

// Local patch (third_party/bbolt/PATCHES.md): allocs keeps only the
// entries a read transaction can need.
func TestFreelist_pruneAllocs(t *testing.T) {
	for _, typ := range []string{"array", "hashmap"} {
		t.Run(typ, func(t *testing.T) {
			var f Interface
			if typ == "hashmap" {
				f = NewHashMapFreelist()
			} else {
				f = NewArrayFreelist()
			}
			ids := make([]common.Pgid, 0, 1000)
			for id := common.Pgid(2); id < 1002; id++ {
				ids = append(ids, id)
			}
			f.Init(ids)
			sh := func() *shared {
				if h, ok := f.(*hashMap); ok {
					return h.shared
				}
				return f.(*array).shared
			}()

			// Without readers every committed allocation's entry goes.
			for tx := common.Txid(10); tx < 110; tx++ {
				f.ReleasePendingPages()
				require.NotZero(t, f.Allocate(tx, 1))
			}
			require.Len(t, sh.allocs, 1, "before the next write transaction only the last one's entry may be left")
			f.ReleasePendingPages()
			require.Empty(t, sh.allocs)
			require.Empty(t, sh.allocLog)

			// A reader at 200 keeps the entries of 200 on, which let a page
			// allocated after it and freed later go before the reader ends.
			f.AddReadonlyTXID(200)
			a := f.Allocate(199, 1)
			b := f.Allocate(201, 1)
			f.ReleasePendingPages()
			require.Equal(t, map[common.Pgid]common.Txid{b: 201}, sh.allocs)
			f.Free(202, common.NewPage(a, common.LeafPageFlag, 0, 0))
			f.Free(202, common.NewPage(b, common.LeafPageFlag, 0, 0))
			f.ReleasePendingPages()
			// b was allocated and freed after the reader: released now. a
			// (allocated before it) waits for the reader, as a page
			// allocated before open would.
			require.True(t, f.Freed(a))
			require.Equal(t, []common.Pgid{a}, sh.pending[202].ids)
			f.RemoveReadonlyTXID(200)
			f.ReleasePendingPages()
			require.Empty(t, sh.pending)
			require.Empty(t, sh.allocs)
		})
	}
}
