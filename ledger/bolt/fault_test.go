package bolt

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// syncBuffer is a log sink tests read while the store writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// failingFile swaps the store's file descriptor for another (dup3): every
// write bbolt makes then fails as writes to that file fail — /dev/full
// answers ENOSPC, a read-only descriptor EBADF — while reads, which go
// through the memory map, go on. heal puts the real file back.
type failingFile struct {
	fd    int
	saved int
}

func breakFile(t *testing.T, f *os.File, with string, flag int) *failingFile {
	t.Helper()
	bad, err := os.OpenFile(with, flag, 0)
	if err != nil {
		t.Skipf("cannot open %s: %v", with, err)
	}
	defer bad.Close()
	fd := int(f.Fd())
	saved, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(bad.Fd()), fd, syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	ff := &failingFile{fd: fd, saved: saved}
	t.Cleanup(ff.heal)
	return ff
}

func (f *failingFile) heal() {
	if f.saved < 0 {
		return
	}
	if err := syscall.Dup3(f.saved, f.fd, syscall.O_CLOEXEC); err != nil {
		panic(err)
	}
	_ = syscall.Close(f.saved)
	f.saved = -1
}

// TestFailingWritesRecover: with the file layer failing (a full disk, an
// I/O error), claims fail with ErrUnavailable and nothing is half-written;
// the committer survives; one log line says what happened; Writable and
// WriteErr say it too; once writes succeed again the store serves at once
// and the file is consistent, reopened.
func TestFailingWritesRecover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		with     string
		flag     int
		diskFull bool
		logMsg   string
	}{
		{"disk full (ENOSPC)", "/dev/full", os.O_WRONLY, true, "bolt: disk full"},
		{"write error (EBADF)", "/dev/null", os.O_RDONLY, false, "bolt: writes fail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var file *os.File
			logs := &syncBuffer{}
			path := filepath.Join(t.TempDir(), "reconciler.db")
			s, err := Open(path, Options{
				// bbolt's own file failing under a commit per group; with
				// the write-ahead log, bbolt's failures reach callers only
				// once the log's writes waiting for it pass walMaxPending.
				NoWAL:  true,
				Logger: slog.New(slog.NewTextHandler(logs, nil)),
				openFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
					f, err := os.OpenFile(name, flag, mode)
					file = f
					return f, err
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Grow the file first: bbolt then writes pages into room it
			// has, as on a disk that filled up after the file grew.
			before := mustClaim(t, s, claimReq("acme", "before", "run_1", 1), t0).Row
			if err := s.Writable(ctx); err != nil {
				t.Fatalf("Writable before the fault: %v", err)
			}

			ff := breakFile(t, file, tc.with, tc.flag)
			var failed []string
			for i := range 5 {
				c, err := ledger.NewClaim(claimReq("acme", "during-"+string(rune('a'+i)), "run_1", 10+i), s.policy, t0)
				if err != nil {
					t.Fatal(err)
				}
				_, err = s.Claim(ctx, c)
				if !errors.Is(err, ledger.ErrUnavailable) {
					t.Fatalf("claim during the fault: %v, want ErrUnavailable", err)
				}
				if errors.Is(err, ErrDiskFull) != tc.diskFull {
					t.Fatalf("claim error %v: disk full %v, want %v", err, !tc.diskFull, tc.diskFull)
				}
				failed = append(failed, c.Row.Key)
			}
			// Reads go on.
			if _, err := s.Get(ctx, "acme", before.Key); err != nil {
				t.Fatalf("read during the fault: %v", err)
			}
			werr := s.Writable(ctx)
			if werr == nil || errors.Is(werr, ErrDiskFull) != tc.diskFull {
				t.Fatalf("Writable during the fault = %v", werr)
			}
			if n := strings.Count(logs.String(), tc.logMsg); n != 1 {
				t.Fatalf("%d log lines say %q, want 1:\n%s", n, tc.logMsg, logs.String())
			}

			ff.heal()
			// A probe finds the disk writable again (at most every second).
			deadline := time.Now().Add(5 * time.Second)
			for s.Writable(ctx) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("still not writable after the fault ended: %v", s.Writable(ctx))
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !strings.Contains(logs.String(), "bolt: writes succeed again") {
				t.Fatalf("no recovery log line:\n%s", logs.String())
			}
			for _, k := range failed {
				if _, err := s.Get(ctx, "acme", k); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("a failed claim left row %s: %v", k, err)
				}
			}
			// The vendor's retry and the agent's retry now succeed.
			after := mustClaim(t, s, claimReq("acme", "during-a", "run_1", 10), t0)
			if !after.Inserted {
				t.Fatal("the retried claim was not inserted")
			}
			if err := s.CheckConsistency(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := CheckFile(ctx, path); err != nil {
				t.Fatalf("the file after the fault: %v", err)
			}
			r, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for _, k := range []string{before.Key, "during-a"} {
				if _, err := r.Get(ctx, "acme", k); err != nil {
					t.Fatalf("row %s after reopening: %v", k, err)
				}
			}
		})
	}
}
