package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// Benchmarks of BENCHMARKS.md (run them with scripts/bench.sh). Every
// write benchmark is durable: fsync on, one answer per commit.

// benchCallers are the concurrency levels; 1 is the serial case.
var benchCallers = []int{1, 8, 64, 256}

// runCallers runs b.N calls of fn from callers goroutines and reports the
// throughput; each call gets a distinct index.
func runCallers(b *testing.B, callers int, unit string, fn func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if err := fn(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
}

// benchClaim is the i-th distinct claim of a benchmark run (a fresh intent,
// so a minted key: the common case).
func benchClaim(tb testing.TB, i int) ledger.Claim {
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run_bench", Tool: "stripe.payment_intents.create", ToolCallID: "call_" + strconv.Itoa(i),
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, ReplayWindow: 24 * time.Hour,
		Intent: json.RawMessage(`{"amount":` + strconv.Itoa(1000+i) + `,"currency":"usd","customer":"cus_bench"}`),
	}, ledger.DefaultPolicy(), t0.Add(time.Duration(i)*time.Microsecond))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// reportGroups reports the mean group size and pages written per group;
// with BOLT_BENCH_DETAIL set, also where a group's time went.
func reportGroups(b *testing.B, s *Store) {
	st := s.Stats()
	if st.Groups > 0 {
		b.ReportMetric(float64(st.Ops)/float64(st.Groups), "ops/group")
		ts := s.db.Stats().TxStats
		b.ReportMetric(float64(ts.GetWrite())/float64(st.Groups), "pages/group")
		if os.Getenv("BOLT_BENCH_DETAIL") != "" {
			b.ReportMetric(float64(ts.GetWriteTime().Microseconds())/float64(st.Groups), "write+sync-µs/group")
			b.ReportMetric(float64(ts.GetSpillTime().Microseconds())/float64(st.Groups), "spill-µs/group")
			b.ReportMetric(float64(st.RunTime.Microseconds())/float64(st.Groups), "run-µs/group")
			b.ReportMetric(float64(st.CommitTime.Microseconds())/float64(st.Groups), "commit-µs/group")
		}
	}
}

func BenchmarkClaim(b *testing.B) {
	for _, callers := range benchCallers {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := mustOpen(b, Options{Policy: ledger.DefaultPolicy()})
			// BOLT_BENCH_YIELDS overrides the committer's yield budget
			// (0 turns the yielding off; see take) for the comparison in
			// BENCHMARKS.md.
			if y := os.Getenv("BOLT_BENCH_YIELDS"); y != "" {
				s.maxYields, _ = strconv.Atoi(y)
			}
			ctx := context.Background()
			runCallers(b, callers, "claims/s", func(i int) error {
				res, err := s.Claim(ctx, benchClaim(b, i))
				if err == nil && res.Decision != ledger.DecisionProceed {
					err = fmt.Errorf("claim %d: %s", i, res.Decision)
				}
				return err
			})
			reportGroups(b, s)
		})
	}
}

// BenchmarkClaimOptions measures the bbolt options the store sets, at 64
// callers with one reader scanning the due index throughout (the resolver's
// load): the default (map freelist, no freelist sync, 1 GiB initial map),
// the freelist written on every commit, and a map that starts small and is
// remapped as the file grows (a remap waits for open read transactions).
func BenchmarkClaimOptions(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		{"freelist_sync", Options{FreelistSync: true}},
		{"small_mmap", Options{InitialMmapSize: 1}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tc.opts.Policy = ledger.DefaultPolicy()
			s := mustOpen(b, tc.opts)
			ctx, cancel := context.WithCancel(context.Background())
			var reader sync.WaitGroup
			reader.Go(func() {
				for ctx.Err() == nil {
					_, _ = s.Due(ctx, t0.Add(time.Hour), 100)
				}
			})
			runCallers(b, 64, "claims/s", func(i int) error {
				_, err := s.Claim(context.Background(), benchClaim(b, i))
				return err
			})
			cancel()
			reader.Wait()
			reportGroups(b, s)
		})
	}
}

