package natsserver

import (
	"context"
	"testing"
	"time"
)

// TestDefaultOptionsSync: the service's server syncs JetStream every
// DefaultSyncInterval, not on every write, which the relay's SyncedAfter
// (cmd/reconciler) is measured against; doc.go's durability argument rests
// on it.
func TestDefaultOptionsSync(t *testing.T) {
	opts := DefaultOptions(t.TempDir(), nil)
	opts.Listen = "127.0.0.1:-1"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() { _ = s.Shutdown(ctx) }()
	cfg := s.ns.JetStreamConfig()
	if cfg == nil {
		t.Fatal("JetStream is not enabled")
	}
	if cfg.SyncAlways || cfg.SyncInterval != DefaultSyncInterval {
		t.Fatalf("sync_always %v, sync_interval %s; want false and %s", cfg.SyncAlways, cfg.SyncInterval, DefaultSyncInterval)
	}
}
