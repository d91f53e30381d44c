package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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
// hands the item back without calling, again and again while the lease
// lives. Once the lease is over, its start answers retry_same_key and it
// calls with the same key (the vendor replays): no new key, no second row.
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
	runWorker(t, e.client(t), jsLive, calls.handler(nil), client.WithMaxBackoff(time.Second))
	cons, err := b.js.Consumer(ctx, events.DefaultWorkStream, events.WorkConsumer("acme"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 15*time.Second, "the item handed back by the live worker", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Consumer >= 3 // the dead worker's, then two of the live one's
	})
	if n := calls.total(); n != 1 || workItems(t, b.js) != 1 {
		t.Fatalf("under the dead worker's lease: %d calls, %d items; want one call, the item kept", n, workItems(t, b.js))
	}
	if row := e.row(t, q.Key); row.Status != ledger.StatusPending || row.Attempt != 1 {
		t.Fatalf("row %s attempt %d; want pending at attempt 1 under the dead worker's lease", row.Status, row.Attempt)
	}

	e.clock.Advance(16 * time.Minute) // the lease (15 min) is over
	testkit.EventuallyWithin(t, 15*time.Second, "the retry with the same key", func() bool {
		return e.row(t, q.Key).Status == ledger.StatusSucceeded && workItems(t, b.js) == 0
	})
	calls.mu.Lock()
	byKey := maps.Clone(calls.byKey)
	calls.mu.Unlock()
	if len(byKey) != 1 || byKey[q.Key] != 2 {
		t.Fatalf("calls by key %v; want two with %s", byKey, q.Key)
	}
	if row := e.row(t, q.Key); row.Attempt != 2 {
		t.Fatalf("row at attempt %d, want 2", row.Attempt)
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

// loseFirstStart delivers the first POST …/start to the server and then
// drops its answer, as a connection reset after the server committed would.
type loseFirstStart struct {
	lost atomic.Bool
}

func (l *loseFirstStart) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && strings.HasSuffix(r.URL.Path, "/start") && l.lost.CompareAndSwap(false, true) {
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (answer lost)")
	}
	return resp, err
}

// TestWorkerLostStartAnswer: the worker's start proceeds on the server
// (attempt 1, its lease) but the answer is lost; the resend answers wait
// under that lease. The Worker hands the item back until the lease ends,
// never calling under it; then the start answers retry_same_key and the
// call is made once, with the key — or, for a tool frozen meanwhile, the
// start still waits and the row is the resolver's: acked, not called.
func TestWorkerLostStartAnswer(t *testing.T) {
	for name, frozen := range map[string]bool{"called after the lease": false, "the resolver's after the lease": true} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withLease(2*time.Second), withAutonomy(0))
			b := startBus(t, e)
			registerCharge(t, e.client(t), ledger.AutonomyOutbox)
			calls := &vendorCalls{}
			_, js := b.connect(t)
			lossy := &loseFirstStart{}
			wc := e.client(t, client.WithHTTPClient(&http.Client{Transport: lossy}))
			runWorker(t, wc, js, calls.handler(nil))

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := e.client(t).Do(ctx, outboxClaim(), nil)
			var q *client.QueuedError
			if !errors.As(err, &q) {
				t.Fatalf("Do: %v, want queued", err)
			}
			testkit.EventuallyWithin(t, 10*time.Second, "the lost start", func() bool { return lossy.lost.Load() })
			if frozen {
				e.freeze("stripe.payment_intents.create")
			}
			if row := e.row(t, q.Key); calls.total() != 0 || row.Attempt != 1 {
				t.Fatalf("under the lease: %d calls, row at attempt %d; want none, attempt 1", calls.total(), row.Attempt)
			}
			testkit.EventuallyWithin(t, 15*time.Second, "the item acked", func() bool { return workItems(t, b.js) == 0 })
			row := e.row(t, q.Key)
			if frozen {
				if calls.total() != 0 || row.Status != ledger.StatusPending || row.Attempt != 1 {
					t.Fatalf("%d calls, row %s at attempt %d; want no call, pending at attempt 1", calls.total(), row.Status, row.Attempt)
				}
				return
			}
			calls.check(t)
			if calls.total() != 1 || row.Status != ledger.StatusSucceeded || row.Attempt != 2 {
				t.Fatalf("%d calls, row %s at attempt %d; want one call, succeeded at attempt 2", calls.total(), row.Status, row.Attempt)
			}
		})
	}
}

