package bolt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// gate parks the committer inside a group so that writers pile up in the
// queue; release lets it go. It makes "these ops share one group"
// deterministic without sleeping.
type gate struct {
	entered chan struct{}
	release chan struct{}
	done    chan error
}

func holdCommitter(t *testing.T, s *Store) *gate {
	t.Helper()
	g := &gate{entered: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	var once sync.Once
	go func() {
		g.done <- s.write(context.Background(), func(*boltTx) error {
			once.Do(func() { close(g.entered) })
			<-g.release
			return nil
		})
	}()
	<-g.entered
	return g
}

func (g *gate) open(t *testing.T) {
	t.Helper()
	close(g.release)
	if err := <-g.done; err != nil {
		t.Fatalf("gate op: %v", err)
	}
}

var errBoom = errors.New("boom")

func TestGroupCommitIsolatesFailingOp(t *testing.T) {
	const writers = 64
	cases := []struct {
		name string
		// failing is the op that fails, as writer i of s.
		failing       func(ctx context.Context, s *Store, i int) error
		wantRollbacks uint64
	}{
		{"fails after writing", func(ctx context.Context, s *Store, i int) error {
			return s.write(ctx, func(tx *boltTx) error {
				c, err := ledger.NewClaim(claimReq("acme", "", "run_1", i), ledger.Policy{}, t0)
				if err != nil {
					return err
				}
				if err := tx.PutRow(nil, c.Row); err != nil {
					return err
				}
				return errBoom
			})
		}, 1},
		{"panics after writing", func(ctx context.Context, s *Store, i int) error {
			return s.write(ctx, func(tx *boltTx) error {
				c, _ := ledger.NewClaim(claimReq("acme", "", "run_1", i), ledger.Policy{}, t0)
				if err := tx.PutRow(nil, c.Row); err != nil {
					return err
				}
				panic(errBoom)
			})
		}, 1},
		{"fails before writing", func(ctx context.Context, s *Store, _ int) error {
			// The report flow runs in its transaction and finds no row.
			_, _, err := s.Report(ctx, "acme", "no-such-key", ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0})
			return err
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := mustOpen(t, Options{})
			g := holdCommitter(t, s)
			before := s.Stats()

			const bad = 13
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					if i == bad {
						errs[i] = tc.failing(ctx, s, i)
						return
					}
					c, err := ledger.NewClaim(claimReq("acme", "", "run_1", i), s.policy, t0)
					if err != nil {
						errs[i] = err
						return
					}
					res, err := s.Claim(ctx, c)
					if err == nil && res.Decision != ledger.DecisionProceed {
						err = fmt.Errorf("decision %s", res.Decision)
					}
					errs[i] = err
				})
			}
			testkit.Eventually(t, "64 queued writers", func() bool { return s.queued() == writers })
			g.open(t)
			wg.Wait()

			for i, err := range errs {
				switch {
				case i == bad && err == nil:
					t.Errorf("failing op: no error")
				case i != bad && err != nil:
					t.Errorf("writer %d: %v", i, err)
				}
			}
			after := s.Stats()
			if got := after.Groups - before.Groups; got != 2 { // the gate's group, then all 64 in one
				t.Errorf("groups = %d, want 2 (gate + one group of %d)", got, writers)
			}
			if got := after.Rollbacks - before.Rollbacks; got != tc.wantRollbacks {
				t.Errorf("rollbacks = %d, want %d", got, tc.wantRollbacks)
			}
			page, err := s.List(ctx, ledger.ListQuery{Tenant: "acme", Limit: 500})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Rows) != writers-1 {
				t.Errorf("rows = %d, want %d", len(page.Rows), writers-1)
			}
			for _, r := range page.Rows {
				if r.ToolCallID == fmt.Sprintf("call_%d", bad) {
					t.Errorf("the failing op's row was committed")
				}
			}
			mustConsistent(t, s)
		})
	}
}

