package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The write-ahead log's files: a directory of segments, each named by the
// index of its first record (16 hex digits + ".wal", so name order is
// index order). A record is
//
//	len u32 ‖ crc32c(index ‖ payload) u32 ‖ index u64 ‖ payload
//
// (little-endian), indexes consecutive from 1. A segment is only ever
// appended to; the committer fsyncs after each group's record, and a new
// segment's directory entry is fsynced before its first record is
// acknowledged, so after a power cut only the last segment can end in a
// torn record: open cuts it there. Any other bad record is damage, and
// open refuses the file rather than lose what follows it.
//
// Why not a library: tidwall/wal (v1.2.1) stores records without a
// checksum and fails to open on a torn tail (ErrCorrupt) instead of
// cutting it; etcd's server/storage/wal is the design, but it carries
// raft's entry types, zap and the rest of etcd's server module.

const (
	walHeader = 16
	walExt    = ".wal"
	// walMaxRecord bounds one record (a group of at most MaxGroup writes).
	walMaxRecord = 1 << 30
	// DefaultWALSegmentSize is where the log starts a new segment.
	DefaultWALSegmentSize = 32 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// walFS is the log's file layer; tests swap in one that loses every byte
// not yet fsynced (the power-loss test).
type walFS interface {
	MkdirAll(dir string) error
	// List returns the segment names of dir (missing dir: none).
	List(dir string) ([]string, error)
	ReadFile(name string) ([]byte, error)
	// Create makes a new file of size zero bytes and fsyncs it: records
	// are then written inside it, so an fdatasync after a record changes
	// no file size and costs one write, not a journal commit as well.
	Create(name string, size int64) (walFile, error)
	// Rename renames a file (the spare segment into place).
	Rename(oldname, newname string) error
	// Truncate cuts name to size and fsyncs it.
	Truncate(name string, size int64) error
	Remove(name string) error
	// SyncDir fsyncs a directory, making its entries durable.
	SyncDir(dir string) error
}

type walFile interface {
	WriteAt(p []byte, off int64) (int, error)
	// Sync is fdatasync where the platform has it.
	Sync() error
	Close() error
}

type osFS struct{}

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }
func (osFS) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), walExt) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
func (osFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (osFS) Create(name string, size int64) (walFile, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.Write(zeros[:min(int64(len(zeros)), size-off)]); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return dataSyncFile{f}, nil
}
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// dataSyncFile syncs with fdatasync (wal_sync_*.go).
type dataSyncFile struct{ *os.File }

func (f dataSyncFile) Sync() error { return fdatasync(f.File) }
func (osFS) Truncate(name string, size int64) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
func (osFS) Remove(name string) error { return os.Remove(name) }
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

func segName(first uint64) string { return fmt.Sprintf("%016x%s", first, walExt) }

func segFirst(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, walExt)
	if !ok || len(s) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 16, 64)
	return n, err == nil
}

// errLogDamaged means a record other than the last segment's tail is bad.
var errLogDamaged = errors.New("write-ahead log damaged")

// replayLog reads every segment of dir in order and calls apply for each
// record with an index above after. A bad record at the end of the last
// segment is a torn write: the segment is cut there (fsynced) and the scan
// ends. It returns the last index the log holds (after, if none is newer).
func replayLog(fs walFS, dir string, after uint64, apply func(idx uint64, payload []byte) error) (uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", dir, err)
	}
	slices.Sort(names)
	last := after
	var prev uint64
	for si, name := range names {
		first, ok := segFirst(name)
		if !ok {
			return 0, fmt.Errorf("%w: %s: not a segment name", errLogDamaged, filepath.Join(dir, name))
		}
		path := filepath.Join(dir, name)
		data, err := fs.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", path, err)
		}
		off := 0
		for off < len(data) {
			if allZero(data[off:]) {
				break // the preallocated rest of the segment
			}
			idx, payload, n, bad := parseRecord(data[off:])
			if bad == "" && prev != 0 && idx != prev+1 {
				bad = fmt.Sprintf("index %d after %d", idx, prev)
			}
			if bad == "" && off == 0 && idx != first {
				bad = fmt.Sprintf("first index %d in a segment named %d", idx, first)
			}
			if bad != "" {
				if !restEmpty(fs, dir, names[si+1:]) {
					return 0, fmt.Errorf("%w: %s offset %d: %s (not the log's tail: refusing to open rather than lose what follows)", errLogDamaged, path, off, bad)
				}
				// The torn tail of the last write before a crash: cut it.
				if err := fs.Truncate(path, int64(off)); err != nil {
					return 0, fmt.Errorf("cut torn tail of %s at %d: %w", path, off, err)
				}
				for _, rest := range names[si+1:] {
					if err := fs.Remove(filepath.Join(dir, rest)); err != nil {
						return 0, fmt.Errorf("remove %s: %w", rest, err)
					}
				}
				return last, nil
			}
			if idx > after {
				if idx != last+1 {
					return 0, fmt.Errorf("%w: %s: record %d, but the file holds up to %d: records missing", errLogDamaged, path, idx, last)
				}
				if err := apply(idx, payload); err != nil {
					return 0, fmt.Errorf("%s record %d: %w", path, idx, err)
				}
				last = idx
			}
			prev = idx
			off += n
		}
	}
	return last, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// restEmpty reports whether every segment in names is empty (a crash
