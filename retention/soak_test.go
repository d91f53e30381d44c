package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/retention"
)

// soakEnv runs TestRetentionSoak: RECONCILER_RETENTION_SOAK=60s runs each
// half for 60 s (BENCHMARKS.md, "Retention: the file stops growing").
const soakEnv = "RECONCILER_RETENTION_SOAK"

// TestRetentionSoak measures the file under a steady claim load — claim,
// report success, the relay acknowledges the event — without retention
// and then with a short one, printing the file's size every few seconds.
func TestRetentionSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(soakEnv))
	if err != nil {
		t.Skipf("set %s=60s to run the retention soak (BENCHMARKS.md)", soakEnv)
	}
	for _, keep := range []time.Duration{0, 5 * time.Second} {
		t.Run("settled_rows="+keep.String(), func(t *testing.T) { soak(t, d, keep) })
	}
}

func soak(t *testing.T, d, keep time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "reconciler.db")
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if keep > 0 {
		j, err := retention.New(st, retention.Options{SettledRows: keep, Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = j.Run(ctx) }()
	}
	// The relay: acknowledges what the outbox holds.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			recs, err := st.PendingEvents(ctx, 1000)
			if err == nil && len(recs) > 0 {
				seqs := make([]uint64, len(recs))
				for i, r := range recs {
					seqs[i] = r.Seq
				}
				_ = st.AckEvents(ctx, seqs...)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var claims atomic.Int64
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				c, err := ledger.NewClaim(ledger.ClaimRequest{
					Tenant: "acme", RunID: "run-1", Tool: "stripe.charges.create", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
					Intent: json.RawMessage(`{"w":` + strconv.Itoa(w) + `,"i":` + strconv.Itoa(i) + `}`), ReplayWindow: time.Hour,
					Request: &ledger.Request{Method: "POST", Path: "/v1/charges", Body: "amount=1050&currency=usd"},
				}, ledger.DefaultPolicy(), time.Now())
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := st.Claim(ctx, c); err != nil {
					return
				}
				if _, _, err := st.Report(ctx, "acme", c.Row.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "ch_1", At: time.Now()}); err != nil {
					return
				}
				claims.Add(1)
			}
		}()
	}
	start := time.Now()
	step := d / 6
	for i := 1; i <= 6; i++ {
		time.Sleep(step)
		fi, _ := os.Stat(path)
		fs, _ := st.FileStats(ctx)
		counts, _ := st.CountRows(ctx)
		rows := counts[ledger.StatusSucceeded] + counts[ledger.StatusPending]
		t.Logf("settled_rows=%s t=%s claims=%d rows=%d high_water=%.1f MiB file=%.0f MiB free_pages=%d",
			keep, time.Since(start).Round(time.Second), claims.Load(), rows, float64(fs.Size)/(1<<20), float64(fi.Size())/(1<<20), fs.FreePages)
	}
	fmt.Fprintf(os.Stderr, "settled_rows=%s: %.0f claims/s over %s\n", keep, float64(claims.Load())/time.Since(start).Seconds(), d)
}
