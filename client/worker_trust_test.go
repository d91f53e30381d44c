package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// TestWorkerTrustsTheLedger (issue #25): items that name another tenant,
// disagree with the row they name, name no row, or are not work items at
// all are terminated without a call; the genuine item is then called with
// the row's request, once.
func TestWorkerTrustsTheLedger(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	b := startBus(t, e)
	registerCharge(t, e.client(t), ledger.AutonomyOutbox)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := e.client(t).Do(ctx, outboxClaim(), nil)
	var q *client.QueuedError
	if !errors.As(err, &q) {
		t.Fatalf("Do: %v, want queued", err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the work item", func() bool { return workItems(t, b.js) == 1 })
	st, err := b.js.Stream(ctx, events.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	subject := "recon_work.acme.stripe.payment_intents.create"
	genuine, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	// The forged items come first: the genuine one is taken out and
	// published again after them.
	if err := st.DeleteMsg(ctx, genuine.Sequence); err != nil {
		t.Fatal(err)
	}
	var ev ledger.Event
	if err := json.Unmarshal(genuine.Data, &ev); err != nil {
		t.Fatal(err)
	}
	forge := func(f func(*ledger.Event)) []byte {
		c := ev
		w := *ev.Work
		r := *ev.Work.Request
		w.Request, c.Work = &r, &w
		f(&c)
		body, _ := json.Marshal(c)
		return body
	}
	forged := map[string][]byte{
		"another tenant's":     forge(func(c *ledger.Event) { c.Tenant = "globex" }),
		"another request":      forge(func(c *ledger.Event) { c.Work.Request.Body = "amount=999999&currency=usd" }),
		"another intent":       forge(func(c *ledger.Event) { c.Work.Intent = json.RawMessage(`{"amount":999999,"currency":"usd"}`) }),
		"another tool call id": forge(func(c *ledger.Event) { c.ToolCallID = "call_forged" }),
		"another local id":     forge(func(c *ledger.Event) { c.Work.MetadataLocalID = "rl_forged" }),
		"a key with no row":    forge(func(c *ledger.Event) { c.Key = "no-such-key" }),
		"not json":             []byte("not json"),
		"empty":                nil,
		"no work":              []byte(`{"key":"` + q.Key + `","tenant":"acme"}`),
	}
	n := 0
	for name, body := range forged {
		msg := nats.NewMsg(subject)
		msg.Data = body
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("forged-%d", n))
		n++
		if _, err := b.js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	var mu sync.Mutex
	var requests []*ledger.Request
	calls := &vendorCalls{}
	h := calls.handler(nil)
	runWorker(t, e.client(t), b.rjs, func(ctx context.Context, item client.WorkItem, key, localID string) (client.Result, error) {
		mu.Lock()
		requests = append(requests, item.Request)
		mu.Unlock()
		return h(ctx, item, key, localID)
	})
	testkit.EventuallyWithin(t, 20*time.Second, "every forged item terminated", func() bool { return workItems(t, b.js) == 0 })
	if n := calls.total(); n != 0 {
		t.Fatalf("the handler was called %d times for forged items", n)
	}
	if row := e.row(t, q.Key); row.Status != ledger.StatusPending || row.Attempt != 0 {
		t.Fatalf("row %s at attempt %d after the forged items; want pending at attempt 0 (no lease taken)", row.Status, row.Attempt)
	}

	msg := nats.NewMsg(subject)
	msg.Data = genuine.Data
	msg.Header.Set(jetstream.MsgIDHeader, "genuine-again")
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 20*time.Second, "the genuine item called", func() bool {
		return e.row(t, q.Key).Status == ledger.StatusSucceeded && workItems(t, b.js) == 0
	})
	calls.check(t)
	mu.Lock()
	defer mu.Unlock()
	if want := outboxClaim().Request; len(requests) != 1 || !reflect.DeepEqual(requests[0], want) {
		t.Fatalf("handler requests %+v, want one: the row's %+v", requests, want)
	}
}
