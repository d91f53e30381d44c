package retention

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// archiveLine is one line of the archive.
type archiveLine struct {
	ArchivedAt time.Time  `json:"archived_at"`
	Row        ledger.Row `json:"row"`
}

// ArchiveFile is the archive file of the day of t (UTC).
func ArchiveFile(dir string, t time.Time) string {
	return filepath.Join(dir, "rows-"+t.UTC().Format(time.DateOnly)+".jsonl")
}

// appendArchive appends rows to the day's archive file and fsyncs it (and
// the directory, when the file is new) before it returns: a row is on disk
// in the archive before the store deletes it. It returns the file's size.
func appendArchive(dir string, rows []ledger.Row, now time.Time) (int64, error) {
	path := ArchiveFile(dir, now)
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	var buf []byte
	for _, r := range rows {
		b, err := json.Marshal(archiveLine{ArchivedAt: now.UTC(), Row: r})
		if err != nil {
			_ = f.Close()
			return 0, fmt.Errorf("archive: encode row %s: %w", r.Key, err)
		}
		buf = append(append(buf, b...), '\n')
	}
	if _, err := f.Write(buf); err != nil {
		_ = f.Close()
		return 0, fmt.Errorf("archive %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return 0, fmt.Errorf("archive %s: fsync: %w", path, err)
	}
	st, err := f.Stat()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("archive %s: %w", path, err)
	}
	if os.IsNotExist(statErr) {
		if err := syncDir(dir); err != nil {
			return 0, err
		}
	}
	return st.Size(), nil
}

// syncDir makes a new directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("archive: fsync %s: %w", dir, err)
	}
	return nil
}
