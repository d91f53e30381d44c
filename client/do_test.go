package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/ledger"
)

// TestDoClassifies drives one Do per vendor behaviour and checks what the
// ledger recorded and what Do returned.
func TestDoClassifies(t *testing.T) {
	tests := []struct {
		name       string
		fault      fakestripe.Fault
		wantStatus ledger.Status
		wantKind   ledger.OutcomeKind
		wantErr    error // nil, client.ErrStopped or client.ErrUnsettled
		wantObj    int   // objects the vendor holds afterwards
		wantRecpt  bool
	}{
		{name: "2xx with receipt", fault: fakestripe.FaultNone, wantStatus: ledger.StatusSucceeded, wantKind: ledger.OutcomeResponse, wantObj: 1, wantRecpt: true},
		{name: "409 already exists with receipt", fault: fakestripe.Fault409, wantStatus: ledger.StatusSucceeded, wantKind: ledger.OutcomeResponse, wantObj: 1, wantRecpt: true},
		{name: "500 no receipt", fault: fakestripe.Fault500, wantStatus: ledger.StatusUnknown, wantKind: ledger.OutcomeResponse, wantErr: client.ErrUnsettled},
		{name: "429 stays pending", fault: fakestripe.Fault429, wantStatus: ledger.StatusPending, wantKind: ledger.OutcomeResponse, wantErr: client.ErrUnsettled},
		{name: "declined, should-retry false", fault: fakestripe.FaultDecline, wantStatus: ledger.StatusFailedPoison, wantKind: ledger.OutcomeResponse, wantErr: client.ErrStopped, wantObj: 1, wantRecpt: true},
		{name: "commit then timeout", fault: fakestripe.FaultHang, wantStatus: ledger.StatusUnknown, wantKind: ledger.OutcomeTimeout, wantErr: client.ErrUnsettled, wantObj: 1},
		{name: "commit then connection reset", fault: fakestripe.FaultReset, wantStatus: ledger.StatusUnknown, wantKind: ledger.OutcomeNetworkError, wantErr: client.ErrUnsettled, wantObj: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			v := newFakeStripe(t, tt.fault)
			c := e.client(t, client.WithCallTimeout(300*time.Millisecond))
			out, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(0)))
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Do: %v", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Do error = %v, want %v", err, tt.wantErr)
			}
			if got := e.row(t, out.Key).Status; got != tt.wantStatus {
				t.Errorf("row status = %s, want %s", got, tt.wantStatus)
			}
			if out.Kind != tt.wantKind {
				t.Errorf("reported kind = %s, want %s", out.Kind, tt.wantKind)
			}
			if !out.Called || out.Decision != ledger.DecisionProceed {
				t.Errorf("called=%v decision=%s, want a proceed that called", out.Called, out.Decision)
			}
			if got := v.ObjectCount(); got != tt.wantObj {
				t.Errorf("vendor objects = %d, want %d", got, tt.wantObj)
			}
			if got := e.row(t, out.Key).UpstreamReceiptID != ""; got != tt.wantRecpt {
				t.Errorf("receipt recorded = %v, want %v", got, tt.wantRecpt)
			}
			posts := v.received()
			if len(posts) != 1 || posts[0].key != out.Key || posts[0].localID != out.LocalID {
				t.Errorf("vendor saw %+v, want one post with key %s and local id %s", posts, out.Key, out.LocalID)
			}
		})
	}
}

