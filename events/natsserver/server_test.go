package natsserver_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/nats-io/nats.go"
)

func TestStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenAddr := taken.Addr().String()

	cases := []struct {
		name    string
		opts    natsserver.Options
		wantErr string // exact error; empty means success
	}{
		{name: "random port -1", opts: natsserver.Options{Listen: "127.0.0.1:-1"}},
		{name: "port 0 means random, not 4222", opts: natsserver.Options{Listen: "127.0.0.1:0", SyncAlways: true}},
		{name: "taken port is a clear error", opts: natsserver.Options{Listen: takenAddr},
			wantErr: "nats listen " + takenAddr + ": address already in use"},
		{name: "bad port", opts: natsserver.Options{Listen: "127.0.0.1:http"}, wantErr: `nats listen "127.0.0.1:http": bad port`},
		{name: "no store dir", opts: natsserver.Options{Listen: "127.0.0.1:-1"}, wantErr: "nats: store dir is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "no store dir" {
				tc.opts.StoreDir = t.TempDir()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			s, err := natsserver.Start(ctx, tc.opts)
			if tc.wantErr != "" {
				if err == nil {
					natstest.Shutdown(t, s)
					t.Fatalf("Start: got nil error, want %q", tc.wantErr)
				}
				if got := err.Error(); got != tc.wantErr {
					t.Fatalf("Start error: got %q, want %q", got, tc.wantErr)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("Start took %s to fail; want a fast failure", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer natstest.Shutdown(t, s)
			url := s.ClientURL()
			if !strings.HasPrefix(url, "nats://127.0.0.1:") || natstest.Port(t, url) == 4222 || natstest.Port(t, url) <= 0 {
				t.Fatalf("ClientURL: got %q, want a random loopback port", url)
			}
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer nc.Close()
			js := natstest.Connect(t, url)
			st := natstest.EnsureStream(t, js)
			if got := natstest.StreamCount(t, st); got != 0 {
				t.Fatalf("new stream: got %d msgs, want 0", got)
			}
		})
	}
}

func TestShutdownIsIdempotent(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	natstest.Shutdown(t, s)
	natstest.Shutdown(t, s) // the cleanup calls it a third time
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Shutdown")
	}
}
