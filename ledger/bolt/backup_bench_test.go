package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// backupBenchEnv runs TestBackupThroughput with that many rows in the file
// (BENCHMARKS.md, "Backup: claims during a copy").
const backupBenchEnv = "RECONCILER_BACKUP_BENCH_ROWS"

// TestBackupThroughput measures claims/s at 64 callers with and without a
// backup running, in the same run: phases of 5 s rotate (without, to a
// file, to io.Discard, three times), each backup phase copying the file
// back to back for the whole phase.
func TestBackupThroughput(t *testing.T) {
	rows, err := strconv.Atoi(os.Getenv(backupBenchEnv))
	if err != nil {
		t.Skipf("set %s=200000 to measure claims during a backup (BENCHMARKS.md)", backupBenchEnv)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "reconciler.db")
	fill, err := Open(path, Options{UnsafeNoSync: true}) // the fill is not what is measured
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(rows); i = next.Add(1) {
				c, err := ledger.NewClaim(benchClaimReq("fill-"+strconv.FormatInt(i, 10)), fill.policy, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := fill.Claim(context.Background(), c); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := fill.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	phase := 5 * time.Second
	var claims atomic.Int64
	stop := make(chan struct{})
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := ledger.NewClaim(benchClaimReq(fmt.Sprintf("m-%d-%d", w, i)), s.policy, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Claim(context.Background(), c); err != nil {
					t.Error(err)
					return
				}
				claims.Add(1)
			}
		}()
	}
	// Phases rotate: no backup, a backup to a file on the same disk
	// (fsynced), a backup to io.Discard (the read transaction and the
	// reads alone).
	var without, withFile, withDiscard []float64
	var copies int
	var copied int64
	for round := range 9 {
		kind := round % 3
		n0, t0 := claims.Load(), time.Now()
		end := t0.Add(phase)
		if kind == 0 {
			time.Sleep(phase)
		}
		for kind != 0 && time.Now().Before(end) {
			var w io.Writer = io.Discard
			var f *os.File
			if kind == 1 {
				if f, err = os.Create(filepath.Join(dir, "backup.db")); err != nil {
					t.Fatal(err)
				}
				w = f
			}
			info, err := s.Backup(context.Background(), w, nil)
			if err != nil {
				t.Fatal(err)
			}
			if f != nil {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			copies++
			copied += info.Bytes
		}
		rate := float64(claims.Load()-n0) / time.Since(t0).Seconds()
		switch kind {
		case 0:
			without = append(without, rate)
		case 1:
			withFile = append(withFile, rate)
		default:
			withDiscard = append(withDiscard, rate)
		}
	}
	close(stop)
	wg.Wait()
	fi, _ := os.Stat(path)
	t.Logf("file: %d rows before, %.0f MiB; %d backups of %.0f MiB on average during the backup phases",
		rows, float64(fi.Size())/(1<<20), copies, float64(copied)/float64(max(copies, 1))/(1<<20))
	t.Logf("claims/s without a backup:             %.0f", without)
	t.Logf("claims/s during backups to a file:     %.0f", withFile)
	t.Logf("claims/s during backups to io.Discard: %.0f", withDiscard)
}

func benchClaimReq(key string) ledger.ClaimRequest {
	return ledger.ClaimRequest{
		Tenant: "acme", RunID: "run_1", Tool: "stripe.create_payment_intent", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Key: key, ReplayWindow: 24 * time.Hour,
		Intent:  json.RawMessage(`{"amount":1050,"currency":"usd"}`),
		Request: &ledger.Request{Method: "POST", Path: "/v1/payment_intents", Body: "amount=1050&currency=usd&customer=cus_1"},
	}
}
