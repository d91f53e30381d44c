package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The power-loss test: the log's file layer (faultFS) and the bbolt file
// (a copy taken after each batch commit returned, i.e. after its
// fdatasyncs) keep only what was fsynced. At a random moment the power
// is "cut": every byte the log wrote but did not fsync is dropped (a
// random part of it survives, possibly torn), a segment whose directory
// entry was never fsynced disappears, and bbolt's file goes back to its
// last completed commit. The store is abandoned without Close, reopened,
// and checked: every acknowledged write is there, no transition is half
// applied, and each acknowledged transition's event is in the outbox or
// was acknowledged by the consumer, exactly once.

var errPowerCut = errors.New("power cut")

type faultFS struct {
	osFS
	mu    sync.Mutex
	cut   bool
	files map[string]*faultState
	// cutAtSync > 0 cuts the power inside that many-th fsync: the
	// record is written, not synced, and its group is not acknowledged.
	cutAtSync int
}

type faultState struct {
	written, synced int64
	dirSynced       bool
	handle          *faultFile
}

type faultFile struct {
	fs   *faultFS
	name string
	f    walFile
}

func newFaultFS() *faultFS { return &faultFS{files: map[string]*faultState{}} }

// Create zero-fills and fsyncs the file (osFS does): its zeros are durable.
func (fs *faultFS) Create(name string, size int64) (walFile, error) {
	fs.mu.Lock()
	if fs.cut {
		fs.mu.Unlock()
		return nil, errPowerCut
	}
	fs.mu.Unlock()
	f, err := fs.osFS.Create(name, size)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	ff := &faultFile{fs: fs, name: name, f: f}
	fs.files[name] = &faultState{handle: ff}
	return ff, nil
}

// Rename moves the file's state; the new name is durable only after SyncDir.
func (fs *faultFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.cut {
		return errPowerCut
	}
	if err := fs.osFS.Rename(oldname, newname); err != nil {
		return err
	}
	st := fs.files[oldname]
	delete(fs.files, oldname)
	if st == nil {
		st = &faultState{}
	}
	st.dirSynced = false
	fs.files[newname] = st
	return nil
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.cut {
		return 0, errPowerCut
	}
	n, err := f.f.WriteAt(p, off)
	st := f.fs.files[f.name]
	if st == nil { // renamed: the state moved with the name
		for name, s := range f.fs.files {
			if s.handle == f {
				st, f.name = s, name
			}
		}
	}
	st.written = max(st.written, off+int64(n))
	return n, err
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.cut {
		return errPowerCut
	}
	if f.fs.cutAtSync > 0 {
		if f.fs.cutAtSync--; f.fs.cutAtSync == 0 {
			f.fs.cut = true
			return errPowerCut
		}
	}
	for _, st := range f.fs.files {
		if st.handle == f {
			st.synced = st.written
		}
	}
	return nil
}

func (f *faultFile) Close() error { return f.f.Close() }

func (fs *faultFS) SyncDir(dir string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.cut {
		return errPowerCut
	}
	for name, st := range fs.files {
		if filepath.Dir(name) == dir {
			st.dirSynced = true
		}
	}
	return nil
}

func (fs *faultFS) Truncate(name string, size int64) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.cut {
		return errPowerCut
	}
	if err := fs.osFS.Truncate(name, size); err != nil {
		return err
	}
	if st := fs.files[name]; st != nil {
		st.written, st.synced = size, size
	}
	return nil
}

func (fs *faultFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.cut {
		return errPowerCut
	}
	delete(fs.files, name)
	return fs.osFS.Remove(name)
}

// powerCut drops what was not fsynced. Of each file's unsynced tail a
// random prefix survives (the disk wrote part of it), sometimes with its
// last byte garbled (a torn sector).
func (fs *faultFS) powerCut(rng *rand.Rand) (torn int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.cut = true
	fs.cutAtSync = 0
	for name, st := range fs.files {
		if !st.dirSynced {
			_ = os.Remove(name)
			continue
		}
		keep := st.synced
		if extra := st.written - st.synced; extra > 0 {
			keep += rng.Int64N(extra + 1)
			torn++
		}
		// What was written after keep never reached the disk: the
		// preallocated zeros are still there.
		if f, err := os.OpenFile(name, os.O_WRONLY, 0); err == nil {
			if st.written > keep {
				_, _ = f.WriteAt(make([]byte, st.written-keep), keep)
			}
			if keep > st.synced && rng.IntN(2) == 0 {
				_, _ = f.WriteAt([]byte{0xA5}, keep-1)
			}
			_ = f.Close()
		}
	}
	return torn
}