func BenchmarkReport(b *testing.B) {
	for _, callers := range benchCallers {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := mustOpen(b, Options{Policy: ledger.DefaultPolicy()})
			ctx := context.Background()
			keys := make([]string, b.N)
			rows := make([]ledger.Row, b.N)
			for i := range b.N {
				rows[i] = benchClaim(b, i).Row
				keys[i] = rows[i].Key
			}
			if err := bulkPut(s.db, rows, 0); err != nil {
				b.Fatal(err)
			}
			runCallers(b, callers, "reports/s", func(i int) error {
				o := ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(time.Second + time.Duration(i)*time.Microsecond)}
				_, ch, err := s.Report(ctx, "acme", keys[i], o)
				if err == nil && !ch.Changed {
					err = fmt.Errorf("report %d: no transition", i)
				}
				return err
			})
			reportGroups(b, s)
		})
	}
}

// BenchmarkBatchBaseline is bbolt's own db.Batch writing the same bytes a
// claim writes (the encoded row, its index entries — a minted key has no
// keys entry — and the pending count) on the same bbolt options, so the
// difference to BenchmarkClaim is the commit strategy, not the data.
func BenchmarkBatchBaseline(b *testing.B) {
	for _, callers := range benchCallers {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := mustOpen(b, Options{})
			db := s.db
			runCallers(b, callers, "writes/s", func(i int) error {
				r := benchClaim(b, i).Row
				v, err := encodeRow(r)
				if err != nil {
					return err
				}
				return db.Batch(func(tx *bolt.Tx) error {
					rk := rowKey(r.Tenant, r.Key)
					n, err := tx.Bucket(bucketRows).NextSequence()
					if err != nil {
						return err
					}
					seq := seqKey(n)
					puts := []struct{ bucket, k, v []byte }{
						{bucketRows, seq, v},
						{bucketLocalIDs, []byte(r.MetadataLocalID), lidValue(seq, rk)},
						{bucketDue, dueKey(&r), nil},
						{bucketByTime, byTimeKey(&r), nil},
					}
					if keyIndexed(&r) {
						puts = append(puts, struct{ bucket, k, v []byte }{bucketKeys, keysKey(r.Key, r.Tenant), seq})
					}
					for _, p := range puts {
						if err := tx.Bucket(p.bucket).Put(p.k, p.v); err != nil {
							return err
						}
					}
					return addCount(boltBucket{tx.Bucket(bucketMeta)}, r.Status, 1)
				})
			})
		})
	}
}

// BenchmarkPostgresClaim is the hand-rolled PostgreSQL claim: one INSERT …
// ON CONFLICT DO NOTHING per call from a pgxpool, synchronous_commit on,
// into a fresh table with the row's unique indexes and its due index.
func BenchmarkPostgresClaim(b *testing.B) {
	url := os.Getenv("RECONCILER_TEST_POSTGRES_URL")
	if url == "" {
		b.Skip("set RECONCILER_TEST_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1:5432/test) to run the PostgreSQL baseline")
	}
	for _, callers := range benchCallers {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = int32(min(callers, 64)) // leave room under max_connections=100 for others
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			if err := pool.Ping(ctx); err != nil {
				b.Skipf("PostgreSQL at RECONCILER_TEST_POSTGRES_URL is unreachable: %v", err)
			}
			warmPool(b, pool, int(cfg.MaxConns))
			table := fmt.Sprintf("bench_claims_%d", time.Now().UnixNano())
			ddl := []string{
				"SET synchronous_commit = on",
				`CREATE TABLE ` + table + ` (tenant text NOT NULL, key text NOT NULL, local_id text NOT NULL UNIQUE,
				  status text NOT NULL, next_check_at timestamptz, first_seen_at timestamptz NOT NULL, row jsonb NOT NULL,
				  PRIMARY KEY (tenant, key))`,
				`CREATE INDEX ` + table + `_due ON ` + table + ` (next_check_at) WHERE status IN ('pending','unknown')`,
				`CREATE INDEX ` + table + `_by_time ON ` + table + ` (tenant, first_seen_at DESC, key DESC)`,
			}
			for _, q := range ddl {
				if _, err := pool.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			defer pool.Exec(context.Background(), "DROP TABLE "+table) //nolint:errcheck // best effort
			if v := pgSetting(b, pool, "synchronous_commit"); v != "on" {
				b.Fatalf("synchronous_commit = %s, want on", v)
			}
			insert := `INSERT INTO ` + table + ` (tenant, key, local_id, status, next_check_at, first_seen_at, row)
				VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`
			runCallers(b, callers, "claims/s", func(i int) error {
				r := benchClaim(b, i).Row
				v, err := json.Marshal(r)
				if err != nil {
					return err
				}
				tag, err := pool.Exec(ctx, insert, r.Tenant, r.Key, r.MetadataLocalID, string(r.Status), r.NextCheckAt, r.FirstSeenAt, v)
				if err == nil && tag.RowsAffected() != 1 {
					err = fmt.Errorf("claim %d: not inserted", i)
				}
				return err
			})
		})
	}
}

