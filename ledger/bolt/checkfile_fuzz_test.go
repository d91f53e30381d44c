package bolt

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// FuzzCheckFile: whatever a copy holds — cut short anywhere, bytes
// overwritten anywhere — CheckFileIsolated answers (an error, or a report
// of a file that then opens), and never takes the process down: CheckFile
// itself catches a truncated file, damaged meta pages, damaged pages and
// keys out of order; the child process catches what still makes bbolt's
// own check panic. The seeds are
// a real ledger file, cut and damaged in the places a copy breaks.
func FuzzCheckFile(f *testing.F) {
	s := mustOpen(f, Options{UnsafeNoSync: true})
	for i := range 200 {
		mustClaim(f, s, claimReq("acme", "f-"+strconv.Itoa(i), "run_1", i), t0)
	}
	var buf bytes.Buffer
	if _, err := s.Backup(f.Context(), &buf, nil); err != nil {
		f.Fatal(err)
	}
	good := buf.Bytes()
	f.Add(len(good), 0, byte(0))             // the whole file
	f.Add(len(good)-4096, 0, byte(0))        // cut one page short
	f.Add(len(good)/2, 0, byte(0))           // cut in half
	f.Add(8192, 0, byte(0))                  // the meta pages only
	f.Add(len(good), 5*4096+100, byte(0xAB)) // a byte of a data page
	f.Add(len(good), 4096+20, byte(0x01))    // the second meta page
	f.Fuzz(func(t *testing.T, cut, at int, b byte) {
		if cut < 0 || cut > len(good) {
			return
		}
		data := bytes.Clone(good[:cut])
		if at >= 0 && at < len(data) {
			data[at] ^= b
		}
		p := filepath.Join(t.TempDir(), "copy.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := CheckFileIsolated(t.Context(), p); err != nil {
			return
		}
		r, err := Open(p, Options{})
		if err != nil {
			t.Fatalf("CheckFile passed a file Open refuses: %v", err)
		}
		r.Close()
	})
}
