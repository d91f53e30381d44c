package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// RatioTarget is the issue's goal: real at least half of bare at 64 connections.
const RatioTarget = 0.5

// PgxRatioTarget is issue 32's goal for claims at 64 connections: the
// durable path at least 1.5 times the pgx claim service (1.0 at one
// connection).
const PgxRatioTarget = 1.5

// PgxRatioTarget1 is the goal at one connection.
const PgxRatioTarget1 = 1.0

// PostgresPgxRatioTarget is issue 31's goal for the real target on
// PostgreSQL (-store): at least 0.8 of the pgx claim service on the same
// server, at 64 connections and at one.
const PostgresPgxRatioTarget = 0.8

// PostgresWebhookRatioTarget is issue 31's goal for durable Stripe ingest
// on PostgreSQL: at least 0.3 of the verify-only route.
const PostgresWebhookRatioTarget = 0.3

// Report is what one Run measured. Durations are in milliseconds.
type Report struct {
	// Mode is ModeClaim or ModeWebhook.
	Mode       string  `json:"mode"`
	Conns      int     `json:"conns"`
	WarmupMS   float64 `json:"warmup_ms"`
	DurationMS float64 `json:"duration_ms"`
	// Rounds is how many alternating bare/real rounds DurationMS was split into.
	Rounds     int  `json:"rounds"`
	GOMAXPROCS int  `json:"gomaxprocs"`
	APILog     bool `json:"api_log"`
	// UnsafeNoSync: the real target's store skipped fdatasync (no durability).
	UnsafeNoSync bool `json:"unsafe_nosync,omitempty"`
	// Store is the real target's store: "bolt" or "postgres".
	Store string `json:"store"`
	// Targets holds bare (unless skipped), real and, when phase 2 ran, the
	// claim + outcome pairs.
	Targets []TargetResult `json:"targets"`
	// RealOverBare is real's claims/s over bare's; 0 when bare was skipped.
	RealOverBare float64 `json:"real_over_bare,omitempty"`
	// RealOverPgx is real's claims/s over the pgx claim service's; 0 when
	// it did not run.
	RealOverPgx float64 `json:"real_over_pgx,omitempty"`
	// DurableOverVerify is webhook mode's ratio: the durable route's req/s
	// over the verify-only route's; 0 when verify-only was skipped.
	DurableOverVerify float64 `json:"durable_over_verify,omitempty"`
	// Webhook is webhook mode's setup and store check; nil in claim mode.
	Webhook *WebhookResult `json:"webhook,omitempty"`
	// Relay is phase 2's event delivery; nil when phase 2 did not run.
	Relay *RelayResult `json:"relay,omitempty"`
	// Events is webhook mode's event delivery, phase by phase; nil in
	// claim mode.
	Events *EventsResult `json:"events,omitempty"`
	// Bolt is the store's group-commit figures during the real target's
	// phase 1 (webhook mode: the durable target's), warm-up included.
	Bolt BoltStats `json:"bolt"`
}

