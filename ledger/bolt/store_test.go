package bolt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

func TestClaimWritesEveryIndex(t *testing.T) {
	s := mustOpen(t, Options{})
	res := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0)
	if res.Decision != ledger.DecisionProceed || !res.Inserted {
		t.Fatalf("decision = %s inserted=%v, want proceed inserted", res.Decision, res.Inserted)
	}
	r := res.Row
	rk := string(rowKey("acme", r.Key))

	cases := []struct {
		name   string
		bucket []byte
		want   []string
	}{
		// Rows are keyed by sequence (schema 3): the first row is 1.
		{"rows", bucketRows, []string{string(seqKey(1))}},
		{"local_ids", bucketLocalIDs, []string{r.MetadataLocalID}},
		// A minted key is joined through its local id: no keys entry.
		{"keys", bucketKeys, nil},
		{"due", bucketDue, []string{string(dueKey(&r))}},
		{"by_time", bucketByTime, []string{string(byTimeKey(&r))}},
		{"outbox", bucketOutbox, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := rawKeys(t, s, tc.bucket); !slices.Equal(got, tc.want) {
				t.Errorf("keys = %q, want %q", got, tc.want)
			}
		})
	}
	if got, want := string(rawGet(t, s, bucketLocalIDs, []byte(r.MetadataLocalID))), string(seqKey(1))+rk; got != want {
		t.Errorf("local id → %q, want %q", got, want)
	}
	if v := rawGet(t, s, bucketRows, seqKey(1)); !strings.HasPrefix(string(v), `{"v":1,"row":{`) {
		t.Errorf("row value %.40q is not a versioned envelope", v)
	}
	// The due key starts with next_check_at, big-endian nanoseconds.
	if got, want := string(rawKeys(t, s, bucketDue)[0][:8]), string(appendUint64(nil, uint64(r.NextCheckAt.UnixNano()))); got != want {
		t.Errorf("due time prefix = %x, want %x", got, want)
	}
	mustConsistent(t, s)
}

func TestPutRowMovesIndexes(t *testing.T) {
	ctx := context.Background()
	timeout := ledger.Outcome{Kind: ledger.OutcomeTimeout}
	cases := []struct {
		name string
		// step changes the row and returns the status it should have.
		step    func(t *testing.T, s *Store, key string) ledger.Status
		wantDue bool
		wantOut []string // outbox statuses
	}{
		{"report timeout reschedules", func(t *testing.T, s *Store, key string) ledger.Status {
			o := timeout
			o.At = t0.Add(time.Minute)
			if _, _, err := s.Report(ctx, "acme", key, o); err != nil {
				t.Fatal(err)
			}
			return ledger.StatusUnknown
		}, true, []string{"unknown"}},
		{"success leaves due", func(t *testing.T, s *Store, key string) ledger.Status {
			o := ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: t0.Add(time.Minute)}
			if _, _, err := s.Report(ctx, "acme", key, o); err != nil {
				t.Fatal(err)
			}
			return ledger.StatusSucceeded
		}, false, []string{"succeeded"}},
		{"reschedule moves due", func(t *testing.T, s *Store, key string) ledger.Status {
			if err := s.Reschedule(ctx, "acme", key, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			return ledger.StatusPending
		}, true, nil},
		{"escalate keeps due", func(t *testing.T, s *Store, key string) ledger.Status {
			if _, ok, err := s.Escalate(ctx, "acme", key, t0.Add(time.Hour)); err != nil || !ok {
				t.Fatalf("escalate = %v, %v", ok, err)
			}
			return ledger.StatusPending
		}, true, []string{"escalated"}},
		{"human failure leaves due", func(t *testing.T, s *Store, key string) ledger.Status {
			ev := ledger.Evidence{Source: ledger.SourceHuman, Status: ledger.StatusFailedPoison, Actor: "ops", Note: "refunded by hand", At: t0.Add(time.Hour)}
			if _, _, err := s.Apply(ctx, "acme", key, ev); err != nil {
				t.Fatal(err)
			}
			return ledger.StatusFailedPoison
		}, false, []string{"failed_poison"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustOpen(t, Options{})
			key := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row.Key
			want := tc.step(t, s, key)
			r, err := s.Get(ctx, "acme", key)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != want {
				t.Fatalf("status = %s, want %s", r.Status, want)
			}
			var wantDue []string
			if tc.wantDue {
				wantDue = []string{string(dueKey(&r))}
			}
			if got := rawKeys(t, s, bucketDue); !slices.Equal(got, wantDue) {
				t.Errorf("due = %q, want %q", got, wantDue)
			}
			if got := rawKeys(t, s, bucketByTime); len(got) != 1 {
				t.Errorf("by_time has %d entries, want 1", len(got))
			}
			evs, err := s.PendingEvents(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, e.Event.Status)
			}
			if !slices.Equal(got, tc.wantOut) {
				t.Errorf("outbox = %q, want %q", got, tc.wantOut)
			}
			mustConsistent(t, s)
		})
	}
}

