package replicas

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/agentledger/reconciler/internal/natstest"
)

func TestMain(m *testing.M) {
	// The NATS cluster of TestNATSNodeLost runs its nodes as this binary.
	natstest.RunNodeIfAsked()
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// sharedBinary builds ./cmd/reconciler once for the package's tests (each
// build costs seconds of a busy machine) and returns its path.
func sharedBinary(tb testing.TB) string {
	tb.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "reconciler-e2e-bin-")
		if binErr != nil {
			return
		}
		binPath, binErr = build(binDir)
	})
	if binErr != nil {
		tb.Fatal(fmt.Errorf("build ./cmd/reconciler: %w", binErr))
	}
	return binPath
}
