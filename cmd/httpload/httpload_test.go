package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/webhooks"
)

// TestRunSmall runs the whole program briefly with 4 connections: both
// targets answer every request, and every outcome's event reaches the
// stream. It asserts no timing.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS and bolt and runs load for ~2 s per case")
	}
	tests := []struct {
		name   string
		rounds int
		lag    time.Duration // 0: no phase 2
		unsafe bool
		// idem: every claim carries an Idempotency-Key; a value reused
		// across workers or rounds would meet another body: a 422, an
		// error in the report.
		idem bool
	}{
		{name: "bare then real, then relay lag", rounds: 1, lag: 500 * time.Millisecond},
		{name: "two alternating rounds, no phase 2", rounds: 2},
		{name: "unsafe-nosync gives figures but no verdict", rounds: 1, unsafe: true},
		{name: "claims with an Idempotency-Key", rounds: 2, idem: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := DefaultConfig()
			cfg.Conns = 4
			cfg.Warmup = 100 * time.Millisecond
			cfg.Duration = time.Second
			cfg.Rounds = tt.rounds
			cfg.LagDuration = tt.lag
			cfg.LagRate = 100
			cfg.DrainTimeout = 30 * time.Second // generous: -race and a busy shared disk
			cfg.RequestTimeout = 10 * time.Second
			cfg.Dir = dir
			cfg.UnsafeNoSync = tt.unsafe
			cfg.IdempotencyKey = tt.idem

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkReport(t, rep, tt.lag > 0)
			var table strings.Builder
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			unsafe := strings.Contains(table.String(), "UNSAFE") && strings.Contains(table.String(), "no verdict: -unsafe-nosync") &&
				!strings.Contains(table.String(), "MISSED") && !strings.Contains(table.String(), ": met")
			if unsafe != tt.unsafe || rep.UnsafeNoSync != tt.unsafe {
				t.Errorf("unsafe-nosync %v, report says %v:\n%s", tt.unsafe, rep.UnsafeNoSync, table.String())
			}

			// The temporary data directory is gone.
			left, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Errorf("left behind in %s: %v", dir, left)
			}
		})
	}
}