// TestDoDecisions covers what Do does for each claim decision.
func TestDoDecisions(t *testing.T) {
	tests := []struct {
		name string
		// setup runs before the Do under test; it may call Do itself.
		setup        func(t *testing.T, e *env, v *fakeStripe, c *client.Client)
		faults       []fakestripe.Fault
		wantDecision ledger.Decision
		wantErr      error
		wantCode     string
		wantCalls    int // posts the vendor saw in the Do under test
	}{
		{
			name:         "proceed calls once",
			wantDecision: ledger.DecisionProceed, wantCalls: 1,
		},
		{
			name: "replay returns the receipt without calling",
			setup: func(t *testing.T, e *env, v *fakeStripe, c *client.Client) {
				mustDo(t, c, v)
			},
			wantDecision: ledger.DecisionReplay, wantCalls: 0,
		},
		{
			name:   "stop after failed_poison does not call",
			faults: []fakestripe.Fault{fakestripe.FaultDecline},
			setup: func(t *testing.T, e *env, v *fakeStripe, c *client.Client) {
				if _, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(0))); !errors.Is(err, client.ErrStopped) {
					t.Fatalf("first Do: %v, want a stop", err)
				}
			},
			wantDecision: ledger.DecisionStop, wantErr: client.ErrStopped, wantCode: ledger.CodeFailedPoison, wantCalls: 0,
		},
		{
			name: "stop when the tool is frozen",
			setup: func(t *testing.T, e *env, v *fakeStripe, c *client.Client) {
				e.freeze("stripe.payment_intents.create")
			},
			wantDecision: ledger.DecisionStop, wantErr: client.ErrStopped, wantCode: ledger.CodeToolFrozen, wantCalls: 0,
		},
		{
			name:   "retry_same_key after a 500 is refused: wait (stripe replays the stored 500)",
			faults: []fakestripe.Fault{fakestripe.Fault500},
			setup: func(t *testing.T, e *env, v *fakeStripe, c *client.Client) {
				if _, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(0))); !errors.Is(err, client.ErrUnsettled) {
					t.Fatalf("first Do: %v, want unsettled", err)
				}
			},
			// The row is unknown and not retryable: Do waits until ctx ends.
			wantDecision: ledger.DecisionWait, wantErr: client.ErrUnsettled, wantCalls: 0,
		},
		{
			name:   "retry_same_key after a timeout calls with the same key",
			faults: []fakestripe.Fault{fakestripe.FaultHang},
			setup: func(t *testing.T, e *env, v *fakeStripe, c *client.Client) {
				if _, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(200*time.Millisecond))); !errors.Is(err, client.ErrUnsettled) {
					t.Fatalf("first Do: %v, want unsettled", err)
				}
			},
			wantDecision: ledger.DecisionRetrySameKey, wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			v := newFakeStripe(t, tt.faults...)
			c := e.client(t, client.WithWait(100*time.Millisecond))
			if tt.setup != nil {
				tt.setup(t, e, v, c)
			}
			before := len(v.received())
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			out, err := c.Do(ctx, chargeClaim(1050), v.httpCall(keyedHTTP(0)))
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Do: %v", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Do error = %v, want %v", err, tt.wantErr)
			}
			if out.Decision != tt.wantDecision {
				t.Errorf("decision = %s, want %s", out.Decision, tt.wantDecision)
			}
			var se *client.StopError
			if tt.wantCode != "" && (!errors.As(err, &se) || se.Code != tt.wantCode) {
				t.Errorf("stop error = %v, want code %s", err, tt.wantCode)
			}
			posts := v.received()[before:]
			if len(posts) != tt.wantCalls {
				t.Fatalf("vendor posts = %d, want %d", len(posts), tt.wantCalls)
			}
			for _, p := range posts {
				if out.Key == "" || p.key != out.Key {
					t.Errorf("vendor got key %q, want the ledger's %q", p.key, out.Key)
				}
			}
			if v.ObjectCount() > 1 {
				t.Errorf("vendor holds %d objects, want at most 1", v.ObjectCount())
			}
			if tt.wantDecision == ledger.DecisionReplay && (!out.Replayed || out.ReceiptID() != "pi_1") {
				t.Errorf("replay outcome = %+v, want the stored receipt pi_1", out)
			}
		})
	}
}

func mustDo(t *testing.T, c *client.Client, v *fakeStripe) client.Outcome {
	t.Helper()
	out, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(0)))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return out
}

// TestDoTimeoutThenSameKey is the drill's core: the vendor commits and then
// hangs past the client's timeout; the row is unknown; Do again (the harness
// retrying) gets retry_same_key with the SAME key, the vendor replays, and
// it holds one object.
func TestDoTimeoutThenSameKey(t *testing.T) {
	e := newEnv(t)
	v := newFakeStripe(t, fakestripe.FaultHang)
	c := e.client(t)
	call := v.httpCall(keyedHTTP(200 * time.Millisecond))

	first, err := c.Do(context.Background(), chargeClaim(1050), call)
	var ue *client.UnsettledError
	if !errors.As(err, &ue) || ue.Status != ledger.StatusUnknown {
		t.Fatalf("first Do: %v, want unsettled with the row unknown", err)
	}
	if first.Kind != ledger.OutcomeTimeout {
		t.Errorf("first kind = %s, want timeout", first.Kind)
	}
	// The model re-emits the call with the amount spelled another way: same intent.
	claim := chargeClaim(1050)
	claim.ToolCallID = "call_2"
	claim.Intent = map[string]any{"currency": "usd", "customer": "cus_123", "amount": 10.50e2}
	second, err := c.Do(context.Background(), claim, call)
	if err != nil {
		t.Fatalf("second Do: %v", err)
	}
	if second.Decision != ledger.DecisionRetrySameKey || second.Key != first.Key {
		t.Fatalf("second Do: decision %s key %s, want retry_same_key with key %s", second.Decision, second.Key, first.Key)
	}
	if !second.Row.IdempotentReplayed || second.Row.Status != ledger.StatusSucceeded || second.Row.Attempt != 2 {
		t.Errorf("row = %+v, want succeeded, replayed, attempt 2", second.Row)
	}
	if got := v.ObjectCount(); got != 1 {
		t.Errorf("vendor objects = %d, want 1", got)
	}
	for _, p := range v.received() {
		if p.key != first.Key {
			t.Errorf("vendor got key %q, want %q", p.key, first.Key)
		}
	}
}

