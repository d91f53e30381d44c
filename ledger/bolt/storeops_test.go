package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// claimLoad runs workers that claim new keys until stop closes, recording
// every key whose Claim returned (acknowledged: durable) with the time it
// returned.
type claimLoad struct {
	mu    sync.Mutex
	acked map[string]time.Time // key → when Claim returned
	n     atomic.Int64
	wg    sync.WaitGroup
	stop  chan struct{}
}

func startClaims(tb testing.TB, s *Store, workers int) *claimLoad {
	l := &claimLoad{acked: map[string]time.Time{}, stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("bk-%d-%d", w, i)
				c, err := ledger.NewClaim(claimReq("acme", key, "run_1", i), s.policy, t0)
				if err != nil {
					tb.Error(err)
					return
				}
				if _, err := s.Claim(context.Background(), c); err != nil {
					tb.Errorf("claim %s: %v", key, err)
					return
				}
				done := time.Now()
				l.n.Add(1)
				l.mu.Lock()
				l.acked[key] = done
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *claimLoad) halt() { close(l.stop); l.wg.Wait() }

// slowWriter takes 2 ms per write.
type slowWriter struct{ w *os.File }

func (s slowWriter) Write(p []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	return s.w.Write(p)
}

// TestBackupUnderClaimsRestores: a backup taken while claims commit,
// restored into a new data directory, holds every row acknowledged before
// the backup began, and passes bbolt's and the ledger's checks.
func TestBackupUnderClaimsRestores(t *testing.T) {
	s := mustOpen(t, Options{})
	load := startClaims(t, s, 8)
	for load.n.Load() < 300 {
		time.Sleep(5 * time.Millisecond)
	}
	began := time.Now()
	out := filepath.Join(t.TempDir(), "backup.db")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	before := load.n.Load()
	// A slow destination (a network, a busy disk) keeps the read
	// transaction open while the committer goes on.
	info, err := s.Backup(t.Context(), slowWriter{f}, nil)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	during := load.n.Load() - before
	load.halt()
	if during == 0 {
		t.Fatal("no claim committed during the backup: the test proved nothing")
	}
	var mustHave []string
	for k, at := range load.acked {
		if at.Before(began) {
			mustHave = append(mustHave, k)
		}
	}
	if int64(len(mustHave)) > info.Rows {
		t.Fatalf("the backup counts %d rows, %d were acknowledged before it began", info.Rows, len(mustHave))
	}

	dataFile := filepath.Join(t.TempDir(), "data", "reconciler.db")
	rep, err := Restore(t.Context(), out, dataFile, false)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if rep.Rows != info.Rows || !rep.Invariants {
		t.Fatalf("restore report %+v, backup %+v", rep, info)
	}
	r, err := Open(dataFile, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, k := range mustHave {
		if _, err := r.Get(t.Context(), "acme", k); err != nil {
			t.Fatalf("row %s, acknowledged before the backup began, is not in the restore: %v", k, err)
		}
	}
	if err := r.CheckConsistency(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of %d rows (%d bytes) while %d claims committed; %d rows acknowledged before it began, all restored",
		info.Rows, info.Bytes, during, len(mustHave))
}

func TestRestoreRefuses(t *testing.T) {
	ctx := t.Context()
	src := mustOpen(t, Options{})
	mustClaim(t, src, claimReq("acme", "k1", "run_1", 1), t0)
	backup := filepath.Join(t.TempDir(), "backup.db")
	var buf bytes.Buffer
	if _, err := src.Backup(ctx, &buf, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backup, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("a live data directory, even with force", func(t *testing.T) {
		live := mustOpen(t, Options{})
		for _, force := range []bool{false, true} {
			if _, err := Restore(ctx, backup, live.Path(), force); !errors.Is(err, ErrLocked) {
				t.Fatalf("restore over a live file (force %v): %v, want ErrLocked", force, err)
			}
		}
	})
	t.Run("an existing file without force", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "reconciler.db")
		if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(ctx, backup, path, false); !errors.Is(err, ErrExists) {
			t.Fatalf("restore over a file: %v, want ErrExists", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "old" {
			t.Fatal("the existing file was changed")
		}
		if _, err := Restore(ctx, backup, path, true); err != nil {
			t.Fatalf("restore --force: %v", err)
		}
	})
	t.Run("a copy whose pages are damaged, writing nothing", func(t *testing.T) {
		big := mustOpen(t, Options{UnsafeNoSync: true})
		for i := range 200 {
			mustClaim(t, big, claimReq("acme", "d-"+strconv.Itoa(i), "run_1", i), t0)
		}
		mustFlush(t, big) // the rows in bbolt, where the backup copies them from
		var root uint64
		if err := big.db.View(func(tx *bolt.Tx) error {
			root = uint64(tx.Bucket(bucketRows).Root())
			return nil
		}); err != nil || root == 0 {
			t.Fatalf("rows bucket root %d, %v", root, err)
		}
		var out bytes.Buffer
		if _, err := big.Backup(ctx, &out, nil); err != nil {
			t.Fatal(err)
		}
		b := out.Bytes()
		page := big.db.Info().PageSize
		for i := int(root) * page; i < int(root+1)*page; i++ {
			b[i] = 0xAB
		}
		restoreFails(t, b)
	})
	t.Run("a copy whose index dangles, writing nothing", func(t *testing.T) {
		bad := mustOpen(t, Options{UnsafeNoSync: true})
		mustClaim(t, bad, claimReq("acme", "k1", "run_1", 1), t0)
		if err := bad.db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketByTime).Put([]byte("acme\x00dangling"), nil)
		}); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := bad.Backup(ctx, &out, nil); err != nil {
			t.Fatal(err)
		}
		restoreFails(t, out.Bytes())
	})
	t.Run("not a ledger", func(t *testing.T) {
		junk := filepath.Join(t.TempDir(), "junk.db")
		if err := os.WriteFile(junk, bytes.Repeat([]byte("x"), 16384), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(ctx, junk, filepath.Join(t.TempDir(), "reconciler.db"), false); err == nil {
			t.Fatal("junk was restored")
		}
	})
}

// restoreFails restores b and wants a refusal that wrote nothing.
func restoreFails(t *testing.T, b []byte) {
	t.Helper()
	from := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(from, b, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	_, err := Restore(t.Context(), from, filepath.Join(dir, "reconciler.db"), false)
	if err == nil {
		t.Fatal("a damaged copy was restored")
	}
	t.Logf("refused: %v", err)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore wrote into the data directory: %v", err)
	}
}

// TestCompactShrinksAndKeepsEverything: after retention freed most of the
// file, compact rewrites it smaller with every row, index and the outbox
// sequence intact, and refuses a file a node holds.
func TestCompactShrinksAndKeepsEverything(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "reconciler.db")
	// Filled without fsyncs: the test is about compact, not durability.
	s, err := Open(path, Options{UnsafeNoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		res := mustClaim(t, s, claimReq("acme", "c-"+strconv.Itoa(i), "run_1", i), t0)
		if _, _, err := s.Report(ctx, "acme", res.Row.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: t0.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.PendingEvents(ctx, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[:len(recs)-1] { // one stays, to check the sequence
		if err := s.AckEvents(ctx, r.Seq); err != nil {
			t.Fatal(err)
		}
	}
	lastSeq := recs[len(recs)-1].Seq
	for {
		rows, err := s.ExpiredRows(ctx, t0.Add(time.Hour), 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			break
		}
		if _, err := s.DeleteExpired(ctx, t0.Add(time.Hour), rows); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := Compact(ctx, path); !errors.Is(err, ErrLocked) {
		t.Fatalf("compact of a live file: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, after, err := Compact(ctx, path)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if after >= before {
		t.Fatalf("compact: %d bytes → %d, want smaller", before, after)
	}
	if st, _ := os.Stat(path); st.Size() != after {
		t.Fatalf("file is %d bytes, Compact said %d", st.Size(), after)
	}
	r, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.CheckConsistency(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := r.PendingEvents(ctx, 10)
	if err != nil || len(left) != 1 || left[0].Seq != lastSeq {
		t.Fatalf("outbox after compact: %v, %v; want the one record %d", left, err, lastSeq)
	}
	res := mustClaim(t, r, claimReq("acme", "after-compact", "run_1", 1), t0)
	next, err := r.PendingEvents(ctx, 10)
	if err != nil || !res.Inserted {
		t.Fatal(err)
	}
	for _, rec := range next[1:] {
		if rec.Seq <= lastSeq {
			t.Fatalf("the outbox sequence went back after compact: %d after %d", rec.Seq, lastSeq)
		}
	}
	t.Logf("compact: %d bytes → %d bytes", before, after)
}