// abandon stops s as a power cut would: no flush into bbolt, no log
// cleanup; the goroutines end and the files are closed.
func abandon(s *Store) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		<-s.loopDone
		if s.wal != nil {
			close(s.wal.stop)
			<-s.wal.done
			_ = s.wal.log.closeOnly()
		}
		_ = s.db.Close()
		s.closeErr = errClosed
	})
}

type plEvent struct{ key, status string }

func TestPowerLoss(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	ctx := context.Background()

	acked := map[int]int{}          // key index → highest acknowledged level
	ackDeleted := map[uint64]bool{} // seqs whose AckEvents was acknowledged
	seen := map[uint64]plEvent{}    // every seq ever read, with its event
	var next int
	rounds, cuts, torn := 12, 0, 0
	for round := range rounds {
		fs := newFaultFS()
		if round%2 == 1 {
			fs.cutAtSync = 1 + rng.IntN(60)
		}
		var imgMu sync.Mutex
		var image []byte
		snap := func() {
			imgMu.Lock()
			defer imgMu.Unlock()
			fs.mu.Lock()
			cut := fs.cut
			fs.mu.Unlock()
			if cut {
				return // this commit never reached the disk
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("copy bbolt file: %v", err)
			}
			image = b
		}
		opts := Options{
			Policy: ledger.DefaultPolicy(), walFS: fs, afterBoltCommit: snap,
			WALSegmentSize: int64(8<<10 + rng.IntN(64<<10)), WALFlushInterval: time.Duration(1+rng.IntN(40)) * time.Millisecond,
		}
		s, err := Open(path, opts)
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		snap() // what Open committed (replay) is durable

		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					i := next
					next++
					mu.Unlock()
					level, err := plSteps(ctx, s, i)
					mu.Lock()
					if level > acked[i] {
						acked[i] = level
					}
					mu.Unlock()
					if err != nil {
						return // the cut: nothing more is acknowledged
					}
				}
			})
		}
		wg.Go(func() { // the relay: read, "publish", acknowledge
			for {
				select {
				case <-stop:
					return
				default:
				}
				recs, err := s.PendingEvents(ctx, 64)
				if err != nil {
					return
				}
				var seqs []uint64
				mu.Lock()
				for _, r := range recs {
					ev := plEvent{r.Event.Key, r.Event.Status}
					if old, ok := seen[r.Seq]; ok && old != ev {
						t.Errorf("seq %d reused: %v, then %v", r.Seq, old, ev)
					}
					seen[r.Seq] = ev
					seqs = append(seqs, r.Seq)
				}
				mu.Unlock()
				if len(seqs) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				if err := s.AckEvents(ctx, seqs...); err != nil {
					return
				}
				mu.Lock()
				for _, q := range seqs {
					ackDeleted[q] = true
				}
				mu.Unlock()
			}
		})
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		torn += fs.powerCut(rng)
		cuts++
		close(stop)
		wg.Wait()
		abandon(s)
		imgMu.Lock()
		if err := os.WriteFile(path, image, 0o600); err != nil {
			t.Fatal(err)
		}
		imgMu.Unlock()

		plVerify(t, path, round, acked, ackDeleted, seen)
	}
	if len(acked) == 0 || len(ackDeleted) == 0 {
		t.Fatal("nothing was acknowledged: the test proved nothing")
	}
	t.Logf("%d power cuts (%d log files cut mid-write), %d keys acknowledged, %d events acknowledged by the consumer", cuts, torn, len(acked), len(ackDeleted))
}