// TestDoPanicReportsUnknown: a call that panics after the vendor may have
// committed leaves the row unknown (reported), not pending for a lease.
func TestDoPanicReportsUnknown(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	var key string
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the call's panic", p)
			}
		}()
		_, _ = c.Do(context.Background(), chargeClaim(1050), func(ctx context.Context, k, _ string) (client.Result, error) {
			key = k
			panic("boom")
		})
	}()
	if got := e.row(t, key).Status; got != ledger.StatusUnknown {
		t.Errorf("row status = %s, want unknown", got)
	}
}

// TestDoCallSeesKeyInContext: the call's context carries the key and local
// id (what Transport and StripeBackend read).
func TestDoCallSeesKeyInContext(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	_, err := c.Do(context.Background(), chargeClaim(1050), func(ctx context.Context, key, localID string) (client.Result, error) {
		k, ok := client.KeyFrom(ctx)
		if !ok || k.Key != key || k.LocalID != localID || !strings.HasPrefix(localID, "rl_") {
			t.Errorf("KeyFrom = %+v %v, want %s %s", k, ok, key, localID)
		}
		return client.Result{HTTPStatus: http.StatusOK, ReceiptID: "pi_9"}, nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
}

// TestDoConcurrentSameIntent: eight harness resumes of one tool call at
// once; the vendor sees one write and every Do ends with its receipt.
func TestDoConcurrentSameIntent(t *testing.T) {
	e := newEnv(t)
	v := newFakeStripe(t)
	c := e.client(t, client.WithWait(5*time.Second))
	const n = 8
	errs := make(chan error, n)
	receipts := make(chan string, n)
	for range n {
		go func() {
			out, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(0)))
			errs <- err
			receipts <- out.ReceiptID()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Do: %v", err)
		}
		if r := <-receipts; r != "pi_1" {
			t.Errorf("receipt = %q, want pi_1", r)
		}
	}
	if got := len(v.received()); got != 1 {
		t.Errorf("vendor posts = %d, want 1", got)
	}
}

// TestDoReportsAfterCallerDeadline: the caller's own deadline ends the
// vendor call; the timeout still reaches the ledger (the report does not
// run on the dead context), so the row is unknown, not pending for a lease.
func TestDoReportsAfterCallerDeadline(t *testing.T) {
	e := newEnv(t)
	v := newFakeStripe(t, fakestripe.FaultHang)
	c := e.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	out, err := c.Do(ctx, chargeClaim(1050), v.httpCall(keyedHTTP(0)))
	if !errors.Is(err, client.ErrUnsettled) || errors.Is(err, client.ErrReportFailed) {
		t.Fatalf("Do error = %v, want unsettled with the report delivered", err)
	}
	if got := e.row(t, out.Key).Status; got != ledger.StatusUnknown || out.Kind != ledger.OutcomeTimeout {
		t.Errorf("row %s after a %s report, want unknown after timeout", got, out.Kind)
	}
}

// TestDoCallWithoutKeyReportsNothing: a write the keyed transport refused
// before sending (ErrNoKey: the call dropped Do's context) is not reported
// as a network error: nothing reached the vendor, the row stays pending,
// and Do returns ErrNoKey.
func TestDoCallWithoutKeyReportsNothing(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	out, err := c.Do(context.Background(), chargeClaim(1050), func(ctx context.Context, key, localID string) (client.Result, error) {
		return client.Result{}, fmt.Errorf("stripe POST /v1/payment_intents: %w", client.ErrNoKey)
	})
	if !errors.Is(err, client.ErrNoKey) || out.Called {
		t.Fatalf("Do: called %v, %v; want ErrNoKey and not called", out.Called, err)
	}
	if row := e.row(t, out.Key); row.Status != ledger.StatusPending || row.LastHTTPStatus != 0 {
		t.Fatalf("row %s (last status %d), want pending: nothing was reported", row.Status, row.LastHTTPStatus)
	}
}
