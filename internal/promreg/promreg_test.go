package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/internal/promreg"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "reconciler_test_total", Help: "h"}
	first, err := promreg.Register(reg, prometheus.NewCounterVec(opts, []string{"kind"}))
	if err != nil {
		t.Fatal(err)
	}
	second, err := promreg.Register(reg, prometheus.NewCounterVec(opts, []string{"kind"}))
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatal("a second registration of the same series did not reuse the first collector")
	}
	// Same name, other labels: a real conflict, not a reuse.
	if _, err := promreg.Register(reg, prometheus.NewCounterVec(opts, []string{"other"})); err == nil {
		t.Fatal("a conflicting registration succeeded")
	}
}