func checkReport(t *testing.T, rep *Report, lag bool) {
	t.Helper()
	wantTargets := []string{TargetBare, TargetReal}
	if lag {
		wantTargets = append(wantTargets, TargetLag)
	}
	if len(rep.Targets) != len(wantTargets) {
		t.Fatalf("targets: got %d, want %d (%+v)", len(rep.Targets), len(wantTargets), rep.Targets)
	}
	for i, tr := range rep.Targets {
		if tr.Target != wantTargets[i] {
			t.Errorf("target %d: got %q, want %q", i, tr.Target, wantTargets[i])
		}
		if tr.Ops == 0 || tr.OpsPerSec <= 0 || tr.P50MS <= 0 || tr.P99MS < tr.P50MS {
			t.Errorf("%s: empty or inconsistent result: %+v", tr.Target, tr)
		}
		if tr.Errors != 0 {
			t.Errorf("%s: errors: got %d, want 0: %q", tr.Target, tr.Errors, tr.ErrorSamples)
		}
	}
	if rep.RealOverBare <= 0 {
		t.Errorf("real/bare: got %v, want > 0", rep.RealOverBare)
	}
	// Every measured real claim went through the store's committer.
	if minOps := uint64(rep.Targets[1].Ops); rep.Bolt.Ops < minOps || rep.Bolt.Groups == 0 {
		t.Errorf("bolt: got %d ops in %d groups, want >= %d ops", rep.Bolt.Ops, rep.Bolt.Groups, minOps)
	}

	rl := rep.Relay
	switch {
	case !lag && rl != nil:
		t.Errorf("relay result without phase 2: %+v", rl)
	case lag && rl == nil:
		t.Fatal("no relay result")
	case lag:
		if rl.Outcomes == 0 {
			t.Fatal("phase 2 reported no outcome")
		}
		if rl.Delivered != rl.Outcomes || rl.Missing != 0 {
			t.Errorf("events: delivered %d of %d, missing %d", rl.Delivered, rl.Outcomes, rl.Missing)
		}
		if rl.Unmatched != 0 || rl.Duplicates != 0 {
			t.Errorf("unmatched %d, duplicates %d: want 0", rl.Unmatched, rl.Duplicates)
		}
		if got, want := rl.StreamMsgs, uint64(rl.Outcomes); got != want {
			t.Errorf("stream msgs: got %d, want %d (one event per outcome, none for a claim)", got, want)
		}
		if rl.OutboxDepthAfterDrain != 0 {
			t.Errorf("outbox depth after drain: got %d, want 0", rl.OutboxDepthAfterDrain)
		}
	}

	var table, js bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	wantLines := append(wantTargets, "real/bare", "bolt during")
	if lag {
		wantLines = append(wantLines, "relay (")
	}
	for _, want := range wantLines {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("json: %v\n%s", err, js.String())
	}
	if len(back.Targets) != len(rep.Targets) || (back.Relay == nil) != (rl == nil) || back.Rounds != rep.Rounds {
		t.Errorf("json round trip lost data: %s", js.String())
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string // "" = valid
	}{
		{name: "default", modify: func(*Config) {}},
		{name: "no phase 2, no drain", modify: func(c *Config) { c.LagDuration, c.DrainTimeout = 0, 0 }},
		{name: "unlimited phase 2", modify: func(c *Config) { c.LagRate = 0 }},
		{name: "zero conns", modify: func(c *Config) { c.Conns = 0 }, want: "conns"},
		{name: "too many conns", modify: func(c *Config) { c.Conns = 5000 }, want: "conns"},
		{name: "zero duration", modify: func(c *Config) { c.Duration = 0 }, want: "duration"},
		{name: "negative warmup", modify: func(c *Config) { c.Warmup = -time.Second }, want: "warmup"},
		{name: "negative rate", modify: func(c *Config) { c.LagRate = -1 }, want: "lag rate"},
		{name: "phase 2 without drain", modify: func(c *Config) { c.DrainTimeout = 0 }, want: "drain"},
		{name: "zero request timeout", modify: func(c *Config) { c.RequestTimeout = 0 }, want: "request timeout"},
		{name: "zero rounds", modify: func(c *Config) { c.Rounds = 0 }, want: "rounds"},
		{name: "rounds too short", modify: func(c *Config) { c.Duration, c.Rounds = 50*time.Millisecond, 10 }, want: "rounds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error about %q", err, tt.want)
			}
		})
	}
}

// TestDefaultsBounded: the default run is bounded under a minute, start-up
// aside.
func TestDefaultsBounded(t *testing.T) {
	if got := DefaultConfig().MaxRunTime(); got >= time.Minute {
		t.Errorf("default max run time: got %s, want < 1m", got)
	}
}

