package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The schema-2 fixture is a ledger file written by the build of schema
// version 2 (testdata/schema2/ledger.db), with what it held read through
// the store's API in testdata/schema2/snapshot.json. A build with a new
// layout (schema 3, issue 32's sequence-ordered rows) opens it — migrating
// it on open (migrate.go) — and reads back exactly the same, which
// TestOpensSchema2Fixture checks. Regenerate only with a schema-2 build
// (5fbf85c or older): BOLT_WRITE_FIXTURE=1 go test -run
// '^TestOpensSchema2Fixture$' ./ledger/bolt/.
const fixtureDir = "testdata/schema2"

// fixtureSnapshot is what a ledger file holds, read through the store's
// methods (never its buckets), so a layout change keeps it comparable.
type fixtureSnapshot struct {
	Rows    []ledger.Row                  `json:"rows"`
	Counts  map[ledger.Status]int64       `json:"counts"`
	Events  []ledger.OutboxRecord         `json:"events"`
	Freezes []ledger.Freeze               `json:"freezes"`
	Tools   []ledger.Tool                 `json:"tools"`
	Orphans []ledger.Delivery             `json:"orphans"`
	Inbox   map[string]ledger.InboxRecord `json:"inbox"`
}

var fixtureTenants = []string{"acme", "globex"}

