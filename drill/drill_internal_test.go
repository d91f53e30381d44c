package drill

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
)

// A drill whose set-up fails must report FAIL, not a PASS with no checks.
func TestCheckerAbortFails(t *testing.T) {
	var c checker
	r := c.abort(Result{Name: "x", Expected: 1}, errors.New("no client"))
	if r.Pass || r.Detail != "set-up: no client" {
		t.Fatalf("abort = pass %v detail %q, want a failure naming the set-up error", r.Pass, r.Detail)
	}
}

// The drills' runtime waits on NATS with a tenant credential, not as an
// anonymous client: it reads its tenant's events, and publishing is not
// among its rights.
func TestEnvRuntimeIsATenant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := newEnv(ctx, Options{TempDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	ev := ledger.Event{Key: "k1", Tenant: tenant, RunID: "run-1", Tool: toolCharge, ToolCallID: "call_1",
		Status: string(ledger.StatusSucceeded), Source: ledger.SourceRuntime, At: time.Now().UTC()}
	subj, err := events.Subject("", ev)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(ev)
	// The tenant's account sees its events live (events.AccountLayout):
	// the service publishes once Await listens.
	published := make(chan error, 1)
	got, err := events.Await(ctx, e.rjs, tenant, "run-1", "k1", events.WithOpened(func() {
		_, err := e.js.Publish(ctx, subj, body)
		published <- err
	}))
	select {
	case perr := <-published:
		if perr != nil {
			t.Fatalf("service publish: %v", perr)
		}
	default: // Await never listened: err says why
	}
	if err != nil || got.Key != "k1" {
		t.Fatalf("runtime await: %+v, %v", got, err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if _, err := e.rjs.Publish(pctx, subj, body); err == nil {
		t.Fatal("the runtime's credential may publish events")
	}
}

func TestDeliveryTested(t *testing.T) {
	names := map[string]bool{}
	for _, d := range drills {
		names[d.name] = true
	}
	for name := range gateDrills {
		if !names[name] {
			t.Errorf("gate drill %q is not a drill", name)
		}
	}
	gate := Result{Name: "denied-never-calls", Pass: true}
	delivery := Result{Name: "slow-success-timeout", Pass: true}
	for _, tt := range []struct {
		name    string
		results []Result
		want    bool
	}{
		{"a delivery drill passed", []Result{gate, delivery}, true},
		{"only the gate's drills", []Result{gate, {Name: "open-checklist-stays-gated", Pass: true}}, false},
		{"the delivery drill skipped", []Result{gate, {Name: "slow-success-timeout", Skipped: true}}, false},
		{"the delivery drill failed", []Result{{Name: "slow-success-timeout"}}, false},
		{"nothing ran", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DeliveryTested(tt.results); got != tt.want {
				t.Fatalf("DeliveryTested = %v, want %v", got, tt.want)
			}
		})
	}
}
