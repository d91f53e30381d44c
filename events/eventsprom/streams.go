package eventsprom

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StreamFill is one stream's size and limit, as the collector reports it.
type StreamFill struct {
	Stream   string
	Bytes    float64
	MaxBytes float64 // 0: unbounded
}

// streamCollector reads the streams' fill at each scrape.
type streamCollector struct {
	read            func(context.Context) ([]StreamFill, error)
	bytes, maxBytes *prometheus.Desc
}

// scrapeTimeout bounds one read of the streams, so a NATS outage does not
// hold a scrape.
const scrapeTimeout = 2 * time.Second

// RegisterStreamFill registers reconciler_stream_bytes{stream} and
// reconciler_stream_max_bytes{stream} (0: unbounded) on reg, read through
// read at each scrape (events.ReadStreamUsage); a read that fails reports
// nothing for that scrape.
func RegisterStreamFill(reg prometheus.Registerer, read func(context.Context) ([]StreamFill, error)) error {
	if reg == nil || read == nil {
		return errors.New("stream metrics: a registerer and a reader are required")
	}
	return reg.Register(&streamCollector{
		read:     read,
		bytes:    prometheus.NewDesc("reconciler_stream_bytes", "Bytes a JetStream stream of the service holds.", []string{"stream"}, nil),
		maxBytes: prometheus.NewDesc("reconciler_stream_max_bytes", "A JetStream stream's max_bytes (0: unbounded); at it new events wait in the outbox.", []string{"stream"}, nil),
	})
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.bytes
	ch <- c.maxBytes
}

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	fills, err := c.read(ctx)
	if err != nil {
		return
	}
	for _, f := range fills {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, f.Bytes, f.Stream)
		ch <- prometheus.MustNewConstMetric(c.maxBytes, prometheus.GaugeValue, max(f.MaxBytes, 0), f.Stream)
	}
}
