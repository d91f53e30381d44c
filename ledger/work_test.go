package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// queuedClaim is validClaimRequest with outbox autonomy, made at now.
func queuedClaim(t *testing.T, now time.Time, frozen bool) ledger.Claim {
	t.Helper()
	req := validClaimRequest()
	req.Frozen = frozen
	req.Gate = ledger.Gate{Autonomy: ledger.AutonomyOutbox}
	c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), now)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestQueuedNewKey(t *testing.T) {
	p := ledger.DefaultPolicy()
	c := queuedClaim(t, t0, false)
	res, row, err := ledger.DecideClaim(nil, c, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != ledger.DecisionQueued || !res.Inserted || row.Attempt != 0 || row.Status != ledger.StatusPending ||
		row.Autonomy != ledger.AutonomyOutbox || !row.PendingUntil.IsZero() || row.Approval != nil {
		t.Fatalf("queued row: %s %+v", res.Decision, row)
	}
	if len(res.Events) != 1 {
		t.Fatalf("events: %d, want one work item", len(res.Events))
	}
	ev := res.Events[0]
	w := ev.Work
	if ev.Status != ledger.EventQueued || ev.MsgID() != "acme:"+row.Key || w == nil || w.Vendor != "stripe" || w.ToolClass != ledger.ClassWriteIdempotent ||
		w.MetadataLocalID != row.MetadataLocalID || string(w.Intent) != `{"amount":10.5,"currency":"usd","to":"cus_123"}` ||
		w.Request == nil || w.Request.Path != "/v1/payment_intents" || w.Expect == nil || !w.ReplayWindowUntil.Equal(row.ReplayWindowUntil) {
		t.Fatalf("work item: %+v %+v", ev, w)
	}
	// The request envelope is what the worker sends: required.
	c.Row.Request = nil
	if _, _, err := ledger.DecideClaim(nil, c, p); !errors.Is(err, ledger.ErrRequestRequired) {
		t.Fatalf("no request: %v, want ErrRequestRequired", err)
	}
	// The kill switch wins.
	res, row, err = ledger.DecideClaim(nil, queuedClaim(t, t0, true), p)
	if err != nil || row != nil || res.Code != ledger.CodeToolFrozen || len(res.Events) != 0 {
		t.Fatalf("frozen: %s/%s %v", res.Decision, res.Code, err)
	}
	// A worker never inserts.
	w0 := ledger.WorkerClaim(queuedClaim(t, t0, false).Row, false, t0)
	if _, _, err := ledger.DecideClaim(nil, w0, p); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("worker claim of no row: %v, want ErrNotFound", err)
	}
}

func TestDecideClaimOnQueuedRows(t *testing.T) {
	p := ledger.DefaultPolicy()
	queued := func() ledger.Row {
		_, row, err := ledger.DecideClaim(nil, queuedClaim(t, t0, false), p)
		if err != nil {
			t.Fatal(err)
		}
		return *row
	}
	started := func() ledger.Row {
		r := queued()
		_, row, err := ledger.DecideClaim(&r, ledger.WorkerClaim(r, false, t0.Add(time.Minute)), p)
		if err != nil || row == nil {
			t.Fatal(err)
		}
		return *row
	}
	timedOut := func() ledger.Row {
		r := started()
		if _, err := ledger.Apply(&r, ledger.Classify(ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(2 * time.Minute)}), p); err != nil {
			t.Fatal(err)
		}
		return r
	}
	autonomous := func() ledger.Row { return claimAt(t, t0, ledger.ClassWriteIdempotent, false).Row }
	tests := []struct {
		name    string
		row     ledger.Row
		worker  bool
		frozen  bool
		now     time.Time
		want    ledger.Decision
		attempt int
		wantErr error
	}{
		{name: "an agent's retry is queued again", row: queued(), now: t0.Add(time.Hour), want: ledger.DecisionQueued},
		{name: "the worker proceeds", row: queued(), worker: true, now: t0.Add(time.Minute), want: ledger.DecisionProceed, attempt: 1},
		{name: "a frozen worker waits", row: queued(), worker: true, frozen: true, now: t0.Add(time.Minute), want: ledger.DecisionWait},
		{name: "a second worker waits for the lease", row: started(), worker: true, now: t0.Add(2 * time.Minute), want: ledger.DecisionWait, attempt: 1},
		{name: "an agent stays queued while the worker calls", row: started(), now: t0.Add(2 * time.Minute), want: ledger.DecisionQueued, attempt: 1},
		{name: "a worker retries an unknown row with the same key", row: timedOut(), worker: true, now: t0.Add(3 * time.Minute), want: ledger.DecisionRetrySameKey, attempt: 2},
		{name: "an agent never retries a queued row itself", row: timedOut(), now: t0.Add(3 * time.Minute), want: ledger.DecisionQueued, attempt: 1},
		{name: "a worker's claim of a row that was not queued", row: autonomous(), worker: true, now: t0.Add(time.Minute), wantErr: ledger.ErrNotQueued},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c ledger.Claim
			if tt.worker {
				c = ledger.WorkerClaim(tt.row, tt.frozen, tt.now)
			} else {
				c = queuedClaim(t, tt.now, tt.frozen)
			}
			res, write, err := ledger.DecideClaim(&tt.row, c, p)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || res.Decision != tt.want || res.Inserted || len(res.Events) != 0 {
				t.Fatalf("got %s inserted=%v events=%d err=%v, want %s", res.Decision, res.Inserted, len(res.Events), err, tt.want)
			}
			if got := res.Row.Attempt; got != tt.attempt {
				t.Fatalf("attempt %d, want %d", got, tt.attempt)
			}
			if (write != nil) != (tt.want == ledger.DecisionProceed || tt.want == ledger.DecisionRetrySameKey) {
				t.Fatalf("write %v for %s", write != nil, res.Decision)
			}
		})
	}
	t.Run("a settled queued row replays or stops for everyone", func(t *testing.T) {
		r := started()
		if _, err := ledger.Apply(&r, ledger.Classify(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: t0.Add(2 * time.Minute)}), p); err != nil {
			t.Fatal(err)
		}
		for _, c := range []ledger.Claim{queuedClaim(t, t0.Add(time.Hour), false), ledger.WorkerClaim(r, false, t0.Add(time.Hour))} {
			if res, _, _ := ledger.DecideClaim(&r, c, p); res.Decision != ledger.DecisionReplay {
				t.Fatalf("claim of a succeeded queued row: %s", res.Decision)
			}
		}
	})
}