// while starting a new segment can leave one).
func restEmpty(fs walFS, dir string, names []string) bool {
	for _, n := range names {
		b, err := fs.ReadFile(filepath.Join(dir, n))
		if err != nil || !allZero(b) {
			return false
		}
	}
	return true
}

// parseRecord decodes the record at the start of b; bad says why it is not one.
func parseRecord(b []byte) (idx uint64, payload []byte, n int, bad string) {
	if len(b) < walHeader {
		return 0, nil, 0, "short header"
	}
	size := binary.LittleEndian.Uint32(b[0:4])
	if size == 0 || size > walMaxRecord || int(size) > len(b)-walHeader {
		return 0, nil, 0, fmt.Sprintf("record length %d", size)
	}
	sum := binary.LittleEndian.Uint32(b[4:8])
	body := b[8 : walHeader+int(size)]
	if crc32.Checksum(body, crcTable) != sum {
		return 0, nil, 0, "checksum mismatch"
	}
	return binary.LittleEndian.Uint64(b[8:16]), b[walHeader : walHeader+int(size)], walHeader + int(size), ""
}

// wlog appends records. append is the committer's alone; removeThrough
// runs on the flusher; mu guards the segment list they share.
type wlog struct {
	fs      walFS
	dir     string
	segSize int64

	f    walFile
	size int64
	cap  int64 // the current segment's preallocated size
	next uint64
	buf  []byte
	// spare is the next segment, zero-filled in the background so that a
	// rotation only renames it.
	spare chan spareSeg
	// noSync skips the fdatasync (Options.UnsafeNoSync: measuring only).
	noSync bool
	// broken is set by a failed write or fsync: what reached the file is
	// unknown, so nothing more is appended (every later write fails).
	broken error

	// synced is the last index fsynced (read by Store.Flush).
	synced atomic.Uint64

	mu   sync.Mutex
	segs []uint64 // first index of each segment, oldest first; the last is f
}

// openLog starts an empty log whose next record is next, removing every
// old segment of dir (their records are all in bbolt).
func openLog(fs walFS, dir string, next uint64, segSize int64) (*wlog, error) {
	if err := fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	if err := fs.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("sync %s: %w", filepath.Dir(dir), err)
	}
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	for _, n := range names {
		if err := fs.Remove(filepath.Join(dir, n)); err != nil {
			return nil, fmt.Errorf("remove %s: %w", n, err)
		}
	}
	_ = fs.Remove(filepath.Join(dir, spareName)) // left by a crash
	l := &wlog{fs: fs, dir: dir, segSize: segSize, next: next}
	l.synced.Store(next - 1)
	if err := l.startSegment(min(segSize, walFirstSegment)); err != nil {
		return nil, err
	}
	return l, nil
}

// walFirstSegment is the size of a freshly opened log's first segment:
// small, so that opening a store writes little; the next ones (segSize)
// are prepared in the background once it is half full.
const walFirstSegment = 256 << 10

// spareName is the segment being zero-filled for the next rotation.
const spareName = "spare.tmp"

