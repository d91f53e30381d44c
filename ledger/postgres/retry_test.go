package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
)

func adminConn(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// terminate kills every backend of an application name; it returns how many.
func terminate(t *testing.T, admin *pgx.Conn, app string) int {
	t.Helper()
	var n int
	err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n)
	if err != nil {
		t.Fatalf("terminate: %v", err)
	}
	return n
}

// TestRetryKilledConnections: pg_terminate_backend on the pool's backends
// (a failover, an operator's kill) does not fail the calls: a transaction
// that did not commit is run again on a fresh connection.
func TestRetryKilledConnections(t *testing.T) {
	db := sharedDB(t)
	t.Run("between calls", func(t *testing.T) {
		app := "recon_kill_" + randHex(4)
		u := pgtest.WithParams(t, newSchema(t, db), "application_name", app)
		s := openStore(t, u, Options{MaxConns: 4})
		admin := adminConn(t, u)
		killed := 0
		for i := range 5 {
			row := claimOne(t, s, "acme", fmt.Sprintf(`{"n":%d}`, i))
			killed += terminate(t, admin, app)
			if _, _, err := s.Report(t.Context(), "acme", row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(time.Second)}); err != nil {
				t.Fatalf("Report after a kill: %v", err)
			}
			killed += terminate(t, admin, app)
			got, err := s.Get(t.Context(), "acme", row.Key)
			if err != nil || got.Status != ledger.StatusUnknown {
				t.Fatalf("Get after a kill: %s, %v", got.Status, err)
			}
			killed += terminate(t, admin, app)
			if due, err := s.Due(t.Context(), t0.Add(time.Hour), 100); err != nil || len(due) != i+1 {
				t.Fatalf("Due after a kill: %d rows, %v; want %d", len(due), err, i+1)
			}
		}
		if killed == 0 {
			t.Fatal("no backend was killed: the test tested nothing")
		}
		if s.Retries() == 0 {
			t.Fatal("no transaction was retried after the kills")
		}
		if err := s.CheckConsistency(t.Context()); err != nil {
			t.Fatalf("CheckConsistency: %v", err)
		}
		t.Logf("killed %d backends, %d retries", killed, s.Retries())
	})
	t.Run("during concurrent claims", func(t *testing.T) {
		app := "recon_kill_" + randHex(4)
		u := pgtest.WithParams(t, newSchema(t, db), "application_name", app)
		s := openStore(t, u, Options{MaxConns: 8})
		admin := adminConn(t, u)
		const workers, perWorker = 8, 6
		var (
			wg         sync.WaitGroup
			stop       = make(chan struct{})
			killerDone = make(chan struct{})
			killed     atomic.Int64
			ambiguous  atomic.Int64
			ok         atomic.Int64
		)
		// The killer strikes whenever a few more claims went through, so
		// the kills land mid-run however slow the machine is (a timed
		// killer on a loaded machine would keep the database unreachable).
		go func() {
			defer close(killerDone)
			last := int64(0)
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				if ok.Load()+ambiguous.Load() < last+4 {
					continue
				}
				last = ok.Load() + ambiguous.Load()
				var n int
				if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err != nil {
					t.Errorf("terminate: %v", err)
					return
				}
				killed.Add(int64(n))
			}
		}()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWorker {
					c, err := ledger.NewClaim(ledger.ClaimRequest{
						Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
						ToolClass: ledger.ClassWriteIdempotent, Intent: []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)), ReplayWindow: time.Hour,
					}, ledger.DefaultPolicy(), t0)
					if err != nil {
						t.Errorf("NewClaim: %v", err)
						return
					}
					_, err = s.Claim(context.Background(), c)
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, errCommitUnknown) && errors.Is(err, ledger.ErrUnavailable):
						// The connection died with COMMIT in flight: the
						// one failure a store must not hide by re-running.
						ambiguous.Add(1)
					default:
						t.Errorf("Claim under kills: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-killerDone
		if killed.Load() == 0 {
			t.Fatal("no backend was killed: the test tested nothing")
		}
		// The killer's last round may have terminated idle pooled
		// connections after the last claim: their first query would answer
		// 57P01. The check reads through fresh ones.
		s.pool.Reset()
		if err := s.CheckConsistency(t.Context()); err != nil {
			t.Fatalf("CheckConsistency: %v", err)
		}
		t.Logf("%d claims succeeded, %d ambiguous commits, %d backends killed, %d retries", ok.Load(), ambiguous.Load(), killed.Load(), s.Retries())
	})
}
