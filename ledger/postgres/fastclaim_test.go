package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestClaimOneStatement: a new key's claim commits in one statement
// (fastclaim.go) with everything the locked flow writes — the row, its
// outbox record and NOTIFY, the Idempotency-Key record — and every case
// the statement cannot decide takes the locked flow, writing nothing of
// its own.
func TestClaimOneStatement(t *testing.T) {
	db := sharedDB(t)
	ctx := t.Context()
	newClaim := func(t *testing.T, intent string, gate ledger.Gate) ledger.Claim {
		t.Helper()
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
			Intent: json.RawMessage(intent), ReplayWindow: 24 * time.Hour,
			Request: &ledger.Request{Method: "POST", Path: "/v1/charges", Body: "amount=1"},
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			t.Fatal(err)
		}
		c.Gate = gate
		return c
	}
	key := func(v string) ledger.Idempotency {
		return ledger.Idempotency{Scope: "acme", KeyHash: ledger.IdempotencyKeyHash(v), Request: "req-" + v, At: t0}
	}
	approval := ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "policy", ApprovalTTL: time.Hour, RequestedBy: "tok_a"}
	outbox := ledger.Gate{Autonomy: ledger.AutonomyOutbox}

	for _, tc := range []struct {
		name     string
		gate     ledger.Gate
		idem     *ledger.Idempotency
		decision ledger.Decision
		events   int
	}{
		{"proceed", ledger.Gate{}, nil, ledger.DecisionProceed, 0},
		{"proceed with an Idempotency-Key", ledger.Gate{}, &ledger.Idempotency{}, ledger.DecisionProceed, 0},
		{"await approval", approval, nil, ledger.DecisionAwaitApproval, 1},
		{"queued, with an Idempotency-Key", outbox, &ledger.Idempotency{}, ledger.DecisionQueued, 1},
	} {
		t.Run("new key/"+tc.name, func(t *testing.T) {
			u := newSchema(t, db)
			s := openStore(t, u, Options{Policy: ledger.DefaultPolicy()})
			other := openStore(t, u, Options{Policy: ledger.DefaultPolicy()})
			drain(other.Notify())
			cctx := ctx
			if tc.idem != nil {
				*tc.idem = key("fast-" + randHex(8))
				cctx = ledger.WithIdempotency(ctx, *tc.idem)
			}
			res, err := s.Claim(cctx, newClaim(t, `{"n":1}`, tc.gate))
			if err != nil || res.Decision != tc.decision || !res.Inserted {
				t.Fatalf("claim: %s inserted=%v %v; want %s inserted", res.Decision, res.Inserted, err, tc.decision)
			}
			if got := s.fastInserts.Load(); got != 1 || s.fastMisses.Load() != 0 {
				t.Fatalf("one-statement claims %d, misses %d; want 1, 0", got, s.fastMisses.Load())
			}
			row, err := s.Get(ctx, "acme", res.Row.Key)
			if err != nil || row.Status != res.Row.Status || row.Attempt != res.Row.Attempt || !row.PendingUntil.Equal(res.Row.PendingUntil) {
				t.Fatalf("stored row %+v %v; want the answer's %+v", row, err, res.Row)
			}
			evs, err := s.PendingEvents(ctx, 10)
			if err != nil || len(evs) != tc.events {
				t.Fatalf("outbox: %d records %v; want %d", len(evs), err, tc.events)
			}
			for _, e := range evs {
				if e.Event.Key != res.Row.Key {
					t.Fatalf("outbox record of %q, want %q", e.Event.Key, res.Row.Key)
				}
			}
			if tc.events > 0 {
				select {
				case <-other.Notify():
				case <-time.After(10 * time.Second):
					t.Fatal("another replica's store was not notified of the outbox record")
				}
			}
			if tc.idem != nil {
				// The resend gets its answer from the record the statement
				// wrote: a proceed's own lease again (queued: queued).
				again, err := s.Claim(cctx, newClaim(t, `{"n":1}`, tc.gate))
				granted := tc.decision == ledger.DecisionProceed
				if err != nil || again.Decision != tc.decision || again.Inserted != granted || again.Row.Attempt != res.Row.Attempt {
					t.Fatalf("resend: %s inserted=%v %v; want the first send's %s", again.Decision, again.Inserted, err, tc.decision)
				}
			}
			if err := s.CheckConsistency(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("an existing key takes the locked flow", func(t *testing.T) {
		s := openStore(t, newSchema(t, db), Options{Policy: ledger.DefaultPolicy()})
		c := newClaim(t, `{"n":2}`, ledger.Gate{})
		if _, err := s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		res, err := s.Claim(ctx, c)
		if err != nil || res.Decision != ledger.DecisionWait || res.Inserted {
			t.Fatalf("second claim: %s inserted=%v %v; want wait", res.Decision, res.Inserted, err)
		}
		if s.fastInserts.Load() != 1 || s.fastMisses.Load() != 1 {
			t.Fatalf("one-statement claims %d, misses %d; want 1, 1", s.fastInserts.Load(), s.fastMisses.Load())
		}
	})

	t.Run("a parked orphan takes the locked flow, which applies it", func(t *testing.T) {
		s := openStore(t, newSchema(t, db), Options{Policy: ledger.DefaultPolicy()})
		c := newClaim(t, `{"n":3}`, ledger.Gate{})
		in, err := s.Ingest(ctx, ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_early", LocalID: c.Row.MetadataLocalID,
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", At: t0},
			At:       t0})
		if err != nil || in.Outcome != ledger.IngestOrphan {
			t.Fatalf("ingest: %s %v; want orphan", in.Outcome, err)
		}
		res, err := s.Claim(ctx, c)
		if err != nil || res.Decision != ledger.DecisionReplay || res.Row.Status != ledger.StatusSucceeded || len(res.Changes) != 1 {
			t.Fatalf("claim: %s %s changes %d %v; want the orphan applied (replay)", res.Decision, res.Row.Status, len(res.Changes), err)
		}
		if s.fastInserts.Load() != 0 || s.fastMisses.Load() != 1 {
			t.Fatalf("one-statement claims %d, misses %d; want 0, 1", s.fastInserts.Load(), s.fastMisses.Load())
		}
	})

	t.Run("an Idempotency-Key sent with another request writes nothing", func(t *testing.T) {
		s := openStore(t, newSchema(t, db), Options{Policy: ledger.DefaultPolicy()})
		i := key("reused-" + randHex(8))
		if _, err := s.Claim(ledger.WithIdempotency(ctx, i), newClaim(t, `{"n":4}`, ledger.Gate{})); err != nil {
			t.Fatal(err)
		}
		i.Request = "another-request"
		c := newClaim(t, `{"n":5}`, ledger.Gate{})
		_, err := s.Claim(ledger.WithIdempotency(ctx, i), c)
		if !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
			t.Fatalf("claim: %v; want ErrIdempotencyKeyReused", err)
		}
		// The statement inserted the row before the record's unique key
		// refused it: the implicit transaction took both back.
		if _, err := s.Get(ctx, "acme", c.Row.Key); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("row of the refused claim: %v; want ErrNotFound", err)
		}
		if s.fastMisses.Load() != 1 {
			t.Fatalf("misses %d, want 1", s.fastMisses.Load())
		}
	})

	t.Run("concurrent claims of one new key: one inserts, the rest wait", func(t *testing.T) {
		const n = 16
		s := openStore(t, newSchema(t, db), Options{Policy: ledger.DefaultPolicy(), MaxConns: n})
		warm(t, s, n)
		c := newClaim(t, `{"n":6}`, ledger.Gate{})
		type answer struct {
			res ledger.ClaimResult
			err error
		}
		answers := make(chan answer, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				res, err := s.Claim(context.Background(), c)
				answers <- answer{res, err}
			}()
		}
		close(start)
		inserted := 0
		for range n {
			a := <-answers
			if a.err != nil {
				t.Fatal(a.err)
			}
			switch {
			case a.res.Decision == ledger.DecisionProceed && a.res.Inserted:
				inserted++
			case a.res.Decision != ledger.DecisionWait:
				t.Fatalf("decision %s; want one proceed and waits", a.res.Decision)
			}
		}
		if inserted != 1 {
			t.Fatalf("%d claims inserted the row, want 1", inserted)
		}
	})
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestRowUpdateAtCommit: a row's update goes with the COMMIT, yet a read
// later in the transaction sees it, an update the server refuses is the
// flow's error with nothing committed, and an update of a missing row
// commits nothing.
func TestRowUpdateAtCommit(t *testing.T) {
	s := openStore(t, newSchema(t, sharedDB(t)), Options{Policy: ledger.DefaultPolicy()})
	ctx := t.Context()
	a := claimOne(t, s, "acme", `{"n":1}`)
	b := claimOne(t, s, "acme", `{"n":2}`)

	t.Run("a read after the update sees it", func(t *testing.T) {
		err := s.InTx(ctx, func(tx ledger.Tx) error {
			old, err := tx.GetRow("acme", a.Key)
			if err != nil {
				return err
			}
			row := old.Clone()
			row.RunID = "run-2"
			if err := tx.PutRow(&old, row); err != nil {
				return err
			}
			got, err := tx.RowByLocalID(a.MetadataLocalID)
			if err != nil || got.RunID != "run-2" {
				t.Errorf("read after the update: run %q %v; want run-2", got.RunID, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(ctx, "acme", a.Key); got.RunID != "run-2" {
			t.Fatalf("committed run %q, want run-2", got.RunID)
		}
	})

	t.Run("another row's local id: fingerprint mismatch, nothing committed", func(t *testing.T) {
		err := s.InTx(ctx, func(tx ledger.Tx) error {
			old, err := tx.GetRow("acme", a.Key)
			if err != nil {
				return err
			}
			row := old.Clone()
			row.RunID = "run-3"
			row.MetadataLocalID = b.MetadataLocalID
			if err := tx.PutRow(&old, row); err != nil {
				return err
			}
			return tx.AppendOutbox(ledger.Event{Tenant: "acme", Key: a.Key, Status: "succeeded"})
		})
		if !errors.Is(err, ledger.ErrFingerprintMismatch) || errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("err %v; want ErrFingerprintMismatch alone", err)
		}
		if got, _ := s.Get(ctx, "acme", a.Key); got.RunID != "run-2" {
			t.Fatalf("run %q after the refused update, want run-2", got.RunID)
		}
		if n, err := s.CountEvents(ctx); err != nil || n != 0 {
			t.Fatalf("outbox holds %d records %v; want none committed", n, err)
		}
	})

	t.Run("a missing row: nothing committed", func(t *testing.T) {
		err := s.InTx(ctx, func(tx ledger.Tx) error {
			ghost := a.Clone()
			ghost.Key, ghost.MetadataLocalID = "ghost", "lid-ghost"
			if err := tx.PutRow(&ghost, ghost); err != nil {
				return err
			}
			return tx.AppendOutbox(ledger.Event{Tenant: "acme", Key: "ghost", Status: "succeeded"})
		})
		if !errors.Is(err, errConflict) {
			t.Fatalf("err %v; want errConflict", err)
		}
		if n, err := s.CountEvents(ctx); err != nil || n != 0 {
			t.Fatalf("outbox holds %d records %v; want none committed", n, err)
		}
	})
}

// TestOneStatementWaitsForLockedReads: a new key's one-statement claim
// waits for a locked flow that read its key (or its Idempotency-Key
// record) as missing, so what that flow decided on still holds at its
// COMMIT. It once committed in between, and the locked flow's local-id
// check then answered "local id in use" to a claim of the same key.
func TestOneStatementWaitsForLockedReads(t *testing.T) {
	db := sharedDB(t)
	ctx := t.Context()
	claimOf := func(t *testing.T, intent string) ledger.Claim {
		t.Helper()
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
			Intent: json.RawMessage(intent), ReplayWindow: 24 * time.Hour,
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	idem := ledger.Idempotency{Scope: "acme", KeyHash: ledger.IdempotencyKeyHash("wait-" + randHex(8)), Request: "req", At: t0}
	for _, tc := range []struct {
		name string
		// read is the locked flow's read of what the claim is about to
		// insert; check reads it again before the COMMIT.
		read, check func(tx *pgTx, c ledger.Claim) error
		ctx         func(ctx context.Context) context.Context
		// lock is the advisory lock the claim waits on.
		lock func(c ledger.Claim) (ns, id int32)
	}{
		{
			name: "the key",
			read: func(tx *pgTx, c ledger.Claim) error {
				_, err := tx.GetRow(c.Row.Tenant, c.Row.Key)
				return err
			},
			check: func(tx *pgTx, c ledger.Claim) error {
				_, err := tx.RowByLocalID(c.Row.MetadataLocalID)
				return err
			},
			ctx:  func(ctx context.Context) context.Context { return ctx },
			lock: func(c ledger.Claim) (int32, int32) { return lockRow, lockID(pairName(c.Row.Tenant, c.Row.Key)) },
		},
		{
			name: "the Idempotency-Key record",
			read: func(tx *pgTx, _ ledger.Claim) error {
				_, err := tx.GetIdempotency(idem.Scope, idem.KeyHash)
				return err
			},
			check: func(tx *pgTx, _ ledger.Claim) error {
				_, err := tx.GetIdempotency(idem.Scope, idem.KeyHash)
				return err
			},
			ctx:  func(ctx context.Context) context.Context { return ledger.WithIdempotency(ctx, idem) },
			lock: func(ledger.Claim) (int32, int32) { return lockIdempotency, lockID(pairName(idem.Scope, idem.KeyHash)) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, newSchema(t, db), Options{Policy: ledger.DefaultPolicy()})
			c := claimOf(t, `{"n":1}`)
			done := make(chan error, 1)
			errRollback := errors.New("roll back")
			err := s.run(ctx, true, func(tx *pgTx) error {
				if err := tc.read(tx, c); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("first read: %v; want ErrNotFound", err)
				}
				go func() {
					_, err := s.Claim(tc.ctx(context.Background()), c)
					done <- err
				}()
				// The claim either waits on the advisory lock this
				// transaction holds or, wrongly, commits. (pg_locks shows
				// the cluster's locks: only this one counts.)
				ns, id := tc.lock(c)
				for waiting := false; !waiting; {
					select {
					case err := <-done:
						t.Fatalf("the one-statement claim returned (%v) while a locked flow held its read as missing", err)
					case <-time.After(5 * time.Millisecond):
					}
					if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
						WHERE locktype = 'advisory' AND NOT granted AND classid = $1::bigint::oid AND objid = ($2::bigint & 4294967295)::oid)`,
						int64(ns), int64(id)).Scan(&waiting); err != nil {
						t.Fatal(err)
					}
				}
				if err := tc.check(tx, c); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("second read: %v; want ErrNotFound still", err)
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				t.Fatalf("locked flow: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the claim after the locked flow: %v", err)
			}
			if _, err := s.Get(ctx, "acme", c.Row.Key); err != nil {
				t.Fatalf("row of the claim: %v", err)
			}
			if s.fastInserts.Load() != 1 {
				t.Fatalf("one-statement claims %d, want 1 (the wait is inside the statement's pipeline)", s.fastInserts.Load())
			}
		})
	}
}

// TestOneStatementSeesAnOrphanParkedWhileItWaits: a webhook's locked flow
// holds the local id's lock, finds no row and parks an orphan; the
// one-statement claim of that local id waits on the lock, and its orphan
// check, made once the lock is granted, must see the orphan the webhook
// committed meanwhile (a check on a snapshot taken before the wait would
// not, and the row would go in with the orphan stranded beside it).
func TestOneStatementSeesAnOrphanParkedWhileItWaits(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, newSchema(t, sharedDB(t)), Options{Policy: ledger.DefaultPolicy()})
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(`{"n":1}`), ReplayWindow: 24 * time.Hour,
	}, ledger.DefaultPolicy(), t0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan ledger.ClaimResult, 1)
	err = s.run(ctx, true, func(tx *pgTx) error {
		if _, err := tx.RowByLocalID(c.Row.MetadataLocalID); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("webhook's read: %v; want ErrNotFound", err)
		}
		go func() {
			res, err := s.Claim(context.Background(), c)
			if err != nil {
				t.Errorf("claim: %v", err)
			}
			done <- res
		}()
		for waiting := false; !waiting; {
			select {
			case res := <-done:
				t.Fatalf("the claim returned (%s) while the webhook held its local id", res.Decision)
			case <-time.After(5 * time.Millisecond):
			}
			if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
				WHERE locktype = 'advisory' AND NOT granted AND classid = $1::bigint::oid AND objid = ($2::bigint & 4294967295)::oid)`,
				int64(lockLocalID), int64(lockID(c.Row.MetadataLocalID))).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
		}
		return tx.PutOrphan(ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_meanwhile", LocalID: c.Row.MetadataLocalID,
			Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", At: t0}, At: t0})
	})
	if err != nil {
		t.Fatalf("webhook: %v", err)
	}
	res := <-done
	if res.Decision != ledger.DecisionReplay || res.Row.Status != ledger.StatusSucceeded {
		t.Fatalf("claim: %s %s; want the orphan parked meanwhile applied (replay, succeeded)", res.Decision, res.Row.Status)
	}
	if s.fastInserts.Load() != 0 || s.fastMisses.Load() != 1 {
		t.Fatalf("one-statement claims %d, misses %d; want 0, 1", s.fastInserts.Load(), s.fastMisses.Load())
	}
}