// TargetResult is one phase's load figures.
type TargetResult struct {
	Target string `json:"target"`
	Conns  int    `json:"conns"`
	// Ops completed in the measured window; an op is one request, or for
	// phase 2 one claim and its outcome (RequestsPerOp 2).
	Ops           int     `json:"ops"`
	RequestsPerOp int     `json:"requests_per_op"`
	OpsPerSec     float64 `json:"ops_per_s"`
	P50MS         float64 `json:"p50_ms"`
	P99MS         float64 `json:"p99_ms"`
	MaxMS         float64 `json:"max_ms"`
	// Errors counts failed ops over the whole phase, warm-up included.
	Errors       int64    `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	WindowMS     float64  `json:"window_ms"`
	// CPUCores is the whole process's CPU use over the phase (client and
	// servers together: 2.0 is two cores busy); RunQueue is the time its
	// threads waited for a CPU per second of the phase (other processes on
	// a shared machine). -1 when the platform cannot tell.
	CPUCores float64 `json:"cpu_cores"`
	RunQueue float64 `json:"run_queue_wait"`
	// CPUUSPerOp is the process's CPU time per op in microseconds (client
	// and server; warm-up included): the cost that bounds ops/s when the
	// CPU, not the disk, is the limit. 0 when unknown.
	CPUUSPerOp float64 `json:"cpu_us_per_op"`
}

// RelayResult is the event side of phase 2.
type RelayResult struct {
	// PairsPerSecLimit is the pacing of phase 2 (0: unlimited).
	PairsPerSecLimit float64 `json:"pairs_per_s_limit"`
	// Outcomes answered 2xx, each of which wrote one event; Delivered of them
	// arrived from the stream, Missing did not within the drain timeout.
	Outcomes  int `json:"outcomes"`
	Delivered int `json:"delivered"`
	Missing   int `json:"missing"`
	// Unmatched events arrived for an outcome whose request failed on the
	// client side; Duplicates were delivered twice (both should be 0).
	Unmatched  int `json:"unmatched"`
	Duplicates int `json:"duplicates"`
	// BeforeAck events were stored before their outcome's 2xx reached the
	// client; their lag counts as 0.
	BeforeAck int `json:"before_ack"`
	// Lag is from the outcome's 2xx to the event's delivery from the stream.
	LagP50MS float64 `json:"lag_p50_ms"`
	LagP99MS float64 `json:"lag_p99_ms"`
	LagMaxMS float64 `json:"lag_max_ms"`
	// EventsPerSec is Delivered over the time from the first 2xx to the last
	// arrival: the relay's throughput when phase 2 is unlimited.
	EventsPerSec float64 `json:"events_per_s"`
	// OutboxDepthAtLoadEnd is the backlog when phase 2 stopped sending;
	// OutboxDepthAfterDrain must be 0.
	OutboxDepthAtLoadEnd  int `json:"outbox_depth_at_load_end"`
	OutboxDepthAfterDrain int `json:"outbox_depth_after_drain"`
	// DrainMS is from the end of phase 2 to the last event's arrival.
	DrainMS float64 `json:"drain_ms"`
	// StreamMsgs is the message count of the RECON stream at the end.
	StreamMsgs uint64 `json:"stream_msgs"`
}

// BoltStats are the real store's group-commit counters.
type BoltStats struct {
	Groups    uint64  `json:"groups"`
	Ops       uint64  `json:"ops"`
	MeanGroup float64 `json:"mean_group"`
	// CommitMSPerGroup is bbolt's commit (page writes, two fdatasyncs) per
	// group; RunMSPerGroup is running the group's ops.
	CommitMSPerGroup float64 `json:"commit_ms_per_group"`
	RunMSPerGroup    float64 `json:"run_ms_per_group"`
	// CommitterBusy is the share of the phase the one committer goroutine
	// spent running and committing groups: near 1, the store's commit loop
	// (bound by fdatasync) is what limits claims/s.
	CommitterBusy float64 `json:"committer_busy"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func targetResult(name string, conns, perOp int, r phaseResult) TargetResult {
	slices.Sort(r.latencies)
	t := TargetResult{
		Target: name, Conns: conns, Ops: len(r.latencies), RequestsPerOp: perOp,
		P50MS:  ms(percentile(r.latencies, 0.50)),
		P99MS:  ms(percentile(r.latencies, 0.99)),
		MaxMS:  ms(percentile(r.latencies, 1)),
		Errors: r.errors, ErrorSamples: r.samples, WindowMS: ms(r.window),
		CPUCores: -1, RunQueue: -1,
	}
	if r.window > 0 {
		t.OpsPerSec = float64(t.Ops) / r.window.Seconds()
	}
	if r.wall > 0 {
		if r.cpuOK {
			t.CPUCores = r.cpu.Seconds() / r.wall.Seconds()
			if r.done > 0 {
				t.CPUUSPerOp = float64(r.cpu) / float64(r.done) / float64(time.Microsecond)
			}
		}
		if r.rqOK {
			t.RunQueue = r.runQueue.Seconds() / r.wall.Seconds()
		}
	}
	return t
}

// ErrorCount is the number of failed ops over every phase.
func (r *Report) ErrorCount() int64 {
	var n int64
	for _, t := range r.Targets {
		n += t.Errors
	}
	return n
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// WriteTable writes the report for a human: one row per target, the ratio,
// then the relay and store figures.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tconns\treq/s\tops/s\tp50\tp99\tmax\terrors\tcpu\trunq\tcpu/op\t")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2fms\t%.2fms\t%.2fms\t%d\t%.2f\t%.2f\t%.0fus\t\n",
			t.Target, t.Conns, t.OpsPerSec*float64(t.RequestsPerOp), t.OpsPerSec, t.P50MS, t.P99MS, t.MaxMS, t.Errors,
			t.CPUCores, t.RunQueue, t.CPUUSPerOp)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	opNote := "an op of " + TargetLag + " is a claim and its outcome"
	if r.Mode == ModeWebhook {
		opNote = "an op is one freshly signed Stripe delivery, signed by the client outside its latency"
	}
	fmt.Fprintf(&b, "(%d connections, %.1fs warm-up + %.1fs measured per target in %d round(s), GOMAXPROCS %d, API logging %v; "+
		"%s; cpu = cores this process used, runq = its threads' wait for a CPU per second, cpu/op = CPU time per op, client and server)\n",
		r.Conns, r.WarmupMS/1000, r.DurationMS/1000, r.Rounds, r.GOMAXPROCS, onOff(r.APILog), opNote)
	if r.UnsafeNoSync {
		b.WriteString("UNSAFE: the store skipped fdatasync (-unsafe-nosync); these figures are a ceiling without durability, not the service's\n")
	}
	for _, t := range r.Targets {
		for _, s := range t.ErrorSamples {
			fmt.Fprintf(&b, "error sample (%s): %s\n", t.Target, s)
		}
	}
	if r.RealOverBare > 0 {
		verdict := "met"
		if r.RealOverBare < RatioTarget {
			verdict = "MISSED"
		}
		verdict = r.unsafe(verdict)
		fmt.Fprintf(&b, "real/bare: %.2f (target >= %.2f: %s)\n", r.RealOverBare, RatioTarget, verdict)
	}
	if r.RealOverPgx > 0 {
		issue, target, at := "32", PgxRatioTarget, "64 connections"
		if r.Conns == 1 {
			target, at = PgxRatioTarget1, "1 connection"
		}
		if r.Store == StorePostgres {
			issue, target = "31", PostgresPgxRatioTarget
		}
		verdict := "met"
		if r.RealOverPgx < target {
			verdict = "MISSED"
		}
		verdict = r.unsafe(verdict)
		fmt.Fprintf(&b, "real/pgx: %.2f (issue %s's target at %s >= %.2f: %s)\n", r.RealOverPgx, issue, at, target, verdict)
	}
	if rl := r.Relay; rl != nil {
		pace := "unlimited"
		if rl.PairsPerSecLimit > 0 {
			pace = fmt.Sprintf("%.0f pairs/s", rl.PairsPerSecLimit)
		}
		fmt.Fprintf(&b, "relay (%s): %d/%d events delivered, %d missing; lag p50 %.2fms p99 %.2fms max %.2fms; "+
			"%.0f events/s; outbox depth %d at load end, %d after drain (drain %.0fms); stream holds %d\n",
			pace, rl.Delivered, rl.Outcomes, rl.Missing, rl.LagP50MS, rl.LagP99MS, rl.LagMaxMS,
			rl.EventsPerSec, rl.OutboxDepthAtLoadEnd, rl.OutboxDepthAfterDrain, rl.DrainMS, rl.StreamMsgs)
	}
	if r.DurableOverVerify > 0 {
		target := WebhookRatioTarget
		if r.Store == StorePostgres {
			target = PostgresWebhookRatioTarget
		}
		verdict := "met"
		if r.DurableOverVerify < target {
			verdict = "MISSED"
		}
		verdict = r.unsafe(verdict)
		fmt.Fprintf(&b, "durable/verify-only: %.2f (target >= %.2f: %s)\n", r.DurableOverVerify, target, verdict)
	}
	if wr := r.Webhook; wr != nil {
		for _, t := range r.Targets {
			if t.Target == TargetDurable {
				verdict := "met"
				if t.P99MS > WebhookP99TargetMS {
					verdict = "MISSED"
				}
				verdict = r.unsafe(verdict)
				fmt.Fprintf(&b, "durable p99: %.2fms (target <= %.0fms: %s)\n", t.P99MS, WebhookP99TargetMS, verdict)
			}
		}
		fmt.Fprintf(&b, "webhook rows: %d claimed and reported timeout in %.1fs before the load; %d used, %d acknowledged, "+
			"%d flipped to succeeded with their receipt, %d not; outbox depth %d at the load's end (waiting or held)\n",
			wr.Rows, wr.SetupMS/1000, wr.Used, wr.Acked, wr.Flipped, wr.NotFlipped, wr.OutboxDepthAtEnd)
		if wr.Exhausted {
			fmt.Fprintf(&b, "WARNING: the rows ran out; %s stopped early: its req/s is over %.1fs measured (raise -webhook-rows)\n",
				TargetDurable, r.targetWindowMS(TargetDurable)/1000)
		}
	}
	if er := r.Events; er != nil {
		r.writeEvents(&b, er)
	}
	boltTarget := TargetReal
	if r.Mode == ModeWebhook {
		boltTarget = TargetDurable
	}
	if r.Store == StorePostgres {
		fmt.Fprintf(&b, "store: postgres (a fresh database for the run)\n")
	} else {
		fmt.Fprintf(&b, "bolt during %s: %d ops in %d commits (%.1f per group), %.2fms commit + %.2fms run per group, committer busy %.0f%%\n",
			boltTarget, r.Bolt.Ops, r.Bolt.Groups, r.Bolt.MeanGroup, r.Bolt.CommitMSPerGroup, r.Bolt.RunMSPerGroup, 100*r.Bolt.CommitterBusy)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// writeEvents writes webhook mode's events: each phase's ingest and relay
// side by side, its lags, and the verdicts.
func (r *Report) writeEvents(b *strings.Builder, er *EventsResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "events\tpace\tingest/s\trelay/s\trelay/ingest\tlag p50\tp99\tmax\ttarget\t")
	for _, ph := range er.Phases {
		pace := "unlimited"
		if ph.RateLimit > 0 {
			pace = fmt.Sprintf("%.0f/s", ph.RateLimit)
		}
		verdict := "met"
		if !ph.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.3f\t%.2fms\t%.2fms\t%.2fms\tp99 < %.0fms, relay/ingest >= %.2f: %s\t\n",
			ph.Phase, pace, ph.IngestPerSec, ph.RelayPerSec, ph.RelayOverIngest, ph.LagP50MS, ph.LagP99MS, ph.LagMaxMS,
			ph.LagTargetMS, RelayOverIngestTarget, r.unsafe(verdict))
	}
	_ = tw.Flush() // writes to a strings.Builder: cannot fail
	verdict := "met"
	if !er.Met {
		verdict = "MISSED"
	}
	fmt.Fprintf(b, "(lag = a durable delivery's 200 to its event's arrival from the stream; ingest/s and relay/s = deliveries answered and "+
		"events arrived in the same window)\n")
	fmt.Fprintf(b, "events: %d/%d delivered, %d missing, %d duplicates; records held %.0fms after their PubAck; outbox %d after the drain "+
		"(last event %.0fms after the load); events target: %s\n",
		er.Delivered, er.Acked, er.Missing, er.Duplicates, er.SyncedAfterMS, er.OutboxAfterDrain, er.DrainMS, r.unsafe(verdict))
}

// target returns the named target's result, nil when it did not run.
func (r *Report) target(name string) *TargetResult {
	for i := range r.Targets {
		if r.Targets[i].Target == name {
			return &r.Targets[i]
		}
	}
	return nil
}

func (r *Report) targetWindowMS(name string) float64 {
	for _, t := range r.Targets {
		if t.Target == name {
			return t.WindowMS
		}
	}
	return 0
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// unsafe replaces a verdict when the store ran without fdatasync: such a
// run meets or misses nothing.
func (r *Report) unsafe(verdict string) string {
	if r.UnsafeNoSync {
		return "no verdict: -unsafe-nosync"
	}
	return verdict
}