// plSteps claims key i, reports a timeout and applies success, returning
// the highest level acknowledged.
func plSteps(ctx context.Context, s *Store, i int) (int, error) {
	key := "pl-" + strconv.Itoa(i)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: crashTenant, RunID: "run_pl", Tool: "email.send", Vendor: "resend",
		ToolClass: ledger.ClassWriteLedger, Key: key,
		Intent: json.RawMessage(fmt.Sprintf(`{"to":"u%d@example.com","template_id":"welcome"}`, i)),
	}, s.policy, crashBase)
	if err != nil {
		return 0, err
	}
	if _, err := s.Claim(ctx, c); err != nil {
		return 0, err
	}
	if _, _, err := s.Report(ctx, crashTenant, key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: crashBase.Add(time.Second)}); err != nil {
		return ackClaimed, err
	}
	ev := ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "msg_" + strconv.Itoa(i),
		VendorEventID: "evt_" + strconv.Itoa(i), At: crashBase.Add(2 * time.Second)}
	if _, _, err := s.Apply(ctx, crashTenant, key, ev); err != nil {
		return ackUnknown, err
	}
	return ackSucceeded, nil
}

func plVerify(t *testing.T, path string, round int, acked map[int]int, ackDeleted map[uint64]bool, seen map[uint64]plEvent) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(path, Options{Policy: ledger.DefaultPolicy()})
	if err != nil {
		t.Fatalf("round %d: reopen after the power cut: %v", round, err)
	}
	defer s.Close()
	if err := s.CheckConsistency(ctx); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	status := map[string]ledger.Status{}
	page := ledger.ListQuery{Tenant: crashTenant, Limit: ledger.MaxListLimit}
	for {
		p, err := s.List(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			status[r.Key] = r.Status
		}
		if p.NextCursor == "" {
			break
		}
		page.Cursor = p.NextCursor
	}
	for i, level := range acked {
		key := "pl-" + strconv.Itoa(i)
		r, err := s.Get(ctx, crashTenant, key)
		if err != nil {
			t.Fatalf("round %d: key %s acknowledged at level %d: %v", round, key, level, err)
		}
		ok := true
		switch level {
		case ackUnknown:
			ok = r.Status == ledger.StatusUnknown || r.Status == ledger.StatusSucceeded
		case ackSucceeded:
			ok = r.Status == ledger.StatusSucceeded
		}
		if !ok {
			t.Fatalf("round %d: key %s acknowledged at level %d, status %s", round, key, level, r.Status)
		}
	}
	recs, err := s.PendingEvents(ctx, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	// Each transition a row made has one event: pending now, or read by
	// the consumer (acknowledged or in flight at the cut) and not pending.
	holders := map[plEvent][]uint64{}
	pending := map[uint64]bool{}
	for _, r := range recs {
		ev := plEvent{r.Event.Key, r.Event.Status}
		if ackDeleted[r.Seq] {
			t.Fatalf("round %d: event %d (%v) is back in the outbox after its acknowledgement: it would be published twice", round, r.Seq, ev)
		}
		if old, ok := seen[r.Seq]; ok && old != ev {
			t.Fatalf("round %d: seq %d was %v, now %v", round, r.Seq, old, ev)
		}
		pending[r.Seq] = true
		holders[ev] = append(holders[ev], r.Seq)
	}
	for q, ev := range seen {
		if !pending[q] {
			holders[ev] = append(holders[ev], q)
		}
	}
	for ev, qs := range holders {
		st, ok := status[ev.key]
		want := ok && (ev.status == "unknown" && (st == ledger.StatusUnknown || st == ledger.StatusSucceeded) ||
			ev.status == "succeeded" && st == ledger.StatusSucceeded)
		if !want {
			t.Fatalf("round %d: event %v (seqs %v) but the row is %q: a transition half applied", round, ev, qs, st)
		}
		if len(qs) != 1 {
			t.Fatalf("round %d: event %v held %d times (seqs %v)", round, ev, len(qs), qs)
		}
	}
	for key, st := range status {
		for _, want := range []string{"unknown", "succeeded"} {
			need := want == "unknown" && st != ledger.StatusPending || want == "succeeded" && st == ledger.StatusSucceeded
			if _, ok := holders[plEvent{key, want}]; need && !ok {
				t.Fatalf("round %d: row %s is %s but its %s event is lost", round, key, st, want)
			}
		}
	}
}