func TestBusinessKeyAcrossTenants(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	a := mustClaim(t, s, claimReq("acme", "cart-42", "run_1", 1), t0)
	b := mustClaim(t, s, claimReq("globex", "cart-42", "run_1", 1), t0)
	if a.Row.MetadataLocalID == b.Row.MetadataLocalID {
		t.Fatalf("two tenants share local id %s", a.Row.MetadataLocalID)
	}
	var tenants []string
	if err := s.view(context.Background(), func(tx *boltTx) error {
		var err error
		tenants, err = tx.TenantsOfKey("cart-42")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"acme", "globex"}; !slices.Equal(tenants, want) {
		t.Errorf("tenants of key = %q, want %q", tenants, want)
	}
	// A webhook at globex's endpoint that echoes only the key joins globex's row.
	d := ledger.Delivery{Tenant: "globex", Vendor: "stripe", EventID: "evt_1", IdempotencyKey: "cart-42",
		Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_9", At: t0}, At: t0}
	res, err := s.Ingest(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != ledger.IngestAccepted || res.Row == nil || res.Row.Tenant != "globex" {
		t.Fatalf("ingest = %+v, want accepted on globex", res)
	}
	if r, _ := s.Get(ctx, "acme", "cart-42"); r.Status != ledger.StatusPending {
		t.Errorf("acme's row status = %s, want pending", r.Status)
	}
	mustConsistent(t, s)
}

func TestDueOrderAndLimit(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{Policy: ledger.Policy{Grace: time.Minute}})
	// Claims at t0+i minutes are due at t0+i+1 minutes; claim them out of order.
	var keys []string
	for _, i := range []int{3, 0, 4, 1, 2} {
		r := mustClaim(t, s, claimReq("acme", "", "run_1", i), t0.Add(time.Duration(i)*time.Minute))
		keys = append(keys, r.Row.Key)
	}
	// Settle the one claimed at t0+4m: it must never come back from Due.
	if _, _, err := s.Report(ctx, "acme", keys[2], ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 201, ReceiptID: "pi_4", At: t0}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		now   time.Time
		limit int
		want  []string // tool call ids, earliest first
	}{
		{"nothing due yet", t0.Add(59 * time.Second), 10, nil},
		{"exactly at next_check_at", t0.Add(time.Minute), 10, []string{"call_0"}},
		{"all open", t0.Add(time.Hour), 10, []string{"call_0", "call_1", "call_2", "call_3"}},
		{"limit", t0.Add(time.Hour), 2, []string{"call_0", "call_1"}},
		{"zero limit", t0.Add(time.Hour), 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := s.Due(ctx, tc.now, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				got = append(got, r.ToolCallID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("due = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestListNewestFirst(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	for i := range 7 {
		run := "run_a"
		if i%2 == 1 {
			run = "run_b"
		}
		mustClaim(t, s, claimReq("acme", "", run, i), t0.Add(time.Duration(i)*time.Second))
	}
	mustClaim(t, s, claimReq("acmex", "", "run_a", 99), t0) // a tenant whose id extends acme's
	mustClaim(t, s, claimReq("acm", "", "run_a", 98), t0)   // and one that is its prefix
	// Settle call_4 so the status filter has something to drop.
	page, err := s.List(ctx, ledger.ListQuery{Tenant: "acme", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Rows {
		if r.ToolCallID == "call_4" {
			if _, _, err := s.Report(ctx, "acme", r.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi", At: t0}); err != nil {
				t.Fatal(err)
			}
		}
	}

	cases := []struct {
		name  string
		q     ledger.ListQuery
		pages [][]string
	}{
		{"all in pages of 3", ledger.ListQuery{Tenant: "acme", Limit: 3},
			[][]string{{"call_6", "call_5", "call_4"}, {"call_3", "call_2", "call_1"}, {"call_0"}}},
		{"exact pages", ledger.ListQuery{Tenant: "acme", Limit: 7},
			[][]string{{"call_6", "call_5", "call_4", "call_3", "call_2", "call_1", "call_0"}}},
		{"run filter", ledger.ListQuery{Tenant: "acme", RunID: "run_b", Limit: 2},
			[][]string{{"call_5", "call_3"}, {"call_1"}}},
		{"status filter", ledger.ListQuery{Tenant: "acme", Status: ledger.StatusPending, Limit: 4},
			[][]string{{"call_6", "call_5", "call_3", "call_2"}, {"call_1", "call_0"}}},
		{"succeeded", ledger.ListQuery{Tenant: "acme", Status: ledger.StatusSucceeded},
			[][]string{{"call_4"}}},
		{"other tenant", ledger.ListQuery{Tenant: "acmex"}, [][]string{{"call_99"}}},
		{"prefix tenant", ledger.ListQuery{Tenant: "acm"}, [][]string{{"call_98"}}},
		{"empty tenant", ledger.ListQuery{Tenant: "nobody"}, [][]string{nil}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			for i, want := range tc.pages {
				page, err := s.List(ctx, q)
				if err != nil {
					t.Fatalf("page %d: %v", i, err)
				}
				var got []string
				for _, r := range page.Rows {
					got = append(got, r.ToolCallID)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("page %d = %q, want %q", i, got, want)
				}
				last := i == len(tc.pages)-1
				if (page.NextCursor == "") != last {
					t.Fatalf("page %d: cursor %q, last page %v", i, page.NextCursor, last)
				}
				q.Cursor = page.NextCursor
			}
		})
	}

	t.Run("bad cursor", func(t *testing.T) {
		for _, c := range []string{"!!!", "AAAA"} {
			if _, err := s.List(ctx, ledger.ListQuery{Tenant: "acme", Cursor: c}); !errors.Is(err, ledger.ErrInvalidListQuery) {
				t.Errorf("cursor %q: err = %v, want ErrInvalidListQuery", c, err)
			}
		}
	})
}

func TestOutboxAckAndNotify(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	key := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row.Key
	select {
	case <-s.Notify():
		t.Fatal("notified after a claim that wrote no outbox record")
	default:
	}
	if _, _, err := s.Report(ctx, "acme", key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0}); err != nil {
		t.Fatal(err)
	}
	ev := ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", At: t0}
	if _, _, err := s.Apply(ctx, "acme", key, ev); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Notify():
	default:
		t.Fatal("no notification after commits that wrote outbox records")
	}
	recs, err := s.PendingEvents(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Seq != 1 || recs[1].Seq != 2 || recs[0].Event.Status != "unknown" || recs[1].Event.Status != "succeeded" {
		t.Fatalf("outbox = %+v, want seq 1 unknown, seq 2 succeeded", recs)
	}
	if got, _ := s.PendingEvents(ctx, 1); len(got) != 1 || got[0].Seq != 1 {
		t.Errorf("limit 1 = %+v", got)
	}
	if err := s.AckEvents(ctx, 1, 77); err != nil {
		t.Fatal(err)
	}
	recs, _ = s.PendingEvents(ctx, 10)
	if len(recs) != 1 || recs[0].Seq != 2 {
		t.Fatalf("after ack = %+v, want only seq 2", recs)
	}
	// Sequences are never reused, even after the outbox empties.
	if err := s.AckEvents(ctx, 2); err != nil {
		t.Fatal(err)
	}
	key2 := mustClaim(t, s, claimReq("acme", "", "run_1", 2), t0).Row.Key
	if _, _, err := s.Report(ctx, "acme", key2, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0}); err != nil {
		t.Fatal(err)
	}
	if recs, _ = s.PendingEvents(ctx, 10); len(recs) != 1 || recs[0].Seq != 3 {
		t.Fatalf("after refill = %+v, want seq 3", recs)
	}
}

func TestInboxDedupAndPrune(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	ignore := func(id string, at time.Time) ledger.Delivery {
		return ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: id, Ignore: true, At: at}
	}
	for i, id := range []string{"evt_c", "evt_a", "evt_b"} {
		res, err := s.Ingest(ctx, ignore(id, t0.Add(time.Duration(i)*time.Hour)))
		if err != nil || res.Outcome != ledger.IngestIgnored {
			t.Fatalf("ingest %s = %+v, %v", id, res, err)
		}
	}
	if res, err := s.Ingest(ctx, ignore("evt_a", t0.Add(9*time.Hour))); err != nil || res.Outcome != ledger.IngestDuplicate {
		t.Fatalf("redelivery = %+v, %v, want duplicate", res, err)
	}
	cases := []struct {
		name   string
		cutoff time.Time
		want   int
		left   []string
	}{
		{"nothing older", t0, 0, []string{"stripe\x00evt_a", "stripe\x00evt_b", "stripe\x00evt_c"}},
		{"oldest only", t0.Add(time.Hour), 1, []string{"stripe\x00evt_a", "stripe\x00evt_b"}},
		{"the rest", t0.Add(3 * time.Hour), 2, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := s.PruneInbox(ctx, tc.cutoff)
			if err != nil || n != tc.want {
				t.Fatalf("prune = %d, %v, want %d", n, err, tc.want)
			}
			if got := rawKeys(t, s, bucketInbox); !slices.Equal(got, tc.left) {
				t.Errorf("inbox = %q, want %q", got, tc.left)
			}
			if got := len(rawKeys(t, s, bucketInboxByTime)); got != len(tc.left) {
				t.Errorf("inbox_by_time has %d entries, want %d", got, len(tc.left))
			}
			mustConsistent(t, s)
		})
	}
}

func TestPruneInboxInChunks(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	n := pruneChunk + 10
	err := s.db.Update(func(btx *bolt.Tx) error {
		tx := newTx(nil, btx)
		for i := range n {
			if err := tx.PutInbox("stripe", "evt_"+strconv.Itoa(i*7919%100003), ledger.InboxRecord{FirstSeen: t0.Add(time.Duration(i)), Result: ledger.IngestAccepted}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.PruneInbox(ctx, t0.Add(time.Hour))
	if err != nil || got != n {
		t.Fatalf("prune = %d, %v, want %d", got, err, n)
	}
	if s.Stats().Groups < 2 {
		t.Errorf("pruned %d records in %d groups, want chunks", n, s.Stats().Groups)
	}
	mustConsistent(t, s)
}

func TestOrphanParkedThenApplied(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	req := claimReq("acme", "", "run_1", 1)
	c, err := ledger.NewClaim(req, s.policy, t0)
	if err != nil {
		t.Fatal(err)
	}
	lid := c.Row.MetadataLocalID
	// Two events beat the runtime's claim; the later one (progress) sorts first by id.
	deliveries := []ledger.Delivery{
		{Tenant: "acme", Vendor: "stripe", EventID: "evt_z", LocalID: lid, At: t0.Add(-2 * time.Second),
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_7", At: t0.Add(-2 * time.Second)}},
		{Tenant: "acme", Vendor: "stripe", EventID: "evt_a", LocalID: lid, At: t0.Add(-time.Second),
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, ReceiptID: "pi_7", At: t0.Add(-time.Second)}},
	}
	for _, d := range deliveries {
		res, err := s.Ingest(ctx, d)
		if err != nil || res.Outcome != ledger.IngestOrphan {
			t.Fatalf("ingest %s = %+v, %v, want orphan", d.EventID, res, err)
		}
	}
	if got := len(rawKeys(t, s, bucketOrphans)); got != 2 {
		t.Fatalf("orphans = %d, want 2", got)
	}
	var parked []ledger.Delivery
	_ = s.view(ctx, func(tx *boltTx) error {
		parked, err = tx.Orphans(lid)
		return err
	})
	if len(parked) != 2 || parked[0].EventID != "evt_z" {
		t.Fatalf("orphans = %+v, want oldest (evt_z) first", parked)
	}
	res, err := s.Claim(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != ledger.DecisionReplay || res.Row.Status != ledger.StatusSucceeded || len(res.Changes) != 2 {
		t.Fatalf("claim = %s %s with %d changes, want replay succeeded after 2", res.Decision, res.Row.Status, len(res.Changes))
	}
	if got := rawKeys(t, s, bucketOrphans); len(got) != 0 {
		t.Errorf("orphans left: %q", got)
	}
	if got := rawKeys(t, s, bucketDue); len(got) != 0 {
		t.Errorf("settled row still due: %q", got)
	}
	for _, id := range []string{"evt_a", "evt_z"} {
		if res, _ := s.Ingest(ctx, ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: id, Ignore: true, At: t0}); res.Outcome != ledger.IngestDuplicate {
			t.Errorf("%s after adoption: %s, want duplicate", id, res.Outcome)
		}
	}
	mustConsistent(t, s)
}

func TestCheckConsistencyFindsDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(tx *bolt.Tx, r ledger.Row) error
		want   string
	}{
		{"missing due entry", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketDue).Delete(dueKey(&r))
		}, "not due"},
		{"dangling due entry", func(tx *bolt.Tx, r ledger.Row) error {
			ghost := r
			ghost.Key = "ghost"
			return tx.Bucket(bucketDue).Put(dueKey(&ghost), nil)
		}, "due: 2 entries, want 1"},
		{"stale due time", func(tx *bolt.Tx, r ledger.Row) error {
			if err := tx.Bucket(bucketDue).Delete(dueKey(&r)); err != nil {
				return err
			}
			r.NextCheckAt = r.NextCheckAt.Add(time.Second)
			return tx.Bucket(bucketDue).Put(dueKey(&r), nil)
		}, "not due"},
		{"local id points elsewhere", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketLocalIDs).Put([]byte(r.MetadataLocalID), lidValue(seqKey(1), []byte("acme\x00other")))
		}, "local id"},
		{"dangling local id", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketLocalIDs).Put([]byte("rl_ghost"), lidValue(seqKey(9), rowKey("acme", "ghost")))
		}, "local_ids: 2 entries"},
		{"stray key index entry", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketKeys).Put(keysKey(r.Key, r.Tenant), seqKey(1))
		}, "key index"},
		{"row copied to another sequence", func(tx *bolt.Tx, r ledger.Row) error {
			v := tx.Bucket(bucketRows).Get(seqKey(1))
			if err := tx.Bucket(bucketRows).SetSequence(2); err != nil {
				return err
			}
			return tx.Bucket(bucketRows).Put(seqKey(2), cloneBytes(v))
		}, "its key finds sequence"},
		{"row beyond the bucket sequence", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketRows).SetSequence(0)
		}, "beyond the bucket sequence"},
		{"the schema-2 rows bucket left", func(tx *bolt.Tx, r ledger.Row) error {
			_, err := tx.CreateBucket(bucketRowsV2)
			return err
		}, "migration to schema 3 is unfinished"},
		{"missing by_time", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketByTime).Delete(byTimeKey(&r))
		}, "by_time"},
		{"settled row still due", func(tx *bolt.Tx, r ledger.Row) error {
			r.Status = ledger.StatusSucceeded
			v, err := encodeRow(r)
			if err != nil {
				return err
			}
			return tx.Bucket(bucketRows).Put(seqKey(1), v)
		}, "due: 1 entries, want 0"},
		{"undecodable row", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketRows).Put(seqKey(1), []byte(`{"v":2}`))
		}, "unsupported row version"},
		{"inbox without time entry", func(tx *bolt.Tx, r ledger.Row) error {
			return tx.Bucket(bucketInbox).Put(inboxKey("stripe", "evt_1"), []byte(`{"first_seen":"2026-03-01T12:00:00Z","result":"accepted"}`))
		}, "inbox_by_time"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustOpen(t, Options{})
			r := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row
			mustConsistent(t, s)
			mustFlush(t, s)
			if err := s.db.Update(func(tx *bolt.Tx) error { return tc.damage(tx, r) }); err != nil {
				t.Fatal(err)
			}
			err := s.CheckConsistency(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/ledger.db"
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row
	if _, _, err := s.Report(ctx, "acme", r.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0}); err != nil {
		t.Fatal(err)
	}
	want, _ := s.Get(ctx, "acme", r.Key)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Get(ctx, "acme", r.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != ledger.StatusUnknown || !got.NextCheckAt.Equal(want.NextCheckAt) || got.MetadataLocalID != want.MetadataLocalID {
		t.Errorf("after reopen = %+v, want %+v", got, want)
	}
	if recs, _ := s.PendingEvents(ctx, 10); len(recs) != 1 {
		t.Errorf("outbox after reopen = %+v", recs)
	}
	mustConsistent(t, s)
}

func TestLocalIDIsUnique(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	// A caller-supplied key of minted shape is still hashed with its tenant:
	// two tenants may both claim it, under two local ids.
	key := strings.Repeat("ab", 32)
	first := mustClaim(t, s, claimReq("acme", key, "run_1", 1), t0)
	other := mustClaim(t, s, claimReq("globex", key, "run_1", 1), t0)
	if other.Decision != ledger.DecisionProceed || other.Row.MetadataLocalID == first.Row.MetadataLocalID {
		t.Fatalf("second tenant's claim of the same business key: %s, local ids %s and %s",
			other.Decision, first.Row.MetadataLocalID, other.Row.MetadataLocalID)
	}
	// A row whose local id is taken (a hash collision, or a bug) is refused.
	c, err := ledger.NewClaim(claimReq("initech", key, "run_1", 1), s.policy, t0)
	if err != nil {
		t.Fatal(err)
	}
	c.Row.MetadataLocalID = first.Row.MetadataLocalID
	if _, err := s.Claim(ctx, c); !errors.Is(err, ledger.ErrFingerprintMismatch) {
		t.Fatalf("claim with a taken local id: %v, want ErrFingerprintMismatch", err)
	}

	cases := []struct {
		name string
		put  func(tx *boltTx) error
	}{
		{"insert with a taken local id", func(tx *boltTx) error {
			r := c.Row
			return tx.PutRow(nil, r)
		}},
		{"insert over a stored row", func(tx *boltTx) error {
			return tx.PutRow(nil, first.Row)
		}},
		{"update that renames the row", func(tx *boltTx) error {
			r := first.Row
			r.Key = "other"
			return tx.PutRow(&first.Row, r)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.write(ctx, tc.put); err == nil {
				t.Fatal("PutRow accepted it")
			}
			if _, err := s.Get(ctx, "initech", key); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("initech row: %v, want ErrNotFound", err)
			}
			mustConsistent(t, s)
		})
	}
}

