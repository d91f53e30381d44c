package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// vendorCalls counts the worker's calls per key and checks each carries
// the key and local id the ledger gave.
type vendorCalls struct {
	mu    sync.Mutex
	byKey map[string]int
	bad   []string
}

func (v *vendorCalls) handler(block <-chan struct{}) client.WorkHandler {
	return func(ctx context.Context, item client.WorkItem, key, localID string) (client.Result, error) {
		k, ok := client.KeyFrom(ctx)
		v.mu.Lock()
		if v.byKey == nil {
			v.byKey = map[string]int{}
		}
		v.byKey[key]++
		if !ok || k.Key != key || key != item.Key || localID != item.MetadataLocalID || item.Request == nil {
			v.bad = append(v.bad, fmt.Sprintf("call of %s: ctx %+v, local id %s, item %+v", key, k, localID, item))
		}
		v.mu.Unlock()
		if block != nil {
			<-block // a hung vendor call; ctx is ignored, as a dead process would
		}
		return client.Result{HTTPStatus: 200, ReceiptID: "pi_" + key[:8]}, nil
	}
}

func (v *vendorCalls) total() (n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.byKey {
		n += c
	}
	return n
}

func (v *vendorCalls) check(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, b := range v.bad {
		t.Error(b)
	}
	for k, n := range v.byKey {
		if n != 1 {
			t.Errorf("key %s called %d times, want once", k, n)
		}
	}
}

