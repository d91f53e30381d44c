package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/registry"
)

const tokenApprover = "tok_acme_approver_3c7e1a9b"

// withAutonomy serves the registry and acme's approver token, with
// approval requests that expire after ttl (0: the default).
func withAutonomy(ttl time.Duration) func(*api.Options) {
	return func(o *api.Options) {
		o.Registry = registry.New(o.Store.(ledger.Tools), registry.Options{})
		o.ApproverTokens = map[string]string{tokenApprover: "acme"}
		o.ApprovalTTL = ttl
	}
}

// registerCharge registers chargeClaim's tool with autonomy a, every
// checklist box checked.
func registerCharge(t *testing.T, c *client.Client, a ledger.Autonomy) {
	t.Helper()
	_, _, err := c.PutTool(context.Background(), ledger.Tool{
		Name: "stripe.payment_intents.create", Vendor: "stripe", Class: ledger.ClassWriteIdempotent, SideEffect: "charge",
		KeyPlacement: ledger.KeyPlacement{Header: "Idempotency-Key"}, Autonomy: a,
		Checklist: ledger.Checklist{SideEffectDocumented: true, KeyBornInRuntime: true, LedgerOrUniqueField: true,
			TimeoutLeavesUnknown: true, ErrorClassesMapped: true, DuplicateDeliveryTest: true, CheckedBy: "alice"},
	})
	if err != nil {
		t.Fatalf("PutTool: %v", err)
	}
}

// outboxClaim is chargeClaim with the request envelope an outbox tool's
// claim needs (the worker makes the call from it).
func outboxClaim() client.ClaimRequest {
	c := chargeClaim(1050)
	c.Request = &ledger.Request{Method: http.MethodPost, Path: "/v1/payment_intents",
		ContentType: "application/x-www-form-urlencoded", Body: "amount=1050&currency=usd"}
	return c
}

// countingCall is a vendor call that counts itself and succeeds.
func countingCall(n *atomic.Int32, receipt string) client.CallFunc {
	return func(context.Context, string, string) (client.Result, error) {
		n.Add(1)
		return client.Result{HTTPStatus: 200, ReceiptID: receipt}, nil
	}
}

// openApproval waits until acme has one open approval request and returns it.
func openApproval(t *testing.T, approver *client.Client) client.ApprovalView {
	t.Helper()
	var view client.ApprovalView
	testkit.Eventually(t, "an approval request", func() bool {
		page, err := approver.ListApprovals(context.Background(), client.ApprovalQuery{})
		if err != nil {
			t.Fatalf("ListApprovals: %v", err)
		}
		if len(page.Approvals) == 1 {
			view = page.Approvals[0]
		}
		return len(page.Approvals) == 1
	})
	return view
}

// TestStart: the worker's start of a queued key proceeds once; a second
// start waits; a key with no row is 404, a row not queued 409 not_queued.
func TestStart(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, withAutonomy(0))
	c := e.client(t)
	registerCharge(t, c, ledger.AutonomyOutbox)

	var calls atomic.Int32
	out, err := c.Do(ctx, outboxClaim(), countingCall(&calls, "pi_never"))
	var q *client.QueuedError
	if !errors.Is(err, client.ErrQueued) || !errors.As(err, &q) || q.Key == "" || q.RunID != "run_1" || q.Row.Attempt != 0 {
		t.Fatalf("Do of an outbox tool = %+v, %v; want a *QueuedError", out, err)
	}
	if out.Called || calls.Load() != 0 || out.Decision != ledger.DecisionQueued || !out.Queued {
		t.Fatalf("Do of an outbox tool called, or its outcome is not queued: %+v", out)
	}
	if !errors.Is(err, client.ErrUnsettled) {
		t.Fatalf("a *QueuedError does not match ErrUnsettled: a runtime parking on it would not park: %v", err)
	}
	if _, err := c.Claim(ctx, client.ClaimRequest{}); err == nil {
		t.Fatal("a claim without an intent was sent")
	}

	first, err := c.Start(ctx, q.Key)
	if err != nil || first.Decision != ledger.DecisionProceed || first.Row.Attempt != 1 || first.HTTPStatus != http.StatusOK {
		t.Fatalf("first Start = %+v, %v; want 200 proceed at attempt 1", first, err)
	}
	second, err := c.StartWait(ctx, q.Key, 50*time.Millisecond)
	if err != nil || second.Decision != ledger.DecisionWait || second.HTTPStatus != http.StatusConflict {
		t.Fatalf("second Start = %+v, %v; want 409 wait", second, err)
	}
	if _, err := c.Start(ctx, "no_such_key"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Start of a key with no row: %v, want ErrNotFound", err)
	}
	registerCharge(t, c, ledger.AutonomyAutonomous)
	resp, err := c.Claim(ctx, chargeClaim(2000)) // pending, in flight: not the worker's
	if err != nil || resp.Decision != ledger.DecisionProceed {
		t.Fatalf("claim of an autonomous tool = %+v, %v", resp, err)
	}
	if _, err := c.Start(ctx, resp.Key()); !errors.Is(err, client.ErrNotQueued) {
		t.Fatalf("Start of a row not queued: %v, want ErrNotQueued", err)
	}
}