// writeFixture fills a fresh store at path with one of each kind of
// thing a ledger holds.
func writeFixture(t *testing.T, path string) {
	ctx := context.Background()
	s, err := Open(path, Options{Policy: ledger.DefaultPolicy(), NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var keys []string
	for i, tenant := range fixtureTenants {
		for n := range 3 {
			res := mustClaim(t, s, claimReq(tenant, "", "run_1", 10*i+n), t0.Add(time.Duration(n)*time.Minute))
			keys = append(keys, res.Row.Key)
		}
		res := mustClaim(t, s, claimReq(tenant, fmt.Sprintf("order-%d", i), "run_2", 100+i), t0.Add(time.Hour))
		keys = append(keys, res.Row.Key)
	}
	// An approval-gated claim, a settled row, a timed-out one, an
	// ingested webhook (inbox and event) and an orphan.
	c, err := ledger.NewClaim(claimReq("acme", "", "run_3", 200), s.policy, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c.Gate = ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "refunds need a human"}
	if _, err := s.Claim(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Report(ctx, "acme", keys[0], ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: t0.Add(3 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Report(ctx, "acme", keys[1], ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(4 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	row, err := s.Get(ctx, "globex", keys[4])
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []ledger.Delivery{
		{Tenant: "globex", Vendor: "stripe", EventID: "evt_matched", LocalID: row.MetadataLocalID, At: t0.Add(5 * time.Minute),
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_2", At: t0.Add(5 * time.Minute)}},
		{Tenant: "acme", Vendor: "stripe", EventID: "evt_orphan", LocalID: "rl_00000000000000000000000000000000", At: t0.Add(6 * time.Minute),
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_3", At: t0.Add(6 * time.Minute)}},
	} {
		if _, err := s.Ingest(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutFreeze(ctx, testFreeze("acme", "stripe.charges.create")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutTool(ctx, testTool("globex", "email.send")); err != nil {
		t.Fatal(err)
	}
}

// readSnapshot reads everything writeFixture wrote, through the store.
func readSnapshot(t *testing.T, s *Store) fixtureSnapshot {
	t.Helper()
	ctx := context.Background()
	var snap fixtureSnapshot
	for _, tenant := range fixtureTenants {
		cursor := ""
		for {
			page, err := s.List(ctx, ledger.ListQuery{Tenant: tenant, Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Rows {
				got, err := s.Get(ctx, r.Tenant, r.Key)
				if err != nil {
					t.Fatalf("get %s/%s listed: %v", r.Tenant, r.Key, err)
				}
				if !reflect.DeepEqual(got, r) {
					t.Fatalf("get %s/%s = %+v, list has %+v", r.Tenant, r.Key, got, r)
				}
				snap.Rows = append(snap.Rows, r)
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		tools, err := s.ListTools(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		snap.Tools = append(snap.Tools, tools...)
	}
	var err error
	if snap.Counts, err = s.CountRows(ctx); err != nil {
		t.Fatal(err)
	}
	if snap.Events, err = s.PendingEvents(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if snap.Freezes, err = s.ListFreezes(ctx); err != nil {
		t.Fatal(err)
	}
	snap.Inbox = map[string]ledger.InboxRecord{}
	err = s.view(ctx, func(tx *boltTx) error {
		if snap.Orphans, err = tx.Orphans("rl_00000000000000000000000000000000"); err != nil {
			return err
		}
		for _, id := range []string{"evt_matched", "evt_orphan"} {
			rec, err := tx.GetInbox("stripe", id)
			if err != nil {
				return fmt.Errorf("inbox %s: %w", id, err)
			}
			snap.Inbox[id] = rec
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestOpensSchema2Fixture opens a copy of the schema-2 fixture, with and
// without the log, in one migration transaction and in one per row, checks
// that the file is of schema 3 afterwards and its invariants, and wants
// back exactly what the file held when it was written.
func TestOpensSchema2Fixture(t *testing.T) {
	golden := filepath.Join(fixtureDir, "snapshot.json")
	if os.Getenv("BOLT_WRITE_FIXTURE") == "1" {
		if schemaVersion != 2 {
			t.Fatalf("the fixture is of schema 2; this build writes %d", schemaVersion)
		}
		if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(t.TempDir(), "ledger.db")
		writeFixture(t, tmp)
		if _, _, err := Compact(context.Background(), tmp); err != nil { // no free pages: a small file
			t.Fatal(err)
		}
		copyTestFile(t, tmp, filepath.Join(fixtureDir, "ledger.db"))
		s, err := Open(tmp, Options{Policy: ledger.DefaultPolicy(), NoWAL: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.MarshalIndent(readSnapshot(t, s), "", "  ")
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var wantSnap fixtureSnapshot
	if err := json.Unmarshal(want, &wantSnap); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		noWAL      bool
		chunkBytes int
	}{{false, 0}, {true, 0}, {false, 1}} {
		t.Run(fmt.Sprintf("nowal=%v/chunk=%d", tc.noWAL, tc.chunkBytes), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			copyTestFile(t, filepath.Join(fixtureDir, "ledger.db"), path)
			if st := readMigrationState(t, path); st.version != "2" || !st.oldBucket || st.oldRows != len(wantSnap.Rows) || st.newRows != 0 {
				t.Fatalf("the fixture is not the schema-2 file it was: %+v", st)
			}
			chunks := 0
			s, err := Open(path, Options{Policy: ledger.DefaultPolicy(), NoWAL: tc.noWAL, migrateChunkBytes: tc.chunkBytes,
				crashHook: func(p string) {
					if p == "migrate-chunk" {
						chunks++
					}
				}})
			if err != nil {
				t.Fatalf("open the schema-2 fixture: %v", err)
			}
			defer s.Close()
			if want := map[int]int{0: 1, 1: len(wantSnap.Rows)}[tc.chunkBytes]; chunks != want {
				t.Errorf("%d migration transactions, want %d", chunks, want)
			}
			if err := s.CheckConsistency(context.Background()); err != nil {
				t.Fatalf("consistency: %v", err)
			}
			got := readSnapshot(t, s)
			// Compare as JSON: times read back carry no monotonic reading
			// and the same location either way.
			gb, _ := json.Marshal(got)
			var gotSnap fixtureSnapshot
			if err := json.Unmarshal(gb, &gotSnap); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotSnap, wantSnap) {
				t.Errorf("the fixture reads back\n%s\nwant\n%s", gb, want)
			}
			if len(gotSnap.Rows) != 9 || len(gotSnap.Events) == 0 || len(gotSnap.Orphans) != 1 || len(gotSnap.Freezes) != 1 || len(gotSnap.Tools) != 1 {
				t.Errorf("fixture holds %d rows, %d events, %d orphans, %d freezes, %d tools; want 9 and some, 1, 1, 1",
					len(gotSnap.Rows), len(gotSnap.Events), len(gotSnap.Orphans), len(gotSnap.Freezes), len(gotSnap.Tools))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			wantMigrated(t, path, len(wantSnap.Rows))
			// The second open has nothing to migrate.
			chunks = 0
			s2, err := Open(path, Options{Policy: ledger.DefaultPolicy(), NoWAL: tc.noWAL, crashHook: func(p string) {
				if p == "migrate-chunk" {
					chunks++
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			mustConsistent(t, s2)
			_ = s2.Close()
			if chunks != 0 {
				t.Errorf("the second open ran %d migration transactions", chunks)
			}
		})
	}
}

func copyTestFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