// TestWorkerRetriesPending: the vendor answers 429, or 409 without a
// receipt (retry later: the row stays pending, its lease ended). The
// Worker hands the item back; the next start answers retry_same_key and
// the call is made again with the same key, and succeeds.
func TestWorkerRetriesPending(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusConflict} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			e := newEnv(t, withAutonomy(0))
			b := startBus(t, e)
			registerCharge(t, e.client(t), ledger.AutonomyOutbox)
			var mu sync.Mutex
			var keys []string
			_, js := b.connect(t)
			runWorker(t, e.client(t), js, func(_ context.Context, _ client.WorkItem, key, _ string) (client.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				keys = append(keys, key)
				if len(keys) == 1 {
					return client.Result{HTTPStatus: status}, fmt.Errorf("vendor answered %d", status)
				}
				return client.Result{HTTPStatus: 200, ReceiptID: "pi_1"}, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := e.client(t).Do(ctx, outboxClaim(), nil)
			var q *client.QueuedError
			if !errors.As(err, &q) {
				t.Fatalf("Do: %v", err)
			}
			testkit.EventuallyWithin(t, 15*time.Second, "the retry acked", func() bool {
				return e.row(t, q.Key).Status == ledger.StatusSucceeded && workItems(t, b.js) == 0
			})
			mu.Lock()
			defer mu.Unlock()
			if len(keys) != 2 || keys[0] != q.Key || keys[1] != q.Key {
				t.Fatalf("calls with keys %v; want two with %s", keys, q.Key)
			}
		})
	}
}

// TestWorkerRemakesConsumer: the shared durable is deleted while the
// Worker runs (an operator, a recreated work stream); once the service
// makes it again (events.KeepWorkConsumers: in the account layout a
// tenant's runtime cannot), the Worker finds it and calls the next item.
func TestWorkerRemakesConsumer(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	b := startBus(t, e)
	registerCharge(t, e.client(t), ledger.AutonomyOutbox)
	calls := &vendorCalls{}
	_, js := b.connect(t)
	runWorker(t, e.client(t), js, calls.handler(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testkit.EventuallyWithin(t, 5*time.Second, "the consumer", func() bool {
		_, err := b.js.Consumer(ctx, events.DefaultWorkStream, events.WorkConsumer("acme"))
		return err == nil
	})
	if err := b.js.DeleteConsumer(ctx, events.DefaultWorkStream, events.WorkConsumer("acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client(t).Do(ctx, outboxClaim(), nil); !errors.Is(err, client.ErrQueued) {
		t.Fatalf("Do: %v", err)
	}
	if err := events.EnsureWorkConsumers(ctx, b.js, events.WorkStreamConfig{}, time.Second, []string{"acme"}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 20*time.Second, "the item called through the new consumer", func() bool {
		return calls.total() == 1 && workItems(t, b.js) == 0
	})
	calls.check(t)
}

// TestWorkerSurvivesPanic: a handler that panics leaves its row unknown
// (for the resolver) and its item acked; the Worker goes on and calls the
// next item.
func TestWorkerSurvivesPanic(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	b := startBus(t, e)
	registerCharge(t, e.client(t), ledger.AutonomyOutbox)
	var n atomic.Int32
	_, js := b.connect(t)
	runWorker(t, e.client(t), js, func(_ context.Context, item client.WorkItem, key, _ string) (client.Result, error) {
		if n.Add(1) == 1 {
			panic("boom")
		}
		return client.Result{HTTPStatus: 200, ReceiptID: "pi_" + key[:8]}, nil
	}, client.WithConcurrency(1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	queue := e.client(t)
	_, err := queue.Do(ctx, outboxClaim(), nil)
	var first *client.QueuedError
	if !errors.As(err, &first) {
		t.Fatalf("Do: %v", err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the panicking item acked", func() bool {
		return n.Load() == 1 && workItems(t, b.js) == 0
	})
	if row := e.row(t, first.Key); row.Status != ledger.StatusUnknown {
		t.Fatalf("row of the panicking call: %s, want unknown", row.Status)
	}
	claim := outboxClaim()
	claim.Intent = map[string]any{"amount": 2000, "currency": "usd"}
	var second *client.QueuedError
	if _, err := queue.Do(ctx, claim, nil); !errors.As(err, &second) {
		t.Fatalf("Do: %v", err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the next item called", func() bool {
		return e.row(t, second.Key).Status == ledger.StatusSucceeded && workItems(t, b.js) == 0
	})
}