// TestDoAwaitsApproval: Do of a gated tool waits for the approver (long
// polls, or NATS events with a poll interval too long to matter), then
// calls once after a grant, or stops with approval_denied or
// approval_expired without calling.
func TestDoAwaitsApproval(t *testing.T) {
	tests := []struct {
		name     string
		nats     bool
		ttl      time.Duration
		decide   func(ctx context.Context, c *client.Client, id string) error
		wantCode string // "" for a call
	}{
		{name: "long poll, granted", decide: approve},
		{name: "long poll, denied", decide: deny, wantCode: ledger.CodeApprovalDenied},
		{name: "long poll, expired", ttl: 300 * time.Millisecond, wantCode: ledger.CodeApprovalExpired},
		{name: "nats, granted", nats: true, decide: approve},
		{name: "nats, denied", nats: true, decide: deny, wantCode: ledger.CodeApprovalDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, withAutonomy(tt.ttl))
			opts := []client.Option{client.WithWait(5 * time.Second)}
			if tt.nats {
				// An hour: only the event can wake the wait in time.
				opts = append(opts, client.WithNATS(startNATS(t, e)), client.WithPollInterval(time.Hour))
			}
			agent := e.client(t, opts...)
			registerCharge(t, e.client(t), ledger.AutonomyApproval)
			approver := newClient(t, e.srv.URL, tokenApprover)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()

			var calls atomic.Int32
			type result struct {
				out client.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := agent.Do(ctx, chargeClaim(1050), countingCall(&calls, "pi_approved"))
				done <- result{out, err}
			}()
			view := openApproval(t, approver)
			if tt.decide != nil {
				if calls.Load() != 0 {
					t.Fatal("called before the decision")
				}
				if err := tt.decide(ctx, approver, view.Approval.ID); err != nil {
					t.Fatalf("decide: %v", err)
				}
			}
			r := <-done
			if !r.out.AwaitedApproval {
				t.Errorf("Outcome.AwaitedApproval is false")
			}
			if tt.wantCode == "" {
				if r.err != nil || !r.out.Called || calls.Load() != 1 || r.out.Row.Status != ledger.StatusSucceeded || r.out.Key != view.Row.Key {
					t.Fatalf("Do after the grant = %+v, %v (calls %d); want one call", r.out, r.err, calls.Load())
				}
				// The grant allowed one call: the same intent replays.
				again, err := agent.Do(ctx, chargeClaim(1050), countingCall(&calls, "pi_again"))
				if err != nil || again.Decision != ledger.DecisionReplay || calls.Load() != 1 {
					t.Fatalf("Do again = %+v, %v; want a replay", again, err)
				}
				return
			}
			var se *client.StopError
			if !errors.As(r.err, &se) || se.Code != tt.wantCode || r.out.Called || calls.Load() != 0 {
				t.Fatalf("Do = %+v, %v (calls %d); want stop %s and no call", r.out, r.err, calls.Load(), tt.wantCode)
			}
		})
	}
}

func approve(ctx context.Context, c *client.Client, id string) error {
	v, err := c.Approve(ctx, id, client.ApprovalDecision{Actor: "alice", Note: "ok"})
	if err == nil && v.Approval.State != ledger.ApprovalGranted {
		err = errors.New("approval state " + string(v.Approval.State))
	}
	return err
}

func deny(ctx context.Context, c *client.Client, id string) error {
	_, err := c.Deny(ctx, id, client.ApprovalDecision{Actor: "alice", Note: "not this one"})
	return err
}

// TestDoApprovalDeadline: a ctx that ends while the call waits for
// approval returns an *AwaitingApprovalError and calls nothing; after the
// grant, Do of the same intent picks the key up and calls once.
func TestDoApprovalDeadline(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	agent := e.client(t, client.WithWait(5*time.Second))
	registerCharge(t, agent, ledger.AutonomyApproval)
	approver := newClient(t, e.srv.URL, tokenApprover)
	var calls atomic.Int32

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := agent.Do(ctx, chargeClaim(1050), countingCall(&calls, "pi_1"))
	cancel()
	var ae *client.AwaitingApprovalError
	if !errors.Is(err, client.ErrAwaitingApproval) || !errors.Is(err, client.ErrUnsettled) || !errors.As(err, &ae) || ae.ApprovalID == "" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do past its deadline: %v; want an *AwaitingApprovalError", err)
	}
	if calls.Load() != 0 {
		t.Fatal("called without approval")
	}
	if _, err := approver.Approve(context.Background(), ae.ApprovalID, client.ApprovalDecision{Actor: "alice"}); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	if _, err := approver.Approve(context.Background(), ae.ApprovalID, client.ApprovalDecision{Actor: "alice"}); !errors.Is(err, client.ErrApprovalDecided) {
		t.Fatalf("a second Approve: %v, want ErrApprovalDecided", err)
	}
	if v, err := approver.GetApproval(context.Background(), ae.ApprovalID); err != nil || v.Approval.State != ledger.ApprovalGranted || v.Row.Key != ae.Key {
		t.Fatalf("GetApproval = %+v, %v", v, err)
	}
	out, err := agent.Do(context.Background(), chargeClaim(1050), countingCall(&calls, "pi_1"))
	if err != nil || out.Key != ae.Key || !out.Called || calls.Load() != 1 {
		t.Fatalf("Do after the grant = %+v, %v; want the same key called once", out, err)
	}
}

