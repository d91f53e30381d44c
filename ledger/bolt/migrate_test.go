package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// downgradeToSchema2 rewrites a schema-3 file at path into the layout of
// schema 2 (rows keyed tenant \x00 key; local_ids → tenant \x00 key; keys
// entries empty), as the schema-2 build wrote it, so that the migration
// can be tested on files larger than the fixture. The fixture, written
// by that build, checks that this is the layout it wrote.
func downgradeToSchema2(tb testing.TB, path string) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	// In transactions of 20,000 rows, as a large file needs.
	for done := false; !done; {
		err = db.Update(func(tx *bolt.Tx) error {
			old, err := tx.CreateBucketIfNotExists(bucketRowsV2)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketMeta).Put(metaSchemaVersion, []byte("2")); err != nil {
				return err
			}
			rows, lids, keys := tx.Bucket(bucketRows), tx.Bucket(bucketLocalIDs), tx.Bucket(bucketKeys)
			var moved [][]byte
			c := rows.Cursor()
			for seq, v := c.First(); seq != nil && len(moved) < 20000; seq, v = c.Next() {
				r, err := decodeRow(v)
				if err != nil {
					return err
				}
				rk := rowKey(r.Tenant, r.Key)
				if err := old.Put(rk, cloneBytes(v)); err != nil {
					return err
				}
				if err := lids.Put([]byte(r.MetadataLocalID), rk); err != nil {
					return err
				}
				if keyIndexed(&r) {
					if err := keys.Put(keysKey(r.Key, r.Tenant), nil); err != nil {
						return err
					}
				}
				moved = append(moved, cloneBytes(seq))
			}
			for _, seq := range moved {
				if err := rows.Delete(seq); err != nil {
					return err
				}
			}
			if len(moved) < 20000 {
				done = true
				return tx.DeleteBucket(bucketRows)
			}
			return nil
		})
		if err != nil {
			tb.Fatalf("downgrade to schema 2: %v", err)
		}
	}
}

// migrationState reads what a file holds of the migration: its schema
// version, whether the old bucket and the marker are there, and the rows
// in each bucket.
type migrationState struct {
	version          string
	oldBucket, marks bool
	oldRows, newRows int
}

