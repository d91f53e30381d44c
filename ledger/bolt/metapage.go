package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// bbolt maps the whole file and reads pages through the map, so a page
// past the end of a truncated file is a SIGBUS, not an error: no recover
// catches it. A copy cut short is the commonest damage a backup suffers,
// so CheckFile reads the meta pages itself first and refuses a file
// shorter than the pages they name.
//
// A meta page is a 16-byte page header, then (little-endian on every
// platform bbolt supports here): magic u32, version u32, page size u32,
// flags u32, root bucket (root pgid u64, sequence u64), freelist pgid u64,
// high-water pgid u64, txid u64, and the FNV-64a of those 56 bytes.
const (
	boltMagic      = 0xED0CDAED
	pageHeaderSize = 16
	metaSumLen     = 56
	metaPageFlag   = 0x04
)

type metaPage struct {
	pageSize uint32
	pgid     uint64
	txid     uint64
}

func readMeta(b []byte, id uint64) (metaPage, bool) {
	if len(b) < pageHeaderSize+metaSumLen+8 {
		return metaPage{}, false
	}
	// The page header (id u64, flags u16: 0x04 for a meta page) is outside
	// the checksum, and bbolt's check asserts it where nothing recovers.
	if binary.LittleEndian.Uint64(b[0:]) != id || binary.LittleEndian.Uint16(b[8:]) != metaPageFlag {
		return metaPage{}, false
	}
	m := b[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:metaSumLen])
	if binary.LittleEndian.Uint32(m[0:]) != boltMagic || h.Sum64() != binary.LittleEndian.Uint64(m[metaSumLen:]) {
		return metaPage{}, false
	}
	return metaPage{pageSize: binary.LittleEndian.Uint32(m[8:]), pgid: binary.LittleEndian.Uint64(m[40:]), txid: binary.LittleEndian.Uint64(m[48:])}, true
}

// checkLength refuses a file shorter than its newest valid meta page says,
// or one with no valid meta page at all.
func checkLength(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	head := make([]byte, 4096)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("not a bbolt file: %w", err)
	}
	m0, ok0 := readMeta(head[:n], 0)
	var best metaPage
	if ok0 {
		best = m0
	}
	if ok0 && m0.pageSize >= 512 && m0.pageSize <= 1<<20 {
		second := make([]byte, pageHeaderSize+metaSumLen+8)
		if _, err := f.ReadAt(second, int64(m0.pageSize)); err == nil {
			if m1, ok1 := readMeta(second, 1); ok1 && m1.txid > best.txid {
				best = m1
			}
		}
	}
	if best.pageSize == 0 {
		return errors.New("not a bbolt file (no valid meta page)")
	}
	if need := best.pgid * uint64(best.pageSize); uint64(st.Size()) < need {
		return fmt.Errorf("truncated: the file is %d bytes, its meta page names %d (a copy cut short?)", st.Size(), need)
	}
	return nil
}