// TestDoWaitsForQueued: WithWaitQueued makes Do of an outbox tool wait
// until the worker's report settles the row, then return the receipt
// without calling (long polls of the row, or its NATS event); past its
// deadline it returns the *QueuedError.
func TestDoWaitsForQueued(t *testing.T) {
	for _, useNATS := range []bool{false, true} {
		name := "reads"
		if useNATS {
			name = "nats"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withAutonomy(0))
			opts := []client.Option{client.WithWaitQueued()}
			if useNATS {
				opts = append(opts, client.WithNATS(startNATS(t, e)), client.WithPollInterval(time.Hour))
			}
			agent := e.client(t, opts...)
			worker := e.client(t)
			registerCharge(t, worker, ledger.AutonomyOutbox)
			var calls atomic.Int32

			short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			out, err := agent.Do(short, outboxClaim(), countingCall(&calls, "pi_x"))
			cancel()
			var q *client.QueuedError
			if !errors.As(err, &q) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Do past its deadline: %v; want a *QueuedError", err)
			}
			if !out.Queued || out.Key != q.Key {
				t.Fatalf("Do past its deadline: Outcome %+v; want Queued with the key", out)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			type result struct {
				out client.Outcome
				err error
			}
			// The worker takes the key; while its call is in flight, the
			// agent's Do is told queued and waits.
			resp, err := worker.Start(ctx, q.Key)
			if err != nil || resp.Decision != ledger.DecisionProceed {
				t.Fatalf("Start = %+v, %v", resp, err)
			}
			done := make(chan result, 1)
			go func() {
				out, err := agent.Do(ctx, outboxClaim(), countingCall(&calls, "pi_x"))
				done <- result{out, err}
			}()
			time.Sleep(100 * time.Millisecond) // let Do claim first; a late claim would replay, and fail the test
			if _, err := worker.ReportOutcome(ctx, q.Key, client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_w", Attempt: 1}); err != nil {
				t.Fatalf("report: %v", err)
			}
			r := <-done
			if r.err != nil || !r.out.Queued || r.out.Called || calls.Load() != 0 || r.out.ReceiptID() != "pi_w" || r.out.Decision != ledger.DecisionReplay {
				t.Fatalf("Do = %+v, %v; want the worker's receipt without a call", r.out, r.err)
			}
		})
	}
}

// staleClaims answers every agent claim after the first with the first's
// answer (queued), as a replica that never sees the row close would.
type staleClaims struct {
	next   http.RoundTripper
	mu     sync.Mutex
	first  []byte
	claims int
}

func (s *staleClaims) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/claims" {
		return s.next.RoundTrip(r)
	}
	s.mu.Lock()
	s.claims++
	first := s.first
	s.mu.Unlock()
	if first != nil {
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		return &http.Response{StatusCode: http.StatusAccepted, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(bytes.NewReader(first)), Request: r}, nil
	}
	resp, err := s.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.first = body
	s.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

func (s *staleClaims) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims
}

// TestDoWaitQueuedLaggingReplica: WithWaitQueued, the row read shows it
// closed but every claim still answers queued (a lagging replica): Do
// claims again once per poll interval, not in a tight loop, and returns
// the *QueuedError when ctx ends.
func TestDoWaitQueuedLaggingReplica(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	registerCharge(t, e.client(t), ledger.AutonomyOutbox)
	stale := &staleClaims{next: http.DefaultTransport}
	agent := e.client(t, client.WithWaitQueued(), client.WithHTTPClient(&http.Client{Transport: stale}))
	worker := e.client(t)
	ctx := context.Background()
	resp, err := agent.Claim(ctx, outboxClaim()) // the row, and the answer every later claim gets
	if err != nil || resp.Decision != ledger.DecisionQueued {
		t.Fatalf("claim = %+v, %v", resp, err)
	}
	if _, err := worker.Start(ctx, resp.Row.Key); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := worker.ReportOutcome(ctx, resp.Row.Key, client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_w", Attempt: 1}); err != nil {
		t.Fatalf("report: %v", err)
	}

	const wait = 400 * time.Millisecond // 20 poll intervals of 20 ms
	short, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	out, err := agent.Do(short, outboxClaim(), nil)
	var q *client.QueuedError
	if !errors.As(err, &q) || !errors.Is(err, context.DeadlineExceeded) || !out.Queued {
		t.Fatalf("Do = %+v, %v; want a *QueuedError when ctx ends", out, err)
	}
	if n := stale.count() - 1; n > 2*int(wait/(20*time.Millisecond))+2 {
		t.Fatalf("%d claims in %v at a 20 ms poll interval: the wait spins", n, wait)
	}
}