// runWorker runs a Worker of acme until the test ends (or stop is called).
func runWorker(t *testing.T, c *client.Client, js jetstream.JetStream, h client.WorkHandler, opts ...client.WorkerOption) (stop func()) {
	t.Helper()
	w, err := client.NewWorker(c, js, "acme", map[string]client.WorkHandler{"stripe.payment_intents.create": h},
		append([]client.WorkerOption{client.WithAckWait(time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Worker.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func workItems(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), events.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestWorkerExecutesOnce: three concurrent agent retries of an outbox tool
// (each Do WithWaitQueued) queue one work item; two workers share the
// tenant's consumer; the vendor is called once, and every retry gets its
// receipt. More intents spread over both workers, each called once.
func TestWorkerExecutesOnce(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	b := startBus(t, e)
	admin := e.client(t)
	registerCharge(t, admin, ledger.AutonomyOutbox)
	calls := &vendorCalls{}
	_, js1 := b.connect(t)
	_, js2 := b.connect(t)
	runWorker(t, e.client(t), js1, calls.handler(nil))
	runWorker(t, e.client(t), js2, calls.handler(nil), client.WithConcurrency(2))

	agent := e.client(t, client.WithNATS(b.rjs), client.WithWaitQueued())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]client.Outcome, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			claim := outboxClaim()
			claim.ToolCallID = fmt.Sprintf("call_%d", i)
			outs[i], errs[i] = agent.Do(ctx, claim, func(context.Context, string, string) (client.Result, error) {
				return client.Result{}, errors.New("the agent called an outbox tool")
			})
		})
	}
	wg.Wait()
	for i := range 3 {
		if errs[i] != nil || outs[i].Called || outs[i].Row.Status != ledger.StatusSucceeded || outs[i].ReceiptID() == "" {
			t.Fatalf("retry %d: %+v, %v; want the worker's receipt", i, outs[i], errs[i])
		}
		if outs[i].Key != outs[0].Key || outs[i].ReceiptID() != outs[0].ReceiptID() {
			t.Fatalf("retries got keys %s/%s", outs[i].Key, outs[0].Key)
		}
	}
	if n := calls.total(); n != 1 {
		t.Fatalf("the vendor was called %d times, want once", n)
	}

	// More intents: each called once, whichever worker takes it.
	queue := e.client(t)
	for i := range 6 {
		claim := outboxClaim()
		claim.Intent = map[string]any{"amount": 2000 + i, "currency": "usd"}
		if _, err := queue.Do(ctx, claim, nil); !errors.Is(err, client.ErrQueued) {
			t.Fatalf("Do %d: %v, want queued", i, err)
		}
	}
	testkit.EventuallyWithin(t, 15*time.Second, "every item called and acked", func() bool {
		return calls.total() == 7 && workItems(t, b.js) == 0
	})
	calls.check(t)
	page, err := queue.List(ctx, client.ListQuery{Status: ledger.StatusSucceeded})
	if err != nil || len(page.Rows) != 7 {
		t.Fatalf("succeeded rows: %d, %v; want 7", len(page.Rows), err)
	}
}

// TestWorkerCrashNoDuplicate: a worker dies mid-call (its connection
// closes, its item unacked, its call hung). JetStream hands the item to
// the other worker after the ack wait, whose start finds the lease: it
// acks without calling. The row stays pending under the dead worker's
// lease, for the resolver as any open row; no second call, no new key.
func TestWorkerCrashNoDuplicate(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	b := startBus(t, e)
	registerCharge(t, e.client(t), ledger.AutonomyOutbox)
	calls := &vendorCalls{}
	hung := make(chan struct{})
	defer close(hung)
	ncDead, jsDead := b.connect(t)
	stopDead := runWorker(t, e.client(t), jsDead, calls.handler(hung))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.client(t).Do(ctx, outboxClaim(), nil)
	var q *client.QueuedError
	if !errors.As(err, &q) {
		t.Fatalf("Do: %v, want queued", err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the first worker's call", func() bool { return calls.total() == 1 })
	ncDead.Close() // the process dies: no ack, no progress, ever
	go stopDead()  // its Run waits for the hung call; the test does not

	_, jsLive := b.connect(t)
	runWorker(t, e.client(t), jsLive, calls.handler(nil))
	testkit.EventuallyWithin(t, 15*time.Second, "the redelivered item acked by the live worker", func() bool {
		return workItems(t, b.js) == 0
	})
	time.Sleep(300 * time.Millisecond) // a second call, if any, would land now
	if n := calls.total(); n != 1 {
		t.Fatalf("the vendor was called %d times, want once", n)
	}
	row := e.row(t, q.Key)
	if row.Status != ledger.StatusPending || row.Attempt != 1 || row.PendingUntil.IsZero() {
		t.Fatalf("row %s attempt %d lease %v; want pending at attempt 1 under the dead worker's lease", row.Status, row.Attempt, row.PendingUntil)
	}
	rows, err := e.store.List(ctx, ledger.ListQuery{Tenant: "acme"})
	if err != nil || len(rows.Rows) != 1 {
		t.Fatalf("rows: %d, %v; want the one row (no new key)", len(rows.Rows), err)
	}
}

func TestNewWorkerRefuses(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	h := map[string]client.WorkHandler{"t": func(context.Context, client.WorkItem, string, string) (client.Result, error) {
		return client.Result{}, nil
	}}
	var js jetstream.JetStream = struct{ jetstream.JetStream }{} // never used: NewWorker refuses first
	for name, tc := range map[string]struct {
		tenant string
		h      map[string]client.WorkHandler
		opts   []client.WorkerOption
	}{
		"no handlers":       {tenant: "acme"},
		"a bad tenant":      {tenant: "a.b", h: h},
		"no concurrency":    {tenant: "acme", h: h, opts: []client.WorkerOption{client.WithConcurrency(0)}},
		"a tiny ack wait":   {tenant: "acme", h: h, opts: []client.WorkerOption{client.WithAckWait(time.Millisecond)}},
		"a bad work prefix": {tenant: "acme", h: h, opts: []client.WorkerOption{client.WithWorkStream("W", "a..b")}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := client.NewWorker(c, js, tc.tenant, tc.h, tc.opts...); err == nil {
				t.Fatal("NewWorker accepted it")
			}
		})
	}
}
