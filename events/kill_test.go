package events_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// The relay's SIGKILL tests: a child process (this test binary, re-executed)
// runs what `reconciler serve` runs on one node — a bolt store, the
// embedded NATS server (natsserver.DefaultOptions) and the relay with a
// window and SyncedAfter — while writers commit two transitions per row
// (unknown, then succeeded) and print each one after its commit returned.
// The parent SIGKILLs the child at a chosen moment, restarts the store,
// the server and a relay on the same files, and checks that every
// committed event is on the stream exactly once (by Nats-Msg-Id) and each
// row's unknown before its succeeded.

const (
	killEnvDir   = "EVENTS_TEST_KILL_DIR"
	killEnvMode  = "EVENTS_TEST_KILL_MODE"
	killEnvRound = "EVENTS_TEST_KILL_ROUND"
	killTenant   = "acme"
	killWindow   = 64
	killWriters  = 16
	// killSyncedAfter is short so that deletes happen within a test; how
	// long the hold is does not matter to a SIGKILL (the page cache
	// survives it), only that records are held, then deleted in batches.
	killSyncedAfter = 200 * time.Millisecond
)

// Kill modes: the moment the parent kills the child.
const (
	// killMidWindow: killWindow publishes are on their way and none of
	// their PubAcks has reached the relay (the child withholds them).
	killMidWindow = "mid-window"
	// killAckedNotDeleted: records are acknowledged and held, and the
	// delete that should follow blocks.
	killAckedNotDeleted = "acked-not-deleted"
	// killDuringDelete: a batch delete (a bolt group commit) has started.
	killDuringDelete = "during-delete"
)

func TestRelaySurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv(killEnvDir); dir != "" {
		round, _ := strconv.Atoi(os.Getenv(killEnvRound))
		killChild(t, dir, os.Getenv(killEnvMode), round)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary; skipped with -short")
	}
	cases := []struct {
		mode   string
		rounds int
	}{
		{killMidWindow, 1},
		{killAckedNotDeleted, 1},
		{killDuringDelete, 4},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
			committed := map[string]bool{}
			for round := range tc.rounds {
				ids, signal := runKillChild(t, dir, tc.mode, round, rng)
				for _, id := range ids {
					committed[id] = true
				}
				t.Logf("round %d: killed at %q after %d commits", round, signal, len(ids))
			}
			verifyAfterKill(t, dir, committed)
		})
	}
}

// runKillChild runs one child until the moment of mode, SIGKILLs it, and
// returns the message ids it had committed and the line that triggered the
// kill.
func runKillChild(t *testing.T, dir, mode string, round int, rng *rand.Rand) ([]string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRelaySurvivesSIGKILL$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), killEnvDir+"="+dir, killEnvMode+"="+mode, killEnvRound+"="+strconv.Itoa(round))
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	signal := ""
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "COMMIT "); ok {
			ids = append(ids, id)
			continue
		}
		if signal == "" && strings.HasPrefix(line, "KILL ") && len(ids) >= 200 {
			signal = line
			if mode == killDuringDelete {
				// Somewhere in the delete's group commit, or just before or
				// after it: the rounds spread the moment.
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			}
			if err := cmd.Process.Kill(); err != nil { // SIGKILL on Unix
				t.Fatalf("kill: %v", err)
			}
		}
	}
	err = cmd.Wait()
	if signal == "" {
		t.Fatalf("child ended before its kill moment (%d commits): %v\n%s", len(ids), err, stderr.String())
	}
	return ids, signal
}

// verifyAfterKill restarts the store, the server and a relay on dir and
// checks the stream against the committed message ids.
func verifyAfterKill(t *testing.T, dir string, committed map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := bolt.Open(filepath.Join(dir, "reconciler.db"), bolt.Options{Policy: ledger.DefaultPolicy()})
	if err != nil {
		t.Fatalf("reopen store: %v", err)
	}
	defer st.Close()
	left, err := st.CountEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := natsserver.DefaultOptions(filepath.Join(dir, "nats"), nil)
	opts.Listen = "127.0.0.1:-1"
	srv, err := natsserver.Start(ctx, opts)
	if err != nil {
		t.Fatalf("restart nats: %v", err)
	}
	defer natstest.Shutdown(t, srv)
	js := natstest.Connect(t, srv.ClientURL())
	stream := natstest.EnsureStream(t, js)
	r, err := events.NewRelay(st, js, events.RelayOptions{Window: killWindow, SyncedAfter: killSyncedAfter, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 30*time.Second, "the outbox published and emptied", func() bool {
		n, err := st.CountEvents(ctx)
		return err == nil && n == 0
	})
	t.Logf("%d records were left in the outbox at the kill", left)

	seen := map[string]int{}
	order := map[string][]string{} // key → statuses in stream order
	for _, m := range streamMsgs(t, stream) {
		id := m.Header.Get(jetstream.MsgIDHeader)
		seen[id]++
		var ev ledger.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("decode %s: %v", id, err)
		}
		order[ev.Key] = append(order[ev.Key], ev.Status)
	}
	missing := 0
	for id := range committed {
		if seen[id] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("committed event %s is not on the stream", id)
			}
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s is on the stream %d times", id, n)
		}
	}
	for key, got := range order {
		if s := strings.Join(got, ","); s != "unknown" && s != "unknown,succeeded" {
			t.Errorf("row %s: stream order %s, want unknown before succeeded", key, s)
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d committed events lost", missing, len(committed))
	}
	t.Logf("all %d committed events on the stream once (it holds %d)", len(committed), len(seen))
}