type spareSeg struct {
	f   walFile
	err error
}

// prepareSpare zero-fills the next segment in the background.
func (l *wlog) prepareSpare() {
	l.spare = make(chan spareSeg, 1)
	go func(ch chan<- spareSeg) { // owner: wlog; one result, taken by startSegment or closeOnly
		f, err := l.fs.Create(filepath.Join(l.dir, spareName), l.segSize)
		ch <- spareSeg{f, err}
	}(l.spare)
}

// startSegment starts the segment for l.next: the spare when one was
// prepared, else a new file of need zero bytes (at least: a spare of the
// full segment size when none was prepared and the disk has room). Its
// name is made durable before any record in it can be acknowledged.
func (l *wlog) startSegment(need int64) error {
	path := filepath.Join(l.dir, segName(l.next))
	var f walFile
	size := need
	if l.spare != nil {
		sp := <-l.spare
		l.spare = nil
		if sp.err == nil {
			if err := l.fs.Rename(filepath.Join(l.dir, spareName), path); err != nil {
				_ = sp.f.Close()
				return fmt.Errorf("rename spare segment to %s: %w", path, err)
			}
			f, size = sp.f, max(l.segSize, need)
		} else {
			// No room for a whole spare (a nearly full disk): a segment
			// just large enough may still fit.
			_ = l.fs.Remove(filepath.Join(l.dir, spareName))
		}
	}
	if f == nil {
		var err error
		if f, err = l.fs.Create(path, size); err != nil {
			_ = l.fs.Remove(path)
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", l.dir, err)
	}
	if l.f != nil {
		if err := l.f.Close(); err != nil {
			_ = f.Close()
			return fmt.Errorf("close segment: %w", err)
		}
	}
	l.f, l.size, l.cap = f, 0, size
	l.mu.Lock()
	l.segs = append(l.segs, l.next)
	l.mu.Unlock()
	return nil
}

// appendAll writes payloads as the next records and fsyncs once; once it
// returns nil they survive a power cut. It returns the first one's index.
// A batch never spans segments: when it does not fit in the current one,
// the next segment is started first, and if that fails (no room for a new
// segment: a full disk) nothing was written and the log stays usable. A
// failed write or fdatasync inside a segment breaks the log instead: what
// reached the disk is unknown.
func (l *wlog) appendAll(payloads [][]byte) (uint64, error) {
	if l.broken != nil {
		return 0, l.broken
	}
	first := l.next
	if len(payloads) == 0 {
		return first, nil
	}
	total := int64(0)
	for _, p := range payloads {
		if len(p) > walMaxRecord {
			return 0, fmt.Errorf("write-ahead log: record of %d bytes: over %d", len(p), walMaxRecord)
		}
		total += int64(walHeader + len(p))
	}
	if l.size > 0 && l.size+total > l.cap {
		if err := l.startSegment(max(total, walFirstSegment)); err != nil {
			return 0, fmt.Errorf("write-ahead log: new segment: %w", err)
		}
	}
	fail := func(what string, err error) (uint64, error) {
		l.broken = fmt.Errorf("write-ahead log: %s: %w", what, err)
		return 0, l.broken
	}
	b := l.buf[:0]
	idx := first
	for _, payload := range payloads {
		h := len(b)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = binary.LittleEndian.AppendUint64(b, idx)
		b = append(b, payload...)
		binary.LittleEndian.PutUint32(b[h+4:h+8], crc32.Checksum(b[h+8:], crcTable))
		idx++
	}
	if _, err := l.f.WriteAt(b, l.size); err != nil {
		return fail("write", err)
	}
	if err := l.sync(); err != nil {
		return fail("fsync", err)
	}
	l.size += int64(len(b))
	l.next = idx
	l.synced.Store(l.next - 1)
	l.buf = b
	if cap(l.buf) > 4<<20 {
		l.buf = nil // one huge batch does not pin its buffer
	}
	if l.spare == nil && l.size > l.cap/2 {
		l.prepareSpare()
	}
	return first, nil
}

// lastIndex is the index of the last record fsynced (or, before any, the
// last one bbolt held when the log was opened).
func (l *wlog) lastIndex() uint64 { return l.synced.Load() }

func (l *wlog) sync() error {
	if l.noSync {
		return nil
	}
	return l.f.Sync()
}

// removeThrough deletes every segment all of whose records are at or
// below held (bbolt holds them). The segment being written is kept.
// between, when set, runs before each removal (the crash tests kill there).
func (l *wlog) removeThrough(held uint64, between func()) error {
	l.mu.Lock()
	var drop []uint64
	for i := 0; i+1 < len(l.segs) && l.segs[i+1] <= held+1; i++ {
		drop = append(drop, l.segs[i])
	}
	l.mu.Unlock()
	for _, first := range drop {
		if between != nil {
			between()
		}
		if err := l.fs.Remove(filepath.Join(l.dir, segName(first))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove log segment: %w", err)
		}
		l.mu.Lock()
		l.segs = l.segs[1:]
		l.mu.Unlock()
	}
	return nil
}

// segments is how many segment files the log has (tests, stats).
func (l *wlog) segments() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs)
}

