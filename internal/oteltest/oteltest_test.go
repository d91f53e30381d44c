package oteltest

import (
	"context"
	"testing"
)

// A span ends up exported: Shutdown flushes it to the receiver without an
// error, which it would return had the export failed.
func TestOTLPProviderExports(t *testing.T) {
	tp := OTLPProvider(t)
	_, span := tp.Tracer("oteltest").Start(context.Background(), "span")
	span.End()
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatalf("flush to the receiver: %v", err)
	}
}
