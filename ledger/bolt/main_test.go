package bolt

import (
	"os"
	"testing"
)

// TestMain removes the benchmark fixtures, which outlive a single benchmark
// (the 1M-row file is built once per run, not once per b.N round).
func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range benchDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}