func TestQueuedWriteHonoursContext(t *testing.T) {
	s := mustOpen(t, Options{})
	g := holdCommitter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	ran := false
	errc := make(chan error, 1)
	go func() {
		errc <- s.write(ctx, func(*boltTx) error { ran = true; return nil })
	}()
	testkit.Eventually(t, "queued write", func() bool { return s.queued() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	g.open(t)
	// A later write commits after the withdrawn one would have.
	if err := s.write(context.Background(), func(*boltTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("withdrawn op ran")
	}
	if _, err := s.Claim(ctx, ledger.Claim{}); !errors.Is(err, context.Canceled) {
		t.Errorf("write with a dead ctx: %v", err)
	}
}

func TestCloseCommitsQueuedWrites(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/ledger.db"
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := holdCommitter(t, s)
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			c, _ := ledger.NewClaim(claimReq("acme", "", "run_1", i), s.policy, t0)
			_, err := s.Claim(ctx, c)
			errs <- err
		}()
	}
	testkit.Eventually(t, "queued claims", func() bool { return s.queued() == n })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	testkit.Eventually(t, "close to start", s.isClosed)
	g.open(t)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("claim queued before close: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if page, _ := s.List(ctx, ledger.ListQuery{Tenant: "acme"}); len(page.Rows) != n {
		t.Errorf("rows after reopen = %d, want %d", len(page.Rows), n)
	}
}

func TestConcurrentWritersStayConsistent(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{MaxGroup: 16})
	const writers, each = 64, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				n := w*each + i
				c, err := ledger.NewClaim(claimReq("acme", "", "run_1", n), s.policy, t0)
				if err == nil {
					_, err = s.Claim(ctx, c)
				}
				if err == nil && n%2 == 0 {
					_, _, err = s.Report(ctx, "acme", c.Row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0})
				}
				if err == nil && n%4 == 0 {
					_, _, err = s.Apply(ctx, "acme", c.Row.Key, ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, At: t0})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.Stats()
	if st.Groups >= st.Ops {
		t.Errorf("%d ops in %d groups: no group carried more than one", st.Ops, st.Groups)
	}
	recs, _ := s.PendingEvents(ctx, 10000)
	if want := writers * each / 2 * 3 / 2; len(recs) != want { // unknown for evens, succeeded for multiples of 4
		t.Errorf("outbox = %d records, want %d", len(recs), want)
	}
	mustConsistent(t, s)
}

// TestReadOnlyGroupSkipsCommit: a write that changes nothing ends its
// group without a commit. Each case is measured on its own, around its one
// call, so a failure names the flow that wrote; and each calls the helpers
// with its own t: a FailNow on the parent from a subtest's goroutine would
// report a confusing "subtest may have called FailNow on a parent test"
// instead of the claim's error.
func TestReadOnlyGroupSkipsCommit(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{})
	req := claimReq("acme", "", "run_1", 1)
	key := mustClaim(t, s, req, t0).Row.Key
	if _, _, err := s.Report(ctx, "acme", key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: t0}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func(t *testing.T) error
	}{
		{"replayed claim", func(t *testing.T) error {
			res := mustClaim(t, s, req, t0.Add(time.Minute))
			if res.Decision != ledger.DecisionReplay {
				return fmt.Errorf("decision %s, want replay", res.Decision)
			}
			return nil
		}},
		{"report on a missing key", func(*testing.T) error {
			_, _, err := s.Report(ctx, "acme", "missing", ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0})
			if !errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("err %v, want ErrNotFound", err)
			}
			return nil
		}},
		{"reschedule of a settled row", func(*testing.T) error { return s.Reschedule(ctx, "acme", key, t0) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The store is idle between calls: every write before this one
			// has returned, and a write returns only after its group ended.
			pagesBefore, statsBefore := pagesWritten(s), s.Stats()
			if err := tc.call(t); err != nil {
				t.Fatal(err)
			}
			if got := pagesWritten(s) - pagesBefore; got != 0 {
				t.Errorf("pages written = %d, want none", got)
			}
			st := s.Stats()
			if got := st.ReadOnly - statsBefore.ReadOnly; got != 1 {
				t.Errorf("read-only groups = %d, want 1", got)
			}
			if got := st.Groups - statsBefore.Groups; got != 1 {
				t.Errorf("groups = %d, want 1", got)
			}
		})
	}
}

func pagesWritten(s *Store) int64 {
	st := s.db.Stats()
	return st.TxStats.GetWrite()
}
