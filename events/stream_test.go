package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEnsureStream(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	cases := []struct {
		name    string
		cfg     events.StreamConfig
		wantErr string
		want    jetstream.StreamConfig
	}{
		{name: "defaults create RECON", cfg: events.StreamConfig{},
			want: jetstream.StreamConfig{Name: "RECON", Subjects: []string{"recon.>"}, Duplicates: time.Hour}},
		{name: "second call is a no-op", cfg: events.StreamConfig{Name: "RECON", SubjectPrefix: "recon"},
			want: jetstream.StreamConfig{Name: "RECON", Subjects: []string{"recon.>"}, Duplicates: time.Hour}},
		{name: "update max age", cfg: events.StreamConfig{MaxAge: 48 * time.Hour},
			want: jetstream.StreamConfig{Name: "RECON", Subjects: []string{"recon.>"}, Duplicates: time.Hour, MaxAge: 48 * time.Hour}},
		{name: "max age shorter than duplicates", cfg: events.StreamConfig{MaxAge: 30 * time.Minute},
			wantErr: "max age 30m0s is shorter than the duplicates window 1h0m0s"},
		{name: "bad prefix", cfg: events.StreamConfig{Name: "X", SubjectPrefix: "recon.*"}, wantErr: "subject prefix"},
		{name: "replicas out of range", cfg: events.StreamConfig{Replicas: 6}, wantErr: "replicas 6, want 1 to 5"},
		{name: "replicas 1 explicitly", cfg: events.StreamConfig{Replicas: 1, MaxAge: 48 * time.Hour},
			want: jetstream.StreamConfig{Name: "RECON", Subjects: []string{"recon.>"}, Duplicates: time.Hour, MaxAge: 48 * time.Hour}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := events.EnsureStream(ctx, js, tc.cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("EnsureStream: got %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsureStream: %v", err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := info.Config
			if got.Name != tc.want.Name || strings.Join(got.Subjects, ",") != strings.Join(tc.want.Subjects, ",") ||
				got.Storage != jetstream.FileStorage || got.Duplicates != tc.want.Duplicates || got.MaxAge != tc.want.MaxAge ||
				got.Replicas != 1 {
				t.Fatalf("stream config: got name=%s subjects=%v storage=%v dup=%s maxage=%s, want %+v",
					got.Name, got.Subjects, got.Storage, got.Duplicates, got.MaxAge, tc.want)
			}
		})
	}
}

func TestSubject(t *testing.T) {
	cases := []struct {
		name   string
		prefix string
		mutate func(*ledger.Event)
		want   string
	}{
		{name: "succeeded", prefix: "recon", want: "recon.acme.run-1.succeeded"},
		{name: "default prefix", prefix: "", want: "recon.acme.run-1.succeeded"},
		{name: "escalated", prefix: "recon", mutate: func(e *ledger.Event) { e.Status = ledger.EventEscalated }, want: "recon.acme.run-1.escalated"},
		{name: "unknown", prefix: "x.y", mutate: func(e *ledger.Event) { e.Status = "unknown" }, want: "x.y.acme.run-1.unknown"},
		{name: "pending is not published", prefix: "recon", mutate: func(e *ledger.Event) { e.Status = "pending" }},
		{name: "approval_requested", prefix: "recon", mutate: func(e *ledger.Event) { e.Status = ledger.EventApprovalRequested }, want: "recon.acme.run-1.approval_requested"},
		{name: "approved", prefix: "recon", mutate: func(e *ledger.Event) { e.Status = ledger.EventApproved }, want: "recon.acme.run-1.approved"},
		{name: "denied", prefix: "recon", mutate: func(e *ledger.Event) { e.Status = ledger.EventDenied }, want: "recon.acme.run-1.denied"},
		{name: "approval_expired", prefix: "recon", mutate: func(e *ledger.Event) { e.Status = ledger.EventApprovalExpired }, want: "recon.acme.run-1.approval_expired"},
		{name: "dot in run_id", prefix: "recon", mutate: func(e *ledger.Event) { e.RunID = "a.b" }},
		{name: "wildcard tenant", prefix: "recon", mutate: func(e *ledger.Event) { e.Tenant = "*" }},
		{name: "empty key", prefix: "recon", mutate: func(e *ledger.Event) { e.Key = "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := natstest.Event(1, "succeeded")
			if tc.mutate != nil {
				tc.mutate(&ev)
			}
			got, err := events.Subject(tc.prefix, ev)
			if tc.want == "" {
				if !errors.Is(err, events.ErrInvalidEvent) {
					t.Fatalf("Subject: got %q, %v; want ErrInvalidEvent", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Subject: got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestEnsureStreamKeepsOperatorSettings: on an existing stream, EnsureStream
// sets what the relay relies on (subjects, the duplicates window, and max
// age or replicas only when asked) and keeps the limits an operator set.
func TestEnsureStreamKeepsOperatorSettings(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        events.StreamConfig
		wantMaxAge time.Duration
	}{
		{"defaults keep the operator's max age", events.StreamConfig{}, 7 * 24 * time.Hour},
		{"a configured max age wins", events.StreamConfig{MaxAge: 48 * time.Hour}, 48 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Start(t, t.TempDir(), "", false)
			js := natstest.Connect(t, s.ClientURL())
			ctx := t.Context()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
				Name: events.DefaultStream, Subjects: []string{"recon.>"}, Storage: jetstream.FileStorage,
				MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30, MaxMsgs: 100000, Duplicates: 2 * time.Minute,
			}); err != nil {
				t.Fatal(err)
			}
			st, err := events.EnsureStream(ctx, js, tc.cfg)
			if err != nil {
				t.Fatalf("EnsureStream: %v", err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c := info.Config
			if c.MaxBytes != 1<<30 || c.MaxMsgs != 100000 || c.MaxAge != tc.wantMaxAge {
				t.Errorf("limits: max bytes %d, max msgs %d, max age %s; want 1 GiB, 100000, %s", c.MaxBytes, c.MaxMsgs, c.MaxAge, tc.wantMaxAge)
			}
			if c.Duplicates != events.DefaultDuplicates || len(c.Subjects) != 1 || c.Subjects[0] != "recon.>" {
				t.Errorf("duplicates %s subjects %v, want %s [recon.>]", c.Duplicates, c.Subjects, events.DefaultDuplicates)
			}
		})
	}
	t.Run("a stream that cannot be looked up is an error", func(t *testing.T) {
		s := natstest.Start(t, t.TempDir(), "", false)
		js := natstest.Connect(t, s.ClientURL())
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err == nil {
			t.Fatal("EnsureStream with a dead context: no error")
		}
	})
}