// closeAndRemove closes the current segment and removes every segment:
// called once bbolt holds every record.
func (l *wlog) closeAndRemove() error {
	err := l.closeOnly()
	l.mu.Lock()
	segs := l.segs
	l.segs = nil
	l.mu.Unlock()
	for _, first := range segs {
		// Already gone (the directory removed under a closing store) is
		// what this wants anyway.
		if rerr := l.fs.Remove(filepath.Join(l.dir, segName(first))); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// closeOnly closes the current segment, leaving the files (a failed store).
func (l *wlog) closeOnly() error {
	var err error
	if l.f != nil {
		err = l.f.Close()
		l.f = nil
	}
	if l.spare != nil {
		if sp := <-l.spare; sp.f != nil {
			err = errors.Join(err, sp.f.Close())
		}
		l.spare = nil
		_ = l.fs.Remove(filepath.Join(l.dir, spareName))
	}
	return err
}

// Mutation records: the payload of a log record is a group's writes.
const (
	mutPut byte = 1 + iota
	mutDelete
	mutSequence
)

// encodeLayer serialises g's writes (each key's last write; sequences).
func encodeLayer(b []byte, g *layer) []byte {
	for i, m := range g.maps {
		if m == nil {
			continue
		}
		m.Scan(func(k string, e entry) bool {
			if e.del {
				b = append(b, mutDelete, byte(i))
				b = binary.AppendUvarint(b, uint64(len(k)))
				b = append(b, k...)
				return true
			}
			b = append(b, mutPut, byte(i))
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(e.v)))
			b = append(b, e.v...)
			return true
		})
	}
	for i, ok := range g.seqSet {
		if ok {
			b = append(b, mutSequence, byte(i))
			b = binary.AppendUvarint(b, g.seq[i])
		}
	}
	return b
}

// decodeMutations calls fn for each write of a record's payload.
func decodeMutations(p []byte, fn func(kind byte, bucket int, k, v []byte, seq uint64) error) error {
	for len(p) > 0 {
		if len(p) < 2 {
			return errors.New("mutation: truncated")
		}
		kind, bi := p[0], int(p[1])
		p = p[2:]
		if bi >= len(allBuckets) {
			return fmt.Errorf("mutation: bucket %d unknown", bi)
		}
		readBytes := func() ([]byte, error) {
			n, w := binary.Uvarint(p)
			if w <= 0 || n > uint64(len(p)-w) {
				return nil, errors.New("mutation: bad length")
			}
			out := p[w : w+int(n)]
			p = p[w+int(n):]
			return out, nil
		}
		switch kind {
		case mutPut, mutDelete:
			k, err := readBytes()
			if err != nil {
				return err
			}
			var v []byte
			if kind == mutPut {
				if v, err = readBytes(); err != nil {
					return err
				}
			}
			if err := fn(kind, bi, k, v, 0); err != nil {
				return err
			}
		case mutSequence:
			n, w := binary.Uvarint(p)
			if w <= 0 {
				return errors.New("mutation: bad sequence")
			}
			p = p[w:]
			if err := fn(kind, bi, nil, nil, n); err != nil {
				return err
			}
		default:
			return fmt.Errorf("mutation: kind %d unknown", kind)
		}
	}
	return nil
}