func TestTimeKeyOrderAndClamp(t *testing.T) {
	cases := []struct {
		name string
		a, b time.Time // a sorts strictly before b
	}{
		{"zero before epoch+1", time.Time{}, time.Unix(0, 1)},
		{"pre-1970 clamps to zero", time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, 1)},
		{"nanoseconds count", t0, t0.Add(time.Nanosecond)},
		{"zone does not matter", t0.In(time.FixedZone("x", 3600)), t0.Add(time.Second)},
		{"far future clamps to the top", t0, time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := appendUint64(nil, timeKey(tc.a)), appendUint64(nil, timeKey(tc.b))
			if string(a) >= string(b) {
				t.Errorf("key(%s) = %x, not before key(%s) = %x", tc.a, a, tc.b, b)
			}
		})
	}
	if timeKey(time.Time{}) != 0 || timeKey(time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)) != ^uint64(0) {
		t.Error("clamping is off")
	}
}

func TestRescheduleToZeroTimeIsDueAtOnce(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	r := mustClaim(t, s, claimReq("acme", "", "run_1", 1), t0).Row
	if err := s.Reschedule(ctx, "acme", r.Key, time.Time{}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Due(ctx, t0.Add(-time.Hour), 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("due = %d rows, %v; want the rescheduled row", len(rows), err)
	}
	mustConsistent(t, s)
}

func TestCursorIsBoundToTenant(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	for i := range 3 {
		mustClaim(t, s, claimReq("acme", "", "run_1", i), t0.Add(time.Duration(i)*time.Second))
		mustClaim(t, s, claimReq("globex", "", "run_1", i), t0.Add(time.Duration(i)*time.Second))
	}
	page, err := s.List(ctx, ledger.ListQuery{Tenant: "acme", Limit: 1})
	if err != nil || page.NextCursor == "" {
		t.Fatalf("page = %+v, %v", page, err)
	}
	cases := []struct {
		name   string
		tenant string
		cursor string
		ok     bool
	}{
		{"own tenant", "acme", page.NextCursor, true},
		{"other tenant", "globex", page.NextCursor, false},
		{"flipped bit", "acme", flipLast(page.NextCursor), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.List(ctx, ledger.ListQuery{Tenant: tc.tenant, Cursor: tc.cursor})
			if ok := err == nil; ok != tc.ok {
				t.Errorf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ledger.ErrInvalidListQuery) {
				t.Errorf("err = %v, want ErrInvalidListQuery", err)
			}
		})
	}
}

