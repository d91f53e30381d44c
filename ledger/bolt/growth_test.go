package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// TestClaimGrowth is the scale run of BENCHMARKS.md ("claims/s as the
// ledger grows"): 64 goroutines claim fresh minted keys until the store
// holds BOLT_GROWTH_ROWS rows, and every window of BOLT_GROWTH_WINDOW rows
// (default 50,000) logs its claims/s, the file's bytes per row and the
// process's RssAnon. BOLT_GROWTH_NOWAL=1 opens the store without its
// write-ahead log; BOLT_GROWTH_DIR puts the file on another disk.
// BOLT_GROWTH_KEYS=ascending claims business keys in ascending order
// instead (rows and keys then append to their last page, local_ids stays
// hash-ordered): what sequence-ordered row ids would buy, measured on
// today's layout. Skipped
// unless BOLT_GROWTH_ROWS is set: it runs for minutes. BOLT_GROWTH_HEAP
// names a file for a heap profile taken at the end, under load, and
// BOLT_GROWTH_CPU one for a CPU profile of the whole run. Each window also
// logs the pages bbolt wrote per claim (its transactions' page writes: the
// flusher's with the log, the committer's without).
func TestClaimGrowth(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("BOLT_GROWTH_ROWS"))
	if total <= 0 {
		t.Skip("set BOLT_GROWTH_ROWS (e.g. 1000000) to run the scale run")
	}
	window := 50_000
	if w, _ := strconv.Atoi(os.Getenv("BOLT_GROWTH_WINDOW")); w > 0 {
		window = w
	}
	dir := os.Getenv("BOLT_GROWTH_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "growth-"); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	path := filepath.Join(dir, "ledger.db")
	s, err := Open(path, Options{Policy: ledger.DefaultPolicy(), NoWAL: os.Getenv("BOLT_GROWTH_NOWAL") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cp := os.Getenv("BOLT_GROWTH_CPU"); cp != "" {
		f, err := os.Create(cp)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	ctx := context.Background()
	ascending := os.Getenv("BOLT_GROWTH_KEYS") == "ascending"
	var next atomic.Int64
	var failed atomic.Value
	var done atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				c := benchClaim(t, i)
				if ascending {
					c = ascendingClaim(t, i)
				}
				res, err := s.Claim(ctx, c)
				if err == nil && res.Decision != ledger.DecisionProceed {
					err = fmt.Errorf("claim %d: %s", i, res.Decision)
				}
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		})
	}
	start, mark, last := time.Now(), time.Now(), int64(0)
	lastPages := pagesWritten(s)
	for {
		time.Sleep(20 * time.Millisecond)
		n := done.Load()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatal(err)
		}
		if n-last >= int64(window) || n >= int64(total) {
			el := time.Since(mark)
			fi, _ := os.Stat(path)
			var size int64
			if fi != nil {
				size = fi.Size()
			}
			pages := pagesWritten(s)
			t.Logf("rows %8d  claims/s %6.0f  pages/claim %5.2f  file %5d B/row  RssAnon %s", n, float64(n-last)/el.Seconds(),
				float64(pages-lastPages)/float64(max(n-last, 1)), size/max(n, 1), rssAnon())
			mark, last, lastPages = time.Now(), n, pages
		}
		if n >= int64(total) {
			if hp := os.Getenv("BOLT_GROWTH_HEAP"); hp != "" {
				// The live heap under load, before Close frees it.
				f, err := os.Create(hp)
				if err == nil {
					err = pprof.WriteHeapProfile(f)
					_ = f.Close()
				}
				if err != nil {
					t.Errorf("heap profile: %v", err)
				}
			}
			break
		}
	}
	wg.Wait()
	t.Logf("%d rows in %s (%.0f claims/s overall)", total, time.Since(start).Round(time.Second), float64(total)/time.Since(start).Seconds())
	// Each bucket's B+tree once bbolt holds everything: which ones a
	// claim's random inserts spread over (a hash-ordered bucket of L
	// leaves dirties about min(batch, L) leaves per flush batch).
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			b := tx.Bucket(name)
			if b == nil {
				continue // the schema-2 rows bucket
			}
			st := b.Stats()
			if st.KeyN == 0 {
				continue
			}
			t.Logf("bucket %-14s keys %8d  leaf pages %7d (+%7d overflow, %3.0f%% used)  branch pages %5d  depth %d", name, st.KeyN,
				st.LeafPageN, st.LeafOverflowN, 100*float64(st.LeafInuse)/float64(max(1, (st.LeafPageN+st.LeafOverflowN)*s.db.Info().PageSize)),
				st.BranchPageN, st.Depth)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// rssAnon reads the process's anonymous resident memory (Linux).
func rssAnon() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "RssAnon:") {
			return strings.Join(strings.Fields(l)[1:], " ")
		}
	}
	return "?"
}

// ascendingClaim is benchClaim under the business key ord_<i>, zero-padded
// so that byte order is claim order.
func ascendingClaim(tb testing.TB, i int) ledger.Claim {
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run_bench", Tool: "stripe.payment_intents.create", ToolCallID: "call_" + strconv.Itoa(i),
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, ReplayWindow: 24 * time.Hour, Key: fmt.Sprintf("ord_%012d", i),
		Intent: json.RawMessage(`{"amount":` + strconv.Itoa(1000+i) + `,"currency":"usd","customer":"cus_bench"}`),
	}, ledger.DefaultPolicy(), t0.Add(time.Duration(i)*time.Microsecond))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