func TestPercentile(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, v := range n {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{name: "empty", sorted: nil, q: 0.5, want: 0},
		{name: "one", sorted: ms(7), q: 0.99, want: 7 * time.Millisecond},
		{name: "median of four is the second", sorted: ms(1, 2, 3, 4), q: 0.5, want: 2 * time.Millisecond},
		{name: "p99 of 1..100", sorted: ms(hundred...), q: 0.99, want: 99 * time.Millisecond},
		{name: "p50 of 1..100", sorted: ms(hundred...), q: 0.5, want: 50 * time.Millisecond},
		{name: "max", sorted: ms(hundred...), q: 1, want: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.q); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLagTracker(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ack bool // else arrive
		key string
		ms  int
	}
	tests := []struct {
		name  string
		steps []step
		want  lagSnapshot
	}{
		{
			name:  "ack then arrive",
			steps: []step{{ack: true, key: "a", ms: 0}, {key: "a", ms: 3}},
			want:  lagSnapshot{lags: []time.Duration{3 * time.Millisecond}, acked: 1},
		},
		{
			name:  "arrive before ack counts zero lag",
			steps: []step{{key: "a", ms: 1}, {ack: true, key: "a", ms: 2}},
			want:  lagSnapshot{lags: []time.Duration{0}, acked: 1, beforeAck: 1},
		},
		{
			name:  "missing event",
			steps: []step{{ack: true, key: "a", ms: 0}, {ack: true, key: "b", ms: 0}, {key: "b", ms: 5}},
			want:  lagSnapshot{lags: []time.Duration{5 * time.Millisecond}, acked: 2, missing: 1},
		},
		{
			name:  "event without ack, then its duplicate",
			steps: []step{{key: "x", ms: 0}, {key: "x", ms: 1}},
			want:  lagSnapshot{lags: []time.Duration{}, unmatched: 1, dupes: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newLagTracker()
			for _, s := range tt.steps {
				if s.ack {
					tr.ack(s.key, at(s.ms))
				} else {
					tr.arrive(s.key, at(s.ms))
				}
			}
			got := tr.snapshot()
			if len(got.lags) != len(tt.want.lags) {
				t.Fatalf("lags: got %v, want %v", got.lags, tt.want.lags)
			}
			for i := range got.lags {
				if got.lags[i] != tt.want.lags[i] {
					t.Errorf("lag %d: got %s, want %s", i, got.lags[i], tt.want.lags[i])
				}
			}
			if got.acked != tt.want.acked || got.missing != tt.want.missing || got.unmatched != tt.want.unmatched ||
				got.dupes != tt.want.dupes || got.beforeAck != tt.want.beforeAck {
				t.Errorf("counts: got acked %d missing %d unmatched %d dupes %d beforeAck %d, want %+v",
					got.acked, got.missing, got.unmatched, got.dupes, got.beforeAck, tt.want)
			}
			if got.missing != tr.missing() {
				t.Errorf("missing(): got %d, snapshot says %d", tr.missing(), got.missing)
			}
		})
	}
}

func TestPhaseResultAdd(t *testing.T) {
	a := phaseResult{
		latencies: []time.Duration{3}, errors: 1, samples: []string{"x"}, window: time.Second, done: 10,
		wall: 2 * time.Second, cpu: time.Second, runQueue: time.Second, cpuOK: true, rqOK: true,
	}
	b := phaseResult{
		latencies: []time.Duration{1, 2}, errors: 2, samples: []string{"x", "y"}, window: time.Second, done: 20,
		wall: 2 * time.Second, cpu: 3 * time.Second, runQueue: 0, cpuOK: true, rqOK: false,
	}
	var sum phaseResult
	sum.add(a)
	sum.add(b)
	got := targetResult("t", 4, 1, sum)
	if got.Ops != 3 || got.Errors != 3 || len(got.ErrorSamples) != 2 || got.WindowMS != 2000 {
		t.Errorf("counts: got %+v", got)
	}
	if got.OpsPerSec != 1.5 {
		t.Errorf("ops/s: got %v, want 1.5", got.OpsPerSec)
	}
	if got.CPUCores != 1 {
		t.Errorf("cpu cores: got %v, want 1 (4 s of CPU over 4 s)", got.CPUCores)
	}
	if want := 4e6 / 30; got.CPUUSPerOp < want-1 || got.CPUUSPerOp > want+1 {
		t.Errorf("cpu/op: got %vus, want %vus", got.CPUUSPerOp, want)
	}
	if got.RunQueue != -1 {
		t.Errorf("run queue: got %v, want -1 (one round could not tell)", got.RunQueue)
	}
}

// TestRunWebhook runs webhook mode briefly with 4 connections: both routes
// answer every delivery, every acknowledged durable delivery flipped its
// row (read back from the store before it closes), and the verify-only
// route flipped none.
func TestRunWebhook(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS and bolt, claims rows and runs load for ~2 s")
	}
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Mode = ModeWebhook
	cfg.WebhookRows = 1500
	cfg.Conns = 4
	cfg.Warmup = 100 * time.Millisecond
	cfg.Duration = time.Second
	cfg.RequestTimeout = 10 * time.Second
	cfg.HalfDuration = 0 // TestRunWebhookEvents runs it
	cfg.Dir = dir
	var checked bool
	cfg.afterWebhook = func(ctx context.Context, st ledger.Store, rows []rowRef, acked []ackedDelivery) {
		checked = true
		flipped := make(map[string]string, len(acked)) // key → receipt
		for _, a := range acked {
			if _, dup := flipped[rows[a.row].key]; dup {
				t.Errorf("row %s acknowledged twice", rows[a.row].key)
			}
			flipped[rows[a.row].key] = a.receipt
		}
		// Walk every row: the acknowledged ones succeeded with their
		// delivery's receipt, all others are still unknown.
		q := ledger.ListQuery{Tenant: tenant, Limit: ledger.MaxListLimit}
		seen := 0
		for {
			page, err := st.List(ctx, q)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			for _, r := range page.Rows {
				seen++
				receipt, ok := flipped[r.Key]
				switch {
				case ok && (r.Status != ledger.StatusSucceeded || r.UpstreamReceiptID != receipt):
					t.Errorf("acknowledged row %s: status %s receipt %q, want succeeded %q", r.Key, r.Status, r.UpstreamReceiptID, receipt)
				case !ok && r.Status != ledger.StatusUnknown:
					t.Errorf("row %s was not sent a durable delivery: status %s, want unknown", r.Key, r.Status)
				}
			}
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
		if seen != len(rows) {
			t.Errorf("rows in store: got %d, want %d", seen, len(rows))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !checked {
		t.Fatal("the store was not checked after the load")
	}
	if len(rep.Targets) != 2 || rep.Targets[0].Target != TargetVerifyOnly || rep.Targets[1].Target != TargetDurable {
		t.Fatalf("targets: %+v", rep.Targets)
	}
	for _, tr := range rep.Targets {
		if tr.Ops == 0 || tr.P99MS < tr.P50MS {
			t.Errorf("%s: empty or inconsistent result: %+v", tr.Target, tr)
		}
		if tr.Errors != 0 {
			t.Errorf("%s: errors: got %d, want 0: %q", tr.Target, tr.Errors, tr.ErrorSamples)
		}
	}
	wr := rep.Webhook
	if wr == nil {
		t.Fatal("no webhook result")
	}
	if wr.Rows != cfg.WebhookRows || wr.Used == 0 || wr.Acked != wr.Used || wr.Flipped != wr.Acked || wr.NotFlipped != 0 {
		t.Errorf("webhook result: %+v, want every used row acknowledged and flipped", wr)
	}
	// Every measured durable delivery was acknowledged (the warm-up's too).
	if wr.Acked < rep.Targets[1].Ops {
		t.Errorf("acknowledged %d, fewer than the %d measured", wr.Acked, rep.Targets[1].Ops)
	}
	if rep.DurableOverVerify <= 0 || rep.Bolt.Ops < uint64(wr.Acked) {
		t.Errorf("ratio %v, bolt ops %d (acked %d)", rep.DurableOverVerify, rep.Bolt.Ops, wr.Acked)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{TargetVerifyOnly, TargetDurable, "durable/verify-only", "durable p99", "webhook rows", "bolt during " + TargetDurable} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("left behind in %s: %v (%v)", dir, left, err)
	}
	// Every acknowledged delivery's event arrived, once.
	if er := rep.Events; er == nil || er.Acked != wr.Acked || er.Delivered != er.Acked || er.Missing != 0 || er.Duplicates != 0 ||
		len(er.Phases) != 1 || er.Phases[0].Phase != PhasePeak || er.Phases[0].Events == 0 {
		t.Errorf("events: %+v, want every acknowledged delivery's event and the peak phase", er)
	}
}

// TestRunWebhookEvents runs webhook mode with its half-rate phase: each
// phase reports ingest and relay rates over the same window and the lag of
// its deliveries' events, and the table prints them side by side.
func TestRunWebhookEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS and bolt, claims rows and runs load for ~3 s")
	}
	cfg := DefaultConfig()
	cfg.Mode = ModeWebhook
	cfg.WebhookRows = 3000
	cfg.Conns = 4
	cfg.Warmup = 100 * time.Millisecond
	cfg.Duration = 500 * time.Millisecond
	cfg.HalfDuration = time.Second
	cfg.SkipBare = true
	cfg.RequestTimeout = 10 * time.Second
	cfg.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Targets) != 2 || rep.Targets[0].Target != TargetDurable || rep.Targets[1].Target != TargetDurableHalf {
		t.Fatalf("targets: %+v", rep.Targets)
	}
	peak, half := rep.Targets[0], rep.Targets[1]
	if rep.Webhook.Exhausted {
		t.Fatalf("the rows ran out: %+v", rep.Webhook)
	}
	// The half phase is paced at half the peak's rate (a loaded machine
	// may fall short of it, never beyond): its limiter's burst (one token a
	// connection) may go out on top within the short window.
	burst := float64(cfg.Conns) / cfg.HalfDuration.Seconds()
	if half.OpsPerSec > peak.OpsPerSec/2*1.1+burst || half.Errors != 0 {
		t.Errorf("half phase: %.0f/s with %d errors, want at most half of the peak's %.0f/s", half.OpsPerSec, half.Errors, peak.OpsPerSec)
	}
	er := rep.Events
	if er == nil || len(er.Phases) != 2 || er.Phases[0].Phase != PhasePeak || er.Phases[1].Phase != PhaseHalf {
		t.Fatalf("events: %+v", er)
	}
	if er.Missing != 0 || er.Duplicates != 0 || er.Delivered != er.Acked || er.OutboxAfterDrain != 0 {
		t.Errorf("events: %+v, want every event once and the outbox empty", er)
	}
	for i, ph := range er.Phases {
		tr := rep.Targets[i]
		if ph.IngestPerSec != tr.OpsPerSec || ph.Events == 0 || ph.Events > tr.Ops || ph.RelayPerSec <= 0 ||
			ph.LagP50MS > ph.LagP99MS || ph.LagP99MS > ph.LagMaxMS {
			t.Errorf("phase %s: %+v (target %+v)", ph.Phase, ph, tr)
		}
	}
	if er.Phases[1].RateLimit != peak.OpsPerSec/2 {
		t.Errorf("half phase rate limit: got %v, want %v", er.Phases[1].RateLimit, peak.OpsPerSec/2)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"relay/ingest", "lag p50", PhasePeak, PhaseHalf, "events target:", TargetDurableHalf} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}