// killChild is the child: store, server, relay and writers until killed.
// It prints "COMMIT <msg id>" after each commit and "KILL <what>" at the
// moment of mode.
func killChild(t *testing.T, dir, mode string, round int) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(dir, "reconciler.db"), bolt.Options{Policy: ledger.DefaultPolicy()})
	if err != nil {
		t.Fatalf("child store: %v", err)
	}
	opts := natsserver.DefaultOptions(filepath.Join(dir, "nats"), nil)
	opts.Listen = "127.0.0.1:-1"
	srv, err := natsserver.Start(ctx, opts)
	if err != nil {
		t.Fatalf("child nats: %v", err)
	}
	_, js, err := events.Connect(srv.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	var out lineWriter
	var commits atomic.Int64
	var pub events.Publisher = js
	var box events.Outbox = st
	switch mode {
	case killMidWindow:
		pub = &withholdingPublisher{js: js, after: 300, out: &out}
	case killAckedNotDeleted:
		box = &stallingOutbox{Store: st, out: &out, ready: func() bool { return commits.Load() >= 300 }}
	case killDuringDelete:
		box = &announcingOutbox{Store: st, out: &out, ready: func() bool { return commits.Load() >= 300 }}
	default:
		t.Fatalf("child: mode %q", mode)
	}
	r, err := events.NewRelay(box, pub, events.RelayOptions{Window: killWindow, SyncedAfter: killSyncedAfter, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }() // until SIGKILL
	var wg sync.WaitGroup
	for w := range killWriters {
		wg.Go(func() {
			for i := 0; i < 1_000_000; i++ {
				for _, id := range commitRow(t, st, round, w, i) {
					out.line("COMMIT " + id)
					commits.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Fatal("child: the writers finished before the kill")
}

// commitRow claims a row, reports a timeout (unknown) and applies a
// webhook's success, and returns the message ids of the two events.
func commitRow(t *testing.T, st *bolt.Store, round, w, i int) []string {
	ctx := context.Background()
	now := time.Now().UTC()
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: killTenant, RunID: fmt.Sprintf("run-%d-%d", round, w), Tool: "stripe.payment_intents.create",
		ToolCallID: fmt.Sprintf("call_%d", i), Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(fmt.Sprintf(`{"round":%d,"w":%d,"i":%d}`, round, w, i)), ReplayWindow: time.Hour,
	}, ledger.DefaultPolicy(), now)
	if err != nil {
		t.Fatalf("child claim: %v", err)
	}
	res, err := st.Claim(ctx, c)
	if err != nil {
		t.Fatalf("child claim: %v", err)
	}
	key := res.Row.Key
	if _, _, err := st.Report(ctx, killTenant, key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: now}); err != nil {
		t.Fatalf("child report: %v", err)
	}
	unknown := killTenant + ":" + key + ":unknown"
	if _, _, err := st.Apply(ctx, killTenant, key, ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded,
		ReceiptID: "pi_" + key[:8], VendorEventID: fmt.Sprintf("evt_%d_%d_%d", round, w, i), At: now}); err != nil {
		t.Fatalf("child apply: %v", err)
	}
	return []string{unknown, killTenant + ":" + key + ":succeeded"}
}

// lineWriter writes whole lines to stdout, one write each, so the parent
// never reads a line the child had not finished.
type lineWriter struct{ mu sync.Mutex }

func (w *lineWriter) line(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = os.Stdout.WriteString(s + "\n")
}

// withholdingPublisher publishes every message, and after the first after
// delivers no more PubAcks to the relay; once the relay has a full window
// waiting it says KILL.
type withholdingPublisher struct {
	js    jetstream.JetStream
	after int
	out   *lineWriter
	n     atomic.Int64
	once  sync.Once
}

func (p *withholdingPublisher) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	n := p.n.Add(1)
	f, err := p.js.PublishMsgAsync(m, opts...)
	if err != nil || n <= int64(p.after) {
		return f, err
	}
	if n == int64(p.after)+killWindow {
		// The relay sends no more than a window without PubAcks.
		p.once.Do(func() { p.out.line(fmt.Sprintf("KILL %d publishes without a PubAck", killWindow)) })
	}
	return doneFuture{msg: m}, nil // never resolved
}

// stallingOutbox deletes nothing once ready: the relay's records are
// acknowledged and held, and stay so.
type stallingOutbox struct {
	*bolt.Store
	out   *lineWriter
	ready func() bool
	once  sync.Once
}

func (o *stallingOutbox) AckEvents(ctx context.Context, seqs ...uint64) error {
	if !o.ready() {
		return o.Store.AckEvents(ctx, seqs...)
	}
	o.once.Do(func() { o.out.line(fmt.Sprintf("KILL %d acknowledged records not deleted", len(seqs))) })
	select {} // until SIGKILL
}

// announcingOutbox says KILL as a batch delete starts, once ready.
type announcingOutbox struct {
	*bolt.Store
	out   *lineWriter
	ready func() bool
	once  sync.Once
}

func (o *announcingOutbox) AckEvents(ctx context.Context, seqs ...uint64) error {
	if o.ready() {
		o.once.Do(func() { o.out.line(fmt.Sprintf("KILL deleting %d records", len(seqs))) })
	}
	return o.Store.AckEvents(ctx, seqs...)
}
