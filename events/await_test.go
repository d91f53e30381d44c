package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func publish(t *testing.T, js jetstream.JetStream, ev ledger.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	subj, err := events.Subject("recon", ev)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: body}, jetstream.WithMsgID(ev.MsgID())); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func consumers(t testing.TB, st jetstream.Stream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

type awaitResult struct {
	ev  ledger.Event
	err error
}

func TestAwait(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)

	// withKey returns event i of run-1 re-keyed, so each case has its own key.
	withKey := func(i int, key, status string) ledger.Event {
		ev := natstest.Event(i, status)
		ev.Key = key
		return ev
	}

	cases := []struct {
		name    string
		key     string
		before  []ledger.Event // published before Await is called
		after   []ledger.Event // published once Await's consumer exists
		opts    []events.AwaitOption
		timeout time.Duration
		want    ledger.Event
		wantErr error
	}{
		{
			name:   "published before the call",
			key:    "k-before",
			before: []ledger.Event{withKey(1, "k-other", "succeeded"), withKey(2, "k-before", "succeeded")},
			want:   withKey(2, "k-before", "succeeded"),
		},
		{
			name:  "published after the call, unknown ignored",
			key:   "k-after",
			after: []ledger.Event{withKey(3, "k-after", "unknown"), withKey(4, "k-other2", "failed_poison"), withKey(5, "k-after", ledger.EventEscalated)},
			want:  withKey(5, "k-after", ledger.EventEscalated),
		},
		{
			name: "approval_requested and approved are not resolutions; denied is",
			key:  "k-gated",
			after: []ledger.Event{withKey(9, "k-gated", ledger.EventApprovalRequested), withKey(10, "k-gated", ledger.EventApproved),
				withKey(11, "k-gated", ledger.EventDenied)},
			want: withKey(11, "k-gated", ledger.EventDenied),
		},
		{
			name:   "approval_expired is a resolution",
			key:    "k-expired",
			before: []ledger.Event{withKey(12, "k-expired", ledger.EventApprovalRequested), withKey(13, "k-expired", ledger.EventApprovalExpired)},
			want:   withKey(13, "k-expired", ledger.EventApprovalExpired),
		},
		{
			name:    "only unknown: times out with ctx",
			key:     "k-unknown",
			before:  []ledger.Event{withKey(6, "k-unknown", "unknown")},
			timeout: 300 * time.Millisecond,
			wantErr: context.DeadlineExceeded,
		},
		{
			name: "ledger settles it when no message comes",
			key:  "k-ledger",
			opts: []events.AwaitOption{
				events.WithPollInterval(10 * time.Millisecond),
				events.WithLedger(settleAfter(3, withKey(7, "k-ledger", "failed_poison"))),
			},
			want: withKey(7, "k-ledger", "failed_poison"),
		},
		{
			name: "ledger unknown is not a resolution",
			key:  "k-ledger-unknown",
			opts: []events.AwaitOption{
				events.WithPollInterval(10 * time.Millisecond),
				events.WithLedger(settleAfter(0, withKey(8, "k-ledger-unknown", "unknown"))),
			},
			timeout: 200 * time.Millisecond,
			wantErr: context.DeadlineExceeded,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, ev := range tc.before {
				publish(t, js, ev)
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			res := make(chan awaitResult, 1)
			go func() {
				ev, err := events.Await(ctx, js, "acme", "run-1", tc.key, tc.opts...)
				res <- awaitResult{ev, err}
			}()
			if len(tc.after) > 0 {
				testkit.EventuallyWithin(t, 5*time.Second, "Await's consumer", func() bool { return consumers(t, st) == 1 })
				for _, ev := range tc.after {
					publish(t, js, ev)
				}
			}
			got := <-res
			if tc.wantErr != nil {
				if !errors.Is(got.err, tc.wantErr) {
					t.Fatalf("Await: got %+v, %v; want error %v", got.ev, got.err, tc.wantErr)
				}
			} else if got.err != nil || got.ev != tc.want {
				t.Fatalf("Await: got %+v, %v; want %+v", got.ev, got.err, tc.want)
			}
			testkit.EventuallyWithin(t, 5*time.Second, "consumer deleted", func() bool { return consumers(t, st) == 0 })
		})
	}
}

// settleAfter is a ledger check that reports ev settled from its n-th call on.
func settleAfter(n int, ev ledger.Event) events.LedgerCheck {
	var calls atomic.Int32
	return func(ctx context.Context) (ledger.Event, bool, error) {
		if int(calls.Add(1)) <= n {
			return ledger.Event{}, false, errors.New("not yet")
		}
		return ev, true, nil
	}
}

// TestAwaitWithoutStream: when the stream cannot be read, WithLedger still
// resolves the wait; without it the failure is returned.
func TestAwaitWithoutStream(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL()) // no stream created
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	want := natstest.Event(1, "succeeded")
	got, err := events.Await(ctx, js, "acme", "run-1", want.Key,
		events.WithPollInterval(10*time.Millisecond), events.WithLedger(settleAfter(2, want)))
	if err != nil || got != want {
		t.Fatalf("Await with ledger: got %+v, %v; want %+v", got, err, want)
	}

	_, err = events.Await(ctx, js, "acme", "run-1", want.Key)
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Await without ledger: got %v, want ErrStreamNotFound", err)
	}

	if _, err := events.Await(ctx, js, "acme", "run.1", want.Key); !errors.Is(err, events.ErrInvalidEvent) {
		t.Fatalf("Await bad run_id: got %v, want ErrInvalidEvent", err)
	}
}