// TestWebhookTemplate: a prepared delivery verifies with the endpoint's
// secret, not with another, and decodes to the values put in.
func TestWebhookTemplate(t *testing.T) {
	tmpl, err := newWebhookTemplate()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	wl := &webhookLoad{tmpl: tmpl, secret: "whsec_test", now: func() time.Time { return now },
		rows: []rowRef{{key: "rk_one", localID: "rl_one"}, {key: "rk_two", localID: "rl_two"}}}
	tests := []struct {
		name      string
		seq, row  int
		wantEvent string
	}{
		{name: "first row", seq: 0, row: 0, wantEvent: "evt_p_3_0"},
		{name: "second row", seq: 41, row: 1, wantEvent: "evt_p_3_41"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &worker{id: 3}
			wl.prepare(w, "p", tt.seq, tt.row)
			body := w.buf.Bytes()
			if err := webhooks.VerifyStripe(w.stripeSig, body, []string{"whsec_test"}, 0, now); err != nil {
				t.Fatalf("verify: %v", err)
			}
			ev, err := webhooks.DecodeStripe(body, "")
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			want := webhooks.Event{ID: tt.wantEvent, ObjectID: "pi_" + strings.TrimPrefix(tt.wantEvent, "evt_"),
				LocalID: wl.rows[tt.row].localID, IdempotencyKey: wl.rows[tt.row].key, Type: "payment_intent.succeeded"}
			if ev.ID != want.ID || ev.ObjectID != want.ObjectID || ev.LocalID != want.LocalID ||
				ev.IdempotencyKey != want.IdempotencyKey || ev.Type != want.Type {
				t.Errorf("decoded %+v, want %+v", ev, want)
			}
			if w.next.row != tt.row || w.next.receipt != want.ObjectID {
				t.Errorf("next: %+v", w.next)
			}
			if err := webhooks.VerifyStripe(w.stripeSig, body, []string{"whsec_other"}, 0, now); err == nil {
				t.Error("verified with another secret")
			}
		})
	}
}

