package bolt

import (
	"bytes"

	"github.com/tidwall/btree"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// kvBucket is what the transaction code needs of a bucket: bbolt's own
// (boltBucket, the store without its log) or the write-ahead log's
// buffered view of one (overlayBucket: the log's writes that bbolt does
// not hold yet, over bbolt's last commit).
type kvBucket interface {
	Get(k []byte) []byte
	Put(k, v []byte) error
	Delete(k []byte) error
	Cursor() kvCursor
	NextSequence() (uint64, error)
	Sequence() uint64
	ForEach(fn func(k, v []byte) error) error
	// KeyN counts the keys (a walk: bbolt keeps no count).
	KeyN() int
}

// kvCursor is bbolt's cursor contract: keys in byte order; nil at either end.
type kvCursor interface {
	First() ([]byte, []byte)
	Last() ([]byte, []byte)
	Next() ([]byte, []byte)
	Prev() ([]byte, []byte)
	Seek(seek []byte) ([]byte, []byte)
}

// boltBucket is a bbolt bucket as a kvBucket.
type boltBucket struct{ *bolt.Bucket }

func (b boltBucket) Cursor() kvCursor { return b.Bucket.Cursor() }
func (b boltBucket) KeyN() int        { return b.Stats().KeyN }

// entry is one key's latest write in a layer: a value, or a deletion
// (a tombstone hides the key in every older layer and in bbolt).
type entry struct {
	v   []byte
	del bool
}

// layer holds writes that the log made durable and bbolt may not hold
// yet: one ordered map per bucket (nil: untouched), bucket sequences set
// by NextSequence, and the last log index whose writes it carries. A layer
// that is no longer written to is immutable and shared by readers.
type layer struct {
	maps   [len(allBuckets)]*btree.Map[string, entry]
	seq    [len(allBuckets)]uint64
	seqSet [len(allBuckets)]bool
	// writes counts the entries set (for the flush trigger), bytes their size.
	writes, bytes int
	last          uint64
	// bucketWrites counts the entries set per bucket: a group's Get miss
	// stays a miss until its own bucket is written (overlayBucket.miss).
	bucketWrites [len(allBuckets)]int
}

func (l *layer) set(i int, k string, e entry) {
	m := l.maps[i]
	if m == nil {
		m = new(btree.Map[string, entry])
		l.maps[i] = m
	}
	m.Set(k, e)
	l.writes++
	l.bucketWrites[i]++
	l.bytes += len(k) + len(e.v) + 48
}

func (l *layer) setSeq(i int, seq uint64) {
	l.seq[i], l.seqSet[i] = seq, true
}

// mergeFrom copies every write of g (a group's layer) into l.
func (l *layer) mergeFrom(g *layer) {
	for i, m := range g.maps {
		if m == nil {
			continue
		}
		m.Scan(func(k string, e entry) bool {
			l.set(i, k, e)
			return true
		})
	}
	for i, ok := range g.seqSet {
		if ok {
			l.setSeq(i, g.seq[i])
		}
	}
	if g.last > l.last {
		l.last = g.last
	}
}

// snapshot returns an immutable copy of l for readers (copy-on-write:
// O(buckets), and l's next writes copy only the nodes they touch).
func (l *layer) snapshot() *layer {
	c := &layer{seq: l.seq, seqSet: l.seqSet, writes: l.writes, bytes: l.bytes, last: l.last}
	for i, m := range l.maps {
		if m != nil {
			c.maps[i] = m.Copy()
		}
	}
	return c
}

// overlayBucket is one bucket seen through layers (newest first) over
// bbolt's bucket of a read transaction. Writes go to top, the group's own
// layer; a reader's view has no top and never writes.
type overlayBucket struct {
	i      int
	layers []*layer
	base   *bolt.Bucket
	top    *layer
	// miss is the last key a group's Get found in no layer and not in
	// bbolt, and missAt the group layer's write count of this bucket then:
	// until the group writes to this bucket again, asking for it again (a
	// claim looks its key and local id up, then PutRow checks them again;
	// a delivery looks its event id up in the inbox, then writes its row
	// and outbox record, then PutInbox looks for the id again) is answered
	// without the search of every layer and of bbolt's B+tree. Only a
	// write to this bucket in the group's own layer can turn a miss into
	// a hit: the older layers and bbolt's read transaction do not change
	// while the group runs.
	miss   []byte
	missAt int
	missOK bool
}

func (b *overlayBucket) lookup(k []byte) (entry, bool) {
	for _, l := range b.layers {
		if m := l.maps[b.i]; m != nil {
			if e, ok := m.Get(string(k)); ok {
				return e, true
			}
		}
	}
	return entry{}, false
}

func (b *overlayBucket) Get(k []byte) []byte {
	if b.missOK && b.missAt == b.top.bucketWrites[b.i] && bytes.Equal(k, b.miss) {
		return nil
	}
	if e, ok := b.lookup(k); ok {
		if e.del {
			return nil
		}
		return e.v
	}
	v := b.base.Get(k)
	if v == nil && b.top != nil {
		b.miss, b.missAt, b.missOK = append(b.miss[:0], k...), b.top.bucketWrites[b.i], true
	}
	return v
}

func (b *overlayBucket) Put(k, v []byte) error {
	if b.top == nil {
		return bolterrors.ErrTxNotWritable
	}
	// A put of nil stores an empty value that Get still finds, as bbolt does.
	b.top.set(b.i, string(k), entry{v: append(make([]byte, 0, len(v)), v...)})
	return nil
}

func (b *overlayBucket) Delete(k []byte) error {
	if b.top == nil {
		return bolterrors.ErrTxNotWritable
	}
	b.top.set(b.i, string(k), entry{del: true})
	return nil
}

func (b *overlayBucket) Sequence() uint64 {
	for _, l := range b.layers {
		if l.seqSet[b.i] {
			return l.seq[b.i]
		}
	}
	return b.base.Sequence()
}

func (b *overlayBucket) NextSequence() (uint64, error) {
	if b.top == nil {
		return 0, bolterrors.ErrTxNotWritable
	}
	n := b.Sequence() + 1
	b.top.setSeq(b.i, n)
	return n, nil
}

func (b *overlayBucket) ForEach(fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (b *overlayBucket) KeyN() int {
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}

func (b *overlayBucket) Cursor() kvCursor {
	mc := &mergedCursor{}
	for _, l := range b.layers {
		if m := l.maps[b.i]; m != nil && m.Len() > 0 {
			mc.srcs = append(mc.srcs, mapSource{m})
		}
	}
	mc.srcs = append(mc.srcs, boltSource{b.base.Cursor()})
	return mc
}

// source is one input of a mergedCursor, positioned afresh by every call
// (so a layer written between two steps is never walked stale).
type source interface {
	first() ([]byte, entry, bool)
	last() ([]byte, entry, bool)
	ge(k []byte) ([]byte, entry, bool)
	gt(k []byte) ([]byte, entry, bool)
	lt(k []byte) ([]byte, entry, bool)
}

type boltSource struct{ c *bolt.Cursor }

func bk(k, v []byte) ([]byte, entry, bool) { return k, entry{v: v}, k != nil }

func (s boltSource) first() ([]byte, entry, bool)      { return bk(s.c.First()) }
func (s boltSource) last() ([]byte, entry, bool)       { return bk(s.c.Last()) }
func (s boltSource) ge(k []byte) ([]byte, entry, bool) { return bk(s.c.Seek(k)) }
func (s boltSource) gt(k []byte) ([]byte, entry, bool) {
	k2, v := s.c.Seek(k)
	if k2 != nil && bytes.Equal(k2, k) {
		k2, v = s.c.Next()
	}
	return bk(k2, v)
}
func (s boltSource) lt(k []byte) ([]byte, entry, bool) {
	if k2, _ := s.c.Seek(k); k2 == nil {
		return bk(s.c.Last())
	}
	return bk(s.c.Prev())
}

type mapSource struct{ m *btree.Map[string, entry] }

func mk(k string, e entry, ok bool) ([]byte, entry, bool) {
	if !ok {
		return nil, entry{}, false
	}
	return []byte(k), e, true
}

func (s mapSource) first() ([]byte, entry, bool) { return mk(s.m.Min()) }
func (s mapSource) last() ([]byte, entry, bool)  { return mk(s.m.Max()) }
func (s mapSource) ge(k []byte) ([]byte, entry, bool) {
	var rk string
	var re entry
	var ok bool
	s.m.Ascend(string(k), func(key string, e entry) bool { rk, re, ok = key, e, true; return false })
	return mk(rk, re, ok)
}
func (s mapSource) gt(k []byte) ([]byte, entry, bool) {
	var rk string
	var re entry
	var ok bool
	ks := string(k)
	s.m.Ascend(ks, func(key string, e entry) bool {
		if key == ks {
			return true
		}
		rk, re, ok = key, e, true
		return false
	})
	return mk(rk, re, ok)
}
func (s mapSource) lt(k []byte) ([]byte, entry, bool) {
	var rk string
	var re entry
	var ok bool
	ks := string(k)
	s.m.Descend(ks, func(key string, e entry) bool {
		if key == ks {
			return true
		}
		rk, re, ok = key, e, true
		return false
	})
	return mk(rk, re, ok)
}

// mergedCursor walks the union of its sources in key order; at equal keys
// the earliest source (the newest layer) wins, and a tombstone hides the
// key. Every step positions the sources from the current key.
type mergedCursor struct {
	srcs []source
	cur  []byte
}

func (c *mergedCursor) pick(forward bool, pos func(source) ([]byte, entry, bool)) ([]byte, []byte) {
	for {
		var bestK []byte
		var bestE entry
		found := false
		for _, s := range c.srcs {
			k, e, ok := pos(s)
			if !ok {
				continue
			}
			if !found || (forward && bytes.Compare(k, bestK) < 0) || (!forward && bytes.Compare(k, bestK) > 0) {
				bestK, bestE, found = k, e, true
			}
		}
		if !found {
			c.cur = nil
			return nil, nil
		}
		if !bestE.del {
			c.cur = bestK
			return bestK, bestE.v
		}
		k := bestK
		if forward {
			pos = func(s source) ([]byte, entry, bool) { return s.gt(k) }
		} else {
			pos = func(s source) ([]byte, entry, bool) { return s.lt(k) }
		}
	}
}

func (c *mergedCursor) First() ([]byte, []byte) {
	return c.pick(true, source.first)
}

func (c *mergedCursor) Last() ([]byte, []byte) {
	return c.pick(false, source.last)
}

func (c *mergedCursor) Seek(k []byte) ([]byte, []byte) {
	k = bytes.Clone(k)
	return c.pick(true, func(s source) ([]byte, entry, bool) { return s.ge(k) })
}

func (c *mergedCursor) Next() ([]byte, []byte) {
	if c.cur == nil {
		return nil, nil
	}
	k := c.cur
	return c.pick(true, func(s source) ([]byte, entry, bool) { return s.gt(k) })
}

func (c *mergedCursor) Prev() ([]byte, []byte) {
	if c.cur == nil {
		return nil, nil
	}
	k := c.cur
	return c.pick(false, func(s source) ([]byte, entry, bool) { return s.lt(k) })
}