func flipLast(s string) string {
	b := []byte(s)
	if b[len(b)-1] == 'A' {
		b[len(b)-1] = 'B'
	} else {
		b[len(b)-1] = 'A'
	}
	return string(b)
}

func TestCountRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "counts.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var keys []string
	for i := range 3 {
		c, err := ledger.NewClaim(ledger.ClaimRequest{Tenant: "acme", RunID: "run", Tool: "t", Vendor: "stripe",
			ToolClass: ledger.ClassWriteIdempotent, Intent: []byte(fmt.Sprintf(`{"n":%d}`, i))}, ledger.DefaultPolicy(), now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, c.Row.Key)
	}
	if _, _, err := s.Report(ctx, "acme", keys[0], ledger.Outcome{Kind: ledger.OutcomeTimeout, At: now}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Report(ctx, "acme", keys[1], ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: now}); err != nil {
		t.Fatal(err)
	}
	want := map[ledger.Status]int64{ledger.StatusPending: 1, ledger.StatusUnknown: 1, ledger.StatusSucceeded: 1, ledger.StatusFailedPoison: 0}
	got, err := s.CountRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("CountRows = %v, want %v", got, want)
	}
	mustConsistent(t, s)

	// A file from before the counts existed is counted when it is opened.
	mustFlush(t, s)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		for _, st := range allStatuses {
			if err := m.Delete(countKey(st)); err != nil {
				return err
			}
		}
		return m.Delete(metaCounted)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err = s.CountRows(ctx); err != nil || !maps.Equal(got, want) {
		t.Fatalf("after reopen CountRows = %v, %v, want %v", got, err, want)
	}
}
