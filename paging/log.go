package paging

import (
	"context"
	"log/slog"
)

// Log "pages" by writing to the log: the default of a node with no pager
// configured (docs/architecture.md §8). It never fails.
type Log struct {
	logger *slog.Logger
}

// NewLog returns a Log pager writing to logger (nil: slog.Default()).
func NewLog(logger *slog.Logger) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	return &Log{logger: logger}
}

// Trigger logs the page at level Error, so it stands out.
func (l *Log) Trigger(ctx context.Context, p Page) error {
	p, err := p.normalize()
	if err != nil {
		return err
	}
	attrs := []any{"dedup_key", p.DedupKey, "severity", string(p.Severity), "source", p.Source, "summary", p.Summary}
	if len(p.CustomDetails) > 0 {
		attrs = append(attrs, "details", p.CustomDetails)
	}
	l.logger.ErrorContext(ctx, "page: a human is needed", attrs...)
	return nil
}

// Resolve logs that the page is resolved.
func (l *Log) Resolve(ctx context.Context, dedupKey string) error {
	if err := checkKey(dedupKey); err != nil {
		return err
	}
	l.logger.InfoContext(ctx, "page resolved", "dedup_key", dedupKey)
	return nil
}