// warmPool opens every connection before the timer starts: a backend
// start-up costs milliseconds and is not part of a claim.
func warmPool(b *testing.B, pool *pgxpool.Pool, n int) {
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

func pgSetting(b *testing.B, pool *pgxpool.Pool, name string) string {
	var v string
	if err := pool.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&v); err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkDue scans the due index for 1,000 due rows, in a file of 1,000
// rows and in one with 1,000,000 settled rows besides: the due index holds
// open rows only, so the two should cost the same.
func BenchmarkDue(b *testing.B) {
	for _, tc := range []struct {
		name    string
		settled int
	}{{"rows=1k", 0}, {"rows=1M+1k", 1_000_000}} {
		b.Run(tc.name, func(b *testing.B) {
			path := dueFixture(b, tc.settled)
			s, err := Open(path, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			now := t0.Add(time.Hour)
			rows, err := s.Due(ctx, now, dueOpen) // warm the page cache, check the fixture
			if err != nil || len(rows) != dueOpen {
				b.Fatalf("due = %d rows, %v; want %d", len(rows), err, dueOpen)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := s.Due(ctx, now, dueOpen); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(dueOpen), "rows/op")
		})
	}
}

const dueOpen = 1000

var (
	dueFixtures   = map[int]string{}
	dueFixturesMu sync.Mutex
)

// dueFixture builds, once per process, a closed ledger file holding dueOpen
// open rows due before t0+1h and settled settled rows, written in large
// direct bbolt transactions through the store's own PutRow (same encoding,
// same indexes). TestMain removes it.
func dueFixture(b *testing.B, settled int) string {
	dueFixturesMu.Lock()
	defer dueFixturesMu.Unlock()
	if p, ok := dueFixtures[settled]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "bolt-bench-due-")
	if err != nil {
		b.Fatal(err)
	}
	benchDirs = append(benchDirs, dir)
	path := filepath.Join(dir, "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	tmpl := benchClaim(b, 0).Row
	const batch = 50_000
	for lo := 0; lo < settled+dueOpen; lo += batch {
		rows := make([]ledger.Row, 0, batch)
		for i := lo; i < min(lo+batch, settled+dueOpen); i++ {
			r := tmpl.Clone()
			r.Key = fmt.Sprintf("%032x%032x", i, 0) // minted-key shape, sequential: a fast bulk load
			r.MetadataLocalID = ledger.LocalID(r.Tenant, r.Key, true)
			r.ToolCallID = "call_" + strconv.Itoa(i)
			r.FirstSeenAt = t0.Add(-time.Duration(settled+dueOpen-i) * time.Millisecond)
			if i < settled {
				r.Status, r.NextCheckAt, r.SucceededAt, r.UpstreamReceiptID = ledger.StatusSucceeded, time.Time{}, r.FirstSeenAt, "pi_"+strconv.Itoa(i)
				r.Resolution = &ledger.Resolution{Source: ledger.SourceWebhook, VendorEventID: "evt_" + strconv.Itoa(i), At: r.FirstSeenAt}
			} else {
				r.NextCheckAt = t0.Add(time.Duration(i-settled) * time.Second)
			}
			rows = append(rows, r)
		}
		if err := bulkPut(s.db, rows, 0.95); err != nil {
			b.Fatal(err)
		}
	}
	if settled > 0 {
		fi, _ := os.Stat(path)
		b.Logf("built %d-row fixture in %s (%d MiB)", settled+dueOpen, time.Since(start).Round(time.Millisecond), fi.Size()>>20)
	}
	dueFixtures[settled] = path
	return path
}

// bulkPut inserts rows through PutRow in one direct bbolt transaction. A
// fill above zero packs the pages of a sequential load (bbolt splits at
// half a page by default, which would double the fixture's size).
func bulkPut(db *bolt.DB, rows []ledger.Row, fill float64) error {
	return db.Update(func(btx *bolt.Tx) error {
		tx := newTx(nil, btx)
		if fill > 0 {
			for _, name := range allBuckets {
				if btx.Bucket(name) == nil {
					continue // the schema-2 rows bucket
				}
				tx.bucket(name).(boltBucket).FillPercent = fill
			}
		}
		for _, r := range rows {
			if err := tx.PutRow(nil, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// benchDirs are the fixture directories TestMain removes.
var benchDirs []string

// BenchmarkClaimUnderCPULoad is BenchmarkClaim at 64 callers, alone and
// beside 16 goroutines that each burn 20 µs of CPU, then sleep 300 µs: about
// one core of demand in short bursts, the shape of the HTTP handlers and
// load client that share the 2 cores in httpload. It shows how much of a group's
// commit time, under the HTTP load of BENCHMARKS.md, is the committer
// waiting for a CPU rather than for the disk; the commit and run figures
// per group are always reported here. unsafe-nosync repeats both without
// fdatasync (UnsafeNoSync), and once more at 256 callers for bigger groups.
// Without the burners it also reports the process's CPU time per claim
// (NewClaim and the store: all a claim costs beside HTTP).
//
//	go test -run '^$' -bench BenchmarkClaimUnderCPULoad -benchtime 5s ./ledger/bolt/
func BenchmarkClaimUnderCPULoad(b *testing.B) {
	for _, tc := range []struct {
		name         string
		callers      int
		busy, noSync bool
	}{
		{"idle", 64, false, false},
		{"busy", 64, true, false},
		{"idle/unsafe-nosync", 64, false, true},
		{"busy/unsafe-nosync", 64, true, true},
		{"idle/unsafe-nosync/callers=256", 256, false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := mustOpen(b, Options{Policy: ledger.DefaultPolicy(), UnsafeNoSync: tc.noSync})
			stop := make(chan struct{})
			var burners sync.WaitGroup
			if tc.busy {
				for range 16 {
					burners.Go(func() { burn(stop) })
				}
			}
			ctx := context.Background()
			cpu0 := processCPU(b)
			runCallers(b, tc.callers, "claims/s", func(i int) error {
				_, err := s.Claim(ctx, benchClaim(b, i))
				return err
			})
			cpu := processCPU(b) - cpu0
			close(stop)
			burners.Wait()
			st := s.Stats()
			if st.Groups > 0 {
				b.ReportMetric(float64(st.Ops)/float64(st.Groups), "ops/group")
				b.ReportMetric(float64(st.CommitTime.Microseconds())/float64(st.Groups)/1000, "commit-ms/group")
				b.ReportMetric(float64(st.RunTime.Microseconds())/float64(st.Groups)/1000, "run-ms/group")
			}
			if !tc.busy {
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/claim")
			}
		})
	}
}

// processCPU is the user plus system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// burn spins for 20 µs, sleeps 300 µs, and repeats until stop closes.
func burn(stop <-chan struct{}) {
	x := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
			x++
		}
		time.Sleep(300 * time.Microsecond)
	}
}
