package replicas

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
)

// TestNATSNodeLost runs the service on a three-node JetStream cluster
// (natstest.StartCluster: each node a process, SIGKILLed for real) with its
// RECON stream at three replicas (--events-replicas 3), on each store: one
// replica on bbolt, and two on one PostgreSQL database when
// RECONCILER_TEST_POSTGRES_URL is set. A burst of signed Stripe webhooks
// (each settling a claimed row) runs while the stream's leader node is
// SIGKILLed and, once another node leads, started again; then two nodes are
// killed at once (the stream has no quorum), more webhooks are taken, and
// both come back. Every acknowledged webhook's event is on the stream once
// (no Nats-Msg-Id twice), the outbox drains once a quorum is back, /readyz
// says degraded (200, the nats check) while events cannot be published and
// never answers 503 meanwhile.
func TestNATSNodeLost(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	t.Parallel() // with TestReplicaKilledMidResolveTakenOver, which mostly waits
	for _, tc := range []struct {
		name     string
		replicas int
		store    func(t *testing.T) string
	}{
		{"bolt", 1, func(*testing.T) string { return "bolt" }},
		{"postgres", 2, func(t *testing.T) string { return pgtest.Database(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) { natsNodeLost(t, tc.replicas, tc.store(t)) })
	}
}

func natsNodeLost(t *testing.T, replicas int, store string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	nodes := natstest.StartCluster(t, 3)
	t.Logf("three NATS nodes with JetStream after %s", time.Since(start).Round(time.Millisecond))
	bin := sharedBinary(t)
	stripe := fakestripe.New(t, fakestripe.Options{})
	c := newCluster(t, bin, store, "RECON", "recon", stripe.URL(), replicas)
	// auto: 0 for a stream of three replicas, whose PubAck is a quorum's.
	c.nats, c.syncedAfter = nodes.URLs(), "auto"
	c.extraArgs = []string{"--events-replicas", "3", "--events-max-bytes", "64MiB"}
	for i := range replicas {
		c.start(i)
	}
	t.Logf("%d replica(s) on %s ready after %s", replicas, strings.SplitN(store, ":", 2)[0], time.Since(start).Round(time.Millisecond))
	cl := newClient(c.addrs())

	conn, err := nats.Connect(nodes.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		// The nodes die under it; nats.go would print each lost connection.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	info := streamInfo(t, ctx, js)
	if info.Config.Replicas != 3 {
		t.Fatalf("stream RECON has %d replicas, want 3 (--events-replicas 3)", info.Config.Replicas)
	}

	ready := watchReadyz(t, ctx, c.addrs())
	run := fmt.Sprintf("nl_%x", time.Now().UnixNano()&0xffffffff)
	var (
		mu    sync.Mutex
		acked []string // the keys whose webhook a replica acknowledged
		n     atomic.Int64
	)
	ingest := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range next {
					key, err := claimAndSettle(ctx, cl, run, i, i%replicas)
					if err != nil {
						t.Errorf("key %d: %v", i, err)
						continue
					}
					mu.Lock()
					acked = append(acked, key)
					mu.Unlock()
					n.Add(1)
				}
			})
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	waitAcked := func(what string, target int64) {
		t.Helper()
		for n.Load() < target {
			if ctx.Err() != nil || t.Failed() {
				t.Fatalf("waiting for %s: %d of %d webhooks acknowledged: %v", what, n.Load(), target, ctx.Err())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Phase 1: one node lost mid-burst, the stream's leader (the worst
	// one: the stream must elect another before it takes a write), and
	// started again on its store once another node leads.
	const burst = 240
	// The burst runs beside the test's goroutine, which kills and
	// restarts (and may fail: the burst then ends with the context).
	var load sync.WaitGroup
	load.Go(func() { ingest(0, burst) })
	defer func() { cancel(); load.Wait() }()
	waitAcked("a quarter of the burst", burst/4)
	leader := streamInfo(t, ctx, js).Cluster.Leader
	dead := nodes.Index(leader)
	if dead < 0 {
		t.Fatalf("stream leader %q is none of the nodes", leader)
	}
	nodes.Kill(dead)
	killedAt := time.Now()
	t.Logf("SIGKILLed NATS node %s, the stream's leader, after %d webhooks", leader, n.Load())
	waitAcked("three fifths of the burst", burst*3/5)
	for {
		if l := leaderOf(ctx, js); l != "" && l != leader {
			t.Logf("node %s leads the stream %s after the kill", l, time.Since(killedAt).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no new stream leader after the kill: %v", ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	nodes.Start(dead)
	t.Logf("started NATS node %s again after %d webhooks", leader, n.Load())
	load.Wait()
	if t.Failed() {
		return
	}
	waitPublished(t, ctx, js, c.addrs(), run, int(n.Load()), 60*time.Second)
	t.Logf("burst of %d webhooks published with one node lost and back, after %s", n.Load(), time.Since(start).Round(time.Millisecond))

	// Phase 2: two nodes of three lost: no quorum, nothing can be
	// published; the replicas still take webhooks, their events wait in
	// the outbox and /readyz says degraded; the nodes come back and the
	// outbox drains.
	// The two followers go, so the leader is left alone: what it takes
	// until it notices cannot be committed, and may be after the relay
	// gave up waiting for its PubAck and publishes it again.
	leader = streamInfo(t, ctx, js).Cluster.Leader
	var lost []int
	for i := range 3 {
		if nodes.Name(i) != leader {
			lost = append(lost, i)
		}
	}
	for _, i := range lost {
		nodes.Kill(i)
	}
	lostAt := time.Now()
	ready.mark("quorum lost")
	t.Logf("SIGKILLed NATS nodes %s and %s, leaving the stream's leader %s alone: no quorum", nodes.Name(lost[0]), nodes.Name(lost[1]), leader)
	const more = 60
	ingest(burst, burst+more)
	if t.Failed() {
		return
	}
	t.Logf("%d more webhooks acknowledged without a quorum in %s", more, time.Since(lostAt).Round(time.Millisecond))
	for i := range replicas {
		ready.waitDegraded(t, i, 45*time.Second)
	}
	depth := 0
	for _, addr := range c.addrs() {
		depth = max(depth, int(metric(t, ctx, addr, "reconciler_outbox_depth")))
	}
	if depth == 0 {
		t.Errorf("no event waits in the outbox %s after the quorum was lost, %d webhooks later", time.Since(lostAt).Round(time.Millisecond), more)
	}
	t.Logf("every replica says degraded %s after the quorum was lost; %d events wait in the outbox", time.Since(lostAt).Round(time.Millisecond), depth)
	for _, i := range lost {
		nodes.Start(i)
	}
	backAt := time.Now()
	ready.mark("quorum back")
	waitPublished(t, ctx, js, c.addrs(), run, burst+more, 90*time.Second)
	t.Logf("outbox drained %s after the quorum came back", time.Since(backAt).Round(time.Millisecond))
	for i := range replicas {
		ready.waitReady(t, i, 30*time.Second)
	}
	ready.stop()
	if t.Failed() {
		return
	}

	t.Run("every acknowledged webhook's event on the stream once", func(t *testing.T) {
		perID := map[string]int{}
		succeeded := map[string]int{}
		for _, m := range streamMessages(t, ctx, js, "RECON") {
			id := m.Header.Get(jetstream.MsgIDHeader)
			perID[id]++
			var ev ledger.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatalf("decode event: %v", err)
			}
			if want := ev.Tenant + ":" + ev.Key + ":" + ev.Status; id != want {
				t.Errorf("msg id %q, want %q", id, want)
			}
			if ev.Status == string(ledger.StatusSucceeded) {
				succeeded[ev.Key]++
			}
		}
		for id, k := range perID {
			if k != 1 {
				t.Errorf("Nats-Msg-Id %s: %d messages, want 1", id, k)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(acked) != burst+more {
			t.Errorf("%d webhooks acknowledged, want %d", len(acked), burst+more)
		}
		for _, key := range acked {
			if succeeded[key] != 1 {
				t.Errorf("key %s: %d succeeded events, want 1", key, succeeded[key])
			}
		}
		if len(succeeded) != len(acked) {
			t.Errorf("%d keys with a succeeded event, %d acknowledged webhooks", len(succeeded), len(acked))
		}
		var dups float64
		for _, addr := range c.addrs() {
			dups += metric(t, ctx, addr, `reconciler_relay_publishes_total{result="duplicate"}`)
		}
		t.Logf("%d messages on the stream for %d acknowledged webhooks; JetStream dropped %.0f publishes as duplicates", len(perID), len(acked), dups)
	})
	t.Run("the stream's replicas caught up", func(t *testing.T) {
		info := streamInfo(t, ctx, js)
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream cluster %+v, want a leader and two replicas", info.Cluster)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			info = streamInfo(t, ctx, js)
			current := 0
			for _, r := range info.Cluster.Replicas {
				if r.Current {
					current++
				}
			}
			if current == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replicas of the stream not current after 30s: %+v", info.Cluster.Replicas)
			}
		}
	})
	t.Run("readyz never failed", func(t *testing.T) {
		ready.check(t)
	})
	t.Logf("test body took %s", time.Since(start).Round(time.Millisecond))
}

// claimAndSettle claims key i of run through replica first and delivers
// the signed payment_intent.succeeded that settles it, until a replica
// acknowledges it; it returns the row's key.
func claimAndSettle(ctx context.Context, cl *client, run string, i, first int) (string, error) {
	body := fmt.Sprintf(`{"run_id":"run_%s","tool":"stripe.payment_intents.create","tool_call_id":"call_%d",
		"vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd","customer":"cus_%d"}}`, run, i, i)
	code, b, err := cl.api(ctx, first, http.MethodPost, "/v1/claims", body)
	if err != nil {
		return "", fmt.Errorf("claim: %w", err)
	}
	if code != http.StatusCreated {
		return "", fmt.Errorf("claim: %d %s", code, b)
	}
	row, err := rowOf(b)
	if err != nil {
		return "", err
	}
	payload := fixtures.Load("stripe/2024-06-20/payment_intent.succeeded")
	for _, kv := range [][2]string{
		{"metadata_local_id", row.MetadataLocalID}, {"id", fmt.Sprintf("evt_%s_%d", run, i)}, {"data.object.id", receiptFor(row.MetadataLocalID)},
	} {
		if payload, err = fixtures.Set(payload, kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	h := http.Header{"Content-Type": {"application/json"}, "Stripe-Signature": {fixtures.SignStripe(payload, time.Now(), stripeSecret)}}
	code, b, _, err = cl.do(ctx, first+1, http.MethodPost, "/webhooks/stripe", h, payload)
	if err != nil {
		return "", fmt.Errorf("webhook: %w", err)
	}
	if code/100 != 2 {
		return "", fmt.Errorf("webhook: %d %s", code, b)
	}
	return row.Key, nil
}

// streamInfo is RECON's info, retried while the cluster elects.
func streamInfo(t *testing.T, ctx context.Context, js jetstream.JetStream) *jetstream.StreamInfo {
	t.Helper()
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		st, err := js.Stream(ctx, "RECON")
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(ctx); err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
				return info
			}
		}
		last = err
	}
	t.Fatalf("stream RECON: no info with a leader after 30s: %v", last)
	return nil
}

// leaderOf is the node leading RECON, "" while none does (or the cluster
// does not answer within a second).
func leaderOf(ctx context.Context, js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "RECON")
	if err != nil {
		return ""
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// waitPublished waits until the run's succeeded subject holds want
// messages and every replica's outbox is empty.
func waitPublished(t *testing.T, ctx context.Context, js jetstream.JetStream, addrs []string, run string, want int, bound time.Duration) {
	t.Helper()
	subject := "recon." + tenant + ".run_" + run + "." + string(ledger.StatusSucceeded)
	got, depth := -1, -1.0
	for deadline := time.Now().Add(bound); ; time.Sleep(200 * time.Millisecond) {
		if ctx.Err() != nil || time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d events on %s, outbox depth %.0f: %v", bound, got, want, subject, depth, ctx.Err())
		}
		got = subjectCount(ctx, js, subject)
		if got != want {
			continue
		}
		depth = 0
		for _, addr := range addrs {
			depth += metric(t, ctx, addr, "reconciler_outbox_depth")
		}
		if depth == 0 {
			return
		}
	}
}

// subjectCount is how many messages RECON holds on subject, -1 while it
// cannot tell.
func subjectCount(ctx context.Context, js jetstream.JetStream, subject string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "RECON")
	if err != nil {
		return -1
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return -1
	}
	return int(info.State.Subjects[subject])
}

// metric is the value of one sample (name with its labels, as exposed) on
// a replica's /metrics; 0 when absent.
func metric(t *testing.T, ctx context.Context, addr, sample string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("metrics of %s: %v", addr, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s of %s: %q", sample, addr, line)
			}
			return f
		}
	}
	return 0
}

// readyzWatch polls every replica's /readyz throughout the test.
type readyzWatch struct {
	addrs []string
	hc    *http.Client
	stopc chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	phase   string
	seen    []readyzSeen            // every answer that was not plain ready
	last    []readyzSeen            // the latest answer, per replica
	degrade map[int]map[string]bool // phases in which each replica said nats degraded
}

type readyzSeen struct {
	replica int
	phase   string
	code    int
	body    string
	err     error
}

func watchReadyz(t *testing.T, ctx context.Context, addrs []string) *readyzWatch {
	w := &readyzWatch{
		addrs: addrs, hc: &http.Client{Timeout: 20 * time.Second}, stopc: make(chan struct{}),
		phase: "one node lost", last: make([]readyzSeen, len(addrs)), degrade: map[int]map[string]bool{},
	}
	for i, addr := range addrs {
		w.wg.Go(func() { // owner: the watch; ends on stop
			for {
				select {
				case <-w.stopc:
					return
				case <-time.After(100 * time.Millisecond):
				}
				s := readyzSeen{replica: i}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
				resp, err := w.hc.Do(req)
				if err != nil {
					s.err = err
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					s.code, s.body = resp.StatusCode, string(b)
				}
				var h struct {
					Status   string            `json:"status"`
					Degraded map[string]string `json:"degraded"`
				}
				_ = json.Unmarshal([]byte(s.body), &h)
				w.mu.Lock()
				s.phase = w.phase
				w.last[i] = s
				if s.err != nil || s.code != http.StatusOK || h.Status != "ready" {
					w.seen = append(w.seen, s)
				}
				if h.Degraded["nats"] != "" {
					if w.degrade[i] == nil {
						w.degrade[i] = map[string]bool{}
					}
					w.degrade[i][s.phase] = true
				}
				w.mu.Unlock()
			}
		})
	}
	t.Cleanup(w.stop)
	return w
}

// mark starts a new phase of the test's answers.
func (w *readyzWatch) mark(phase string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.phase = phase
}

func (w *readyzWatch) stop() {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	w.wg.Wait()
}

// waitDegraded waits until replica i's /readyz has said degraded, with a
// nats detail, since the current phase began.
func (w *readyzWatch) waitDegraded(t *testing.T, i int, bound time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(bound); ; time.Sleep(50 * time.Millisecond) {
		w.mu.Lock()
		ok, last := w.degrade[i][w.phase], w.last[i]
		w.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d: /readyz not degraded after %s without a quorum; last %d %s %v", i, bound, last.code, last.body, last.err)
		}
	}
}

// waitReady waits until replica i's latest /readyz answer is ready.
func (w *readyzWatch) waitReady(t *testing.T, i int, bound time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(bound); ; time.Sleep(50 * time.Millisecond) {
		w.mu.Lock()
		last := w.last[i]
		w.mu.Unlock()
		if last.err == nil && last.code == http.StatusOK && strings.Contains(last.body, `"status":"ready"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d: /readyz not ready %s after the quorum came back; last %d %s %v", i, bound, last.code, last.body, last.err)
		}
	}
}

// check fails the test on any /readyz answer but 200: the replicas take
// claims and webhooks throughout, so a load balancer must keep them.
func (w *readyzWatch) check(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byPhase := map[string]int{}
	for _, s := range w.seen {
		byPhase[s.phase]++
		if s.err != nil {
			t.Logf("replica %d (%s): /readyz: %v", s.replica, s.phase, s.err) // a slow answer on a busy machine
			continue
		}
		if s.code != http.StatusOK {
			t.Errorf("replica %d (%s): /readyz answered %d %s", s.replica, s.phase, s.code, s.body)
		}
	}
	t.Logf("/readyz answers other than ready, by phase: %v", byPhase)
}