func readMigrationState(tb testing.TB, path string) migrationState {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var st migrationState
	if err := db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		st.version, st.marks = string(m.Get(metaSchemaVersion)), m.Get(metaMigrating) != nil
		if b := tx.Bucket(bucketRowsV2); b != nil {
			st.oldBucket, st.oldRows = true, b.Stats().KeyN
		}
		if b := tx.Bucket(bucketRows); b != nil {
			st.newRows = b.Stats().KeyN
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return st
}

// wantMigrated fails unless the file at path is of schema 3 with n rows,
// all in the new bucket.
func wantMigrated(tb testing.TB, path string, n int) {
	tb.Helper()
	st := readMigrationState(tb, path)
	if st.version != strconv.Itoa(schemaVersion) || st.oldBucket || st.marks || st.newRows != n {
		tb.Fatalf("after the migration: %+v, want schema %d, no old bucket, no marker, %d rows", st, schemaVersion, n)
	}
}

// writeOldLog leaves at path's log directory one record of the schema-2
// build's format (buckets named by their index: 0 is the old rows) with
// the given writes, as a crash of that build after acknowledging them.
func writeOldLog(tb testing.TB, path string, writes func(l *layer)) {
	tb.Helper()
	g := &layer{}
	writes(g)
	l, err := openLog(osFS{}, walDir(path), 1, 1<<20)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := l.appendAll([][]byte{encodeLayer(nil, g)}); err != nil {
		tb.Fatal(err)
	}
	if err := l.closeOnly(); err != nil {
		tb.Fatal(err)
	}
}

// A schema-2 build that crashed left writes in its log: Open replays them
// into the old layout, then migrates, and reads them back.
func TestMigrationReplaysAnOldLogFirst(t *testing.T) {
	var golden fixtureSnapshot
	b, err := os.ReadFile(filepath.Join(fixtureDir, "snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	for _, noWAL := range []bool{false, true} {
		t.Run(fmt.Sprintf("nowal=%v", noWAL), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			copyTestFile(t, filepath.Join(fixtureDir, "ledger.db"), path)
			// An update of a stored row (a field no index holds) and the
			// insert of a business-keyed claim, with its index entries as
			// the schema-2 PutRow wrote them.
			updated := golden.Rows[0]
			updated.RunID = "run_from_the_log"
			c, err := ledger.NewClaim(claimReq("acme", "order-from-the-log", "run_9", 900), ledger.DefaultPolicy(), t0.Add(3*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			ins := c.Row
			writeOldLog(t, path, func(g *layer) {
				put := func(bucket, k, v []byte) { g.set(bucketIndex(bucket), string(k), entry{v: v}) }
				uv, err := encodeRow(updated)
				if err != nil {
					t.Fatal(err)
				}
				iv, err := encodeRow(ins)
				if err != nil {
					t.Fatal(err)
				}
				rk := rowKey(ins.Tenant, ins.Key)
				put(bucketRowsV2, rowKey(updated.Tenant, updated.Key), uv)
				put(bucketRowsV2, rk, iv)
				put(bucketLocalIDs, []byte(ins.MetadataLocalID), rk)
				put(bucketKeys, keysKey(ins.Key, ins.Tenant), []byte{})
				put(bucketDue, dueKey(&ins), []byte{})
				put(bucketByTime, byTimeKey(&ins), []byte{})
				put(bucketMeta, countKey(ins.Status), appendUint64(nil, uint64(golden.Counts[ins.Status]+1)))
			})
			if bucketIndex(bucketRowsV2) != 0 {
				t.Fatal("the schema-2 rows bucket must keep index 0: old logs name it so")
			}
			s, err := Open(path, Options{Policy: ledger.DefaultPolicy(), NoWAL: noWAL})
			if err != nil {
				t.Fatal(err)
			}
			mustConsistent(t, s)
			ctx := context.Background()
			if got, err := s.Get(ctx, updated.Tenant, updated.Key); err != nil || got.RunID != updated.RunID {
				t.Errorf("the row updated in the old log: run %q, %v; want %q", got.RunID, err, updated.RunID)
			}
			if got, err := s.Get(ctx, ins.Tenant, ins.Key); err != nil || got.MetadataLocalID != ins.MetadataLocalID {
				t.Errorf("the row inserted in the old log: %+v, %v", got, err)
			}
			if f, err := s.FindRows(ctx, ledger.FindQuery{Tenant: ins.Tenant, LocalID: ins.MetadataLocalID, Limit: 10}); err != nil || len(f.Rows) != 1 {
				t.Errorf("find by the inserted row's local id: %d rows, %v", len(f.Rows), err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			wantMigrated(t, path, len(golden.Rows)+1)
		})
	}
}

// migrationSnapshot is everything a store's methods read of its rows.
type migrationSnapshot struct {
	Rows   []ledger.Row
	Counts map[ledger.Status]int64
	Due    int
}

func readMigrationSnapshot(tb testing.TB, s *Store, tenants ...string) migrationSnapshot {
	tb.Helper()
	ctx := context.Background()
	var snap migrationSnapshot
	for _, tenant := range tenants {
		q := ledger.ListQuery{Tenant: tenant, Limit: ledger.MaxListLimit}
		for {
			p, err := s.List(ctx, q)
			if err != nil {
				tb.Fatal(err)
			}
			for _, r := range p.Rows {
				got, err := s.Get(ctx, r.Tenant, r.Key)
				if err != nil || !reflect.DeepEqual(got, r) {
					tb.Fatalf("get %s/%s listed: %v", r.Tenant, r.Key, err)
				}
				f, err := s.FindRows(ctx, ledger.FindQuery{Tenant: r.Tenant, LocalID: r.MetadataLocalID, Limit: 1})
				if err != nil || len(f.Rows) != 1 || f.Rows[0].Key != r.Key {
					tb.Fatalf("find %s/%s by local id: %+v, %v", r.Tenant, r.Key, f.Rows, err)
				}
			}
			snap.Rows = append(snap.Rows, p.Rows...)
			if p.NextCursor == "" {
				break
			}
			q.Cursor = p.NextCursor
		}
	}
	var err error
	if snap.Counts, err = s.CountRows(ctx); err != nil {
		tb.Fatal(err)
	}
	due, err := s.Due(ctx, t0.Add(1000*time.Hour), 1<<20)
	if err != nil {
		tb.Fatal(err)
	}
	snap.Due = len(due)
	return snap
}

// fillForMigration writes n claims over two tenants, minted and business
// keys, some settled and some gated on an approval, and returns what the
// store reads back.
func fillForMigration(tb testing.TB, path string, n int) migrationSnapshot {
	tb.Helper()
	ctx := context.Background()
	s, err := Open(path, Options{Policy: ledger.DefaultPolicy(), NoWAL: true, UnsafeNoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		tenant := []string{"acme", "globex"}[i%2]
		key := ""
		if i%3 == 0 {
			key = "order-" + strconv.Itoa(i)
		}
		c, err := ledger.NewClaim(claimReq(tenant, key, "run_"+strconv.Itoa(i%7), i), s.policy, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		if i%11 == 0 {
			c.Gate = ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "a human decides"}
		}
		res, err := s.Claim(ctx, c)
		if err != nil {
			tb.Fatal(err)
		}
		if i%5 == 1 && i%11 != 0 {
			if _, _, err := s.Report(ctx, tenant, res.Row.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200,
				ReceiptID: "pi_" + strconv.Itoa(i), At: t0.Add(time.Duration(i)*time.Second + time.Millisecond)}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	mustConsistent(tb, s)
	snap := readMigrationSnapshot(tb, s, "acme", "globex")
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	return snap
}

// A larger schema-2 file migrates in many chunks and reads back exactly
// what it held; the offline check counts its rows before and after.
func TestMigrationInChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	const n = 600
	want := fillForMigration(t, path, n)
	downgradeToSchema2(t, path)
	if st := readMigrationState(t, path); st.version != "2" || st.oldRows != n || st.newRows != 0 {
		t.Fatalf("downgraded file: %+v", st)
	}
	ctx := context.Background()
	rep, err := CheckFile(ctx, path)
	if err != nil || rep.Rows != n || rep.Invariants {
		t.Fatalf("check of the schema-2 file: %+v, %v; want %d rows, invariants left to Open", rep, err, n)
	}
	chunks := 0
	s, err := Open(path, Options{Policy: ledger.DefaultPolicy(), migrateChunkBytes: 32 << 10, crashHook: func(p string) {
		if p == "migrate-chunk" {
			chunks++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if chunks < 10 {
		t.Errorf("%d migration transactions for %d rows in chunks of 32 KiB: want many", chunks, n)
	}
	mustConsistent(t, s)
	got := readMigrationSnapshot(t, s, "acme", "globex")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after the migration the store reads back %d rows, counts %v, %d due; want %d, %v, %d",
			len(got.Rows), got.Counts, got.Due, len(want.Rows), want.Counts, want.Due)
	}
	// New claims after the migration take the next sequences.
	mustClaim(t, s, claimReq("acme", "after-the-migration", "run_1", 1), t0)
	mustConsistent(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantMigrated(t, path, n+1)
	if rep, err := CheckFile(ctx, path); err != nil || rep.Rows != n+1 || !rep.Invariants {
		t.Fatalf("check of the migrated file: %+v, %v", rep, err)
	}
}

const (
	migrateEnvDB = "RECONCILER_BOLT_MIGRATE_DB"
	migrateEnvAt = "RECONCILER_BOLT_MIGRATE_AT"
)

// TestCrashDuringMigration SIGKILLs children migrating a schema-2 file,
// between chunks and inside a chunk's commit, round after round on the
// same file; after each kill the file holds every row exactly once (in one
// bucket or the other), and the last open finds everything.
func TestCrashDuringMigration(t *testing.T) {
	if os.Getenv(migrateEnvDB) != "" {
		t.Skip("this is the migration's crash child")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x316))
	path := filepath.Join(t.TempDir(), "ledger.db")
	const n = 400
	want := fillForMigration(t, path, n)
	downgradeToSchema2(t, path)
	ctx := context.Background()
	kills := 0
	for round := 0; ; round++ {
		if round > 100 {
			t.Fatal("the migration never finished")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestMigrationCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), migrateEnvDB+"="+path, migrateEnvAt+"="+strconv.Itoa(1+rng.IntN(4)))
		out, err := cmd.CombinedOutput()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		done := err == nil && strings.Contains(string(out), "MIGRATED")
		if !done && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
			t.Fatalf("round %d: child: %v\n%s", round, err, out)
		}
		// Every row in exactly one of the buckets: the check counts both.
		rep, err := CheckFile(ctx, path)
		if err != nil || rep.Rows != n {
			t.Fatalf("round %d: after the kill: %+v, %v; want %d rows", round, rep, err, n)
		}
		st := readMigrationState(t, path)
		if st.oldRows+st.newRows != n {
			t.Fatalf("round %d: %+v: rows lost or doubled", round, st)
		}
		if st.oldBucket && st.version != strconv.Itoa(schemaVersion) && st.newRows > 0 {
			t.Fatalf("round %d: %+v: rows moved before the version was stamped (an old build would open it)", round, st)
		}
		if done {
			break
		}
		kills++
	}
	if kills < 2 {
		t.Fatalf("%d kills during the migration: the test proved little (seed above)", kills)
	}
	t.Logf("%d kills during the migration", kills)
	s, err := Open(path, Options{Policy: ledger.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	mustConsistent(t, s)
	if got := readMigrationSnapshot(t, s, "acme", "globex"); !reflect.DeepEqual(got, want) {
		t.Errorf("after the kills the store reads back %d rows, counts %v, %d due; want %d, %v, %d",
			len(got.Rows), got.Counts, got.Due, len(want.Rows), want.Counts, want.Due)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantMigrated(t, path, n)
}

// TestMigrationCrashChild opens the file TestCrashDuringMigration names,
// migrating in small chunks, and kills itself after the chunk named by
// migrateEnvAt: at once, or a moment later (inside the next chunk's
// commit). A child that finishes the migration says so.
func TestMigrationCrashChild(t *testing.T) {
	path := os.Getenv(migrateEnvDB)
	if path == "" {
		t.Skip("run by TestCrashDuringMigration as a child process")
	}
	at, _ := strconv.Atoi(os.Getenv(migrateEnvAt))
	seen := 0
	s, err := Open(path, Options{LockTimeout: 10 * time.Second, migrateChunkBytes: 16 << 10, crashHook: func(p string) {
		if p != "migrate-chunk" {
			return
		}
		if seen++; seen != at {
			return
		}
		kill := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		if rand.IntN(2) == 0 {
			kill()
		}
		time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, kill)
	}})
	if err != nil {
		fmt.Println("ERR open:", err)
		os.Exit(3)
	}
	if err := s.Close(); err != nil {
		fmt.Println("ERR close:", err)
		os.Exit(3)
	}
	fmt.Println("MIGRATED")
}

// The offline operations take a schema-2 copy as it is: restore checks
// it (rows counted, invariants left to Open), compact copies the old
// layout, and the node that opens either migrates it.
func TestStoreOpsOnSchema2(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "copy.db")
	copyTestFile(t, filepath.Join(fixtureDir, "ledger.db"), copyPath)
	for _, op := range []string{"restore", "compact"} {
		t.Run(op, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "reconciler.db")
			switch op {
			case "restore":
				rep, err := Restore(ctx, copyPath, path, false)
				if err != nil || rep.Rows != 9 || rep.Invariants {
					t.Fatalf("restore a schema-2 copy: %+v, %v; want 9 rows, invariants left to Open", rep, err)
				}
			case "compact":
				copyTestFile(t, copyPath, path)
				if _, _, err := Compact(ctx, path); err != nil {
					t.Fatalf("compact a schema-2 file: %v", err)
				}
				if st := readMigrationState(t, path); st.version != "2" || st.oldRows != 9 {
					t.Fatalf("compacted: %+v, want the schema-2 file as it was", st)
				}
			}
			s, err := Open(path, Options{Policy: ledger.DefaultPolicy()})
			if err != nil {
				t.Fatal(err)
			}
			mustConsistent(t, s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			wantMigrated(t, path, 9)
			if rep, err := CheckFileIsolated(ctx, path); err != nil || rep.Rows != 9 || !rep.Invariants {
				t.Fatalf("check of the migrated file: %+v, %v", rep, err)
			}
		})
	}
}

// TestMigrationScale times the migration of a schema-2 file of
// BOLT_MIGRATE_ROWS claims (skipped unless set; minutes for a million):
//
//	BOLT_MIGRATE_ROWS=300000 go test -run '^TestMigrationScale$' -v -timeout 30m ./ledger/bolt/
func TestMigrationScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BOLT_MIGRATE_ROWS"))
	if n <= 0 {
		t.Skip("set BOLT_MIGRATE_ROWS (e.g. 300000) to time the migration")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	for from := 0; from < n; from += 50000 {
		rows := make([]ledger.Row, 0, 50000)
		for i := from; i < min(n, from+50000); i++ {
			rows = append(rows, benchClaim(t, i).Row)
		}
		if err := bulkPut(s.db, rows, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeToSchema2(t, path)
	fi, _ := os.Stat(path)
	start := time.Now()
	s, err = Open(path, Options{NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantMigrated(t, path, n)
	fi2, _ := os.Stat(path)
	t.Logf("%d rows migrated in %s (%.0f rows/s); file %d MB before, %d MB after; RssAnon %s", n, took.Round(time.Millisecond),
		float64(n)/took.Seconds(), fi.Size()>>20, fi2.Size()>>20, rssAnon())
}