// TestVerifyOnlyRoute: the verify-only route of the real target answers
// like the durable one up to the store (400 for a bad signature, a stale
// timestamp or an unparsable body; 404 for an unknown endpoint), answers
// 200 "verified" to a good delivery, and never touches the row; and
// webhooks.Handler.Register alone, which serve calls, does not add it.
func TestVerifyOnlyRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS and bolt")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	rt, err := startReal(ctx, t.TempDir(), realOptions{stripeSecret: "whsec_route", now: func() time.Time { return now }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rt.close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	ref, err := claimUnknown(ctx, rt.store, 0, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := newWebhookTemplate()
	if err != nil {
		t.Fatal(err)
	}
	client := newClient(1, 10*time.Second)
	defer client.CloseIdleConnections()

	tests := []struct {
		name     string
		path     string
		secret   string
		signedAt time.Time
		body     func([]byte) []byte // nil: as prepared
		want     int
		result   string // the ack's result when want is 200
	}{
		{name: "good delivery", path: verifyOnlyRoute + "/" + webhookEndpoint, secret: "whsec_route", signedAt: now, want: http.StatusOK, result: "verified"},
		{name: "bare path, the only endpoint", path: verifyOnlyRoute, secret: "whsec_route", signedAt: now, want: http.StatusOK, result: "verified"},
		{name: "bad signature", path: verifyOnlyRoute + "/" + webhookEndpoint, secret: "whsec_wrong", signedAt: now, want: http.StatusBadRequest},
		{name: "stale", path: verifyOnlyRoute + "/" + webhookEndpoint, secret: "whsec_route", signedAt: now.Add(-time.Hour), want: http.StatusBadRequest},
		{name: "unparsable body", path: verifyOnlyRoute + "/" + webhookEndpoint, secret: "whsec_route", signedAt: now,
			body: func([]byte) []byte { return []byte("not json") }, want: http.StatusBadRequest},
		{name: "unknown endpoint", path: verifyOnlyRoute + "/nope", secret: "whsec_route", signedAt: now, want: http.StatusNotFound},
		{name: "durable route, bad signature", path: "/webhooks/stripe/" + webhookEndpoint, secret: "whsec_wrong", signedAt: now, want: http.StatusBadRequest},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &worker{id: i, client: client, base: rt.http.url}
			wl := &webhookLoad{tmpl: tmpl, secret: tt.secret, now: func() time.Time { return tt.signedAt }, rows: []rowRef{ref}}
			wl.prepare(w, "route", 0, 0)
			body := w.buf.Bytes()
			if tt.body != nil {
				body = tt.body(body)
				w.stripeSig = fixtures.SignStripe(body, tt.signedAt, tt.secret)
			}
			var ack webhookAck
			var out any
			if tt.want == http.StatusOK {
				out = &ack
			}
			if err := w.post(ctx, tt.path, body, tt.want, out); err != nil {
				t.Fatal(err)
			}
			if ack.Result != tt.result {
				t.Errorf("result: got %q, want %q", ack.Result, tt.result)
			}
			row, err := rt.store.Get(ctx, tenant, ref.key)
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != ledger.StatusUnknown {
				t.Errorf("row status: got %s, want unknown (nothing stored)", row.Status)
			}
		})
	}

	t.Run("Register does not add it", func(t *testing.T) {
		h, err := webhooks.New(webhooks.Options{Store: rt.store,
			Stripe: []webhooks.StripeEndpoint{{Name: "x", Tenant: tenant, Secrets: []string{"whsec_x"}}}})
		if err != nil {
			t.Fatal(err)
		}
		e := echo.New()
		h.Register(e)
		for _, r := range e.Routes() {
			if strings.HasPrefix(r.Path, verifyOnlyRoute) {
				t.Errorf("Register added %s %s", r.Method, r.Path)
			}
		}
		if err := registerVerifyOnly(e, webhooks.Options{
			Stripe: []webhooks.StripeEndpoint{{Name: "x", Tenant: tenant, Secrets: []string{"whsec_x"}}}}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range e.Routes() {
			if strings.HasPrefix(r.Path, verifyOnlyRoute) {
				n++
			}
		}
		if n != 2 {
			t.Errorf("registerVerifyOnly added %d routes, want 2", n)
		}
	})
}
