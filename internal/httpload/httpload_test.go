package httpload

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
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
	}{
		{name: "bare then real, then relay lag", rounds: 1, lag: 500 * time.Millisecond},
		{name: "two alternating rounds, no phase 2", rounds: 2},
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

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkReport(t, rep, tt.lag > 0)

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
