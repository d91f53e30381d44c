package replicas

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/ledger"
)

// privatePG is a PostgreSQL server of the test's own (initdb and pg_ctl in
// a temporary directory), which the test may stop and start. Run as root,
// its commands run as the postgres user: initdb and pg_ctl refuse root.
type privatePG struct {
	tb        testing.TB
	bin, dir  string
	port      int
	cred      *syscall.Credential
	startedAt []time.Time
}

// pgBinDir finds Debian's PostgreSQL binaries, newest major first.
func pgBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d
		}
	}
	return ""
}

func startPrivatePG(tb testing.TB) *privatePG {
	tb.Helper()
	bin := pgBinDir()
	if bin == "" {
		tb.Skip("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin: apt-get install postgresql")
	}
	dir, err := os.MkdirTemp("", "reconciler-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &privatePG{tb: tb, bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Skipf("running as root and there is no postgres user to run initdb as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p.run("initdb", "-D", p.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	p.start()
	tb.Cleanup(func() { p.stop("immediate") })
	return p
}

func (p *privatePG) data() string { return filepath.Join(p.dir, "data") }

// URL is the server's connection URL (its default database).
func (p *privatePG) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *privatePG) run(name string, args ...string) {
	p.tb.Helper()
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		p.tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// start starts the server and waits until it accepts connections.
// synchronous_commit stays on: an acknowledged claim is a flushed commit.
func (p *privatePG) start() {
	p.tb.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c synchronous_commit=on", p.port, p.dir)
	p.run("pg_ctl", "-D", p.data(), "-l", filepath.Join(p.dir, "server.log"), "-o", opts, "-w", "-t", "60", "start")
	p.startedAt = append(p.startedAt, time.Now())
}

// stop stops the server with pg_ctl's shutdown mode: fast (sessions
// terminated, a clean checkpoint) or immediate (a crash: recovery on the
// next start).
func (p *privatePG) stop(mode string) {
	p.tb.Helper()
	cmd := exec.Command(filepath.Join(p.bin, "pg_ctl"), "-D", p.data(), "-m", mode, "-w", "-t", "60", "stop")
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	_ = cmd.Run() // cleanup after a stop finds none running
}

// ack is an acknowledged first claim of a new intent: its answer, and
// whether a signed webhook that settles it was acknowledged too.
type ack struct {
	key          string
	attempt      int
	pendingUntil time.Time
	firstSeen    time.Time
	webhooked    bool
}

// TestDatabaseRestartUnderLoad runs three replicas on a private PostgreSQL
// and stops the database mid-load, once with pg_ctl -m immediate (a crash)
// and once with -m fast, starting it again each time. Sixteen clients
// claim new intents throughout, each claim with its own Idempotency-Key,
// resent (to the next replica) on a transport error or a 5xx as the
// clients do. While the database is down the replicas answer 503 with
// Retry-After (the fast stop lasts past the store's retry time), never
// 500; they reconnect by themselves; no first claim of
// a new intent is ever answered wait (a COMMIT whose answer was lost is
// read back, never re-run, and a resend gets its lease back); every
// acknowledged claim reads back unchanged; every acknowledged webhook's
// event is published exactly once.
func TestDatabaseRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	pg := startPrivatePG(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	bin := sharedBinary(t)
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	stream, prefix := "RT_"+strings.ToUpper(run), "rt"+run
	js := natsJS(t, stream)
	stripe := fakestripe.New(t, fakestripe.Options{}) // the resolvers look, and find nothing
	c := newCluster(t, bin, pg.URL(), stream, prefix, stripe.URL(), 3)
	for i := range 3 {
		c.start(i)
	}
	t.Logf("three replicas on a private PostgreSQL ready after %s", time.Since(start).Round(time.Millisecond))
	addrs := c.addrs()
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	var (
		mu       sync.Mutex
		acks     []ack
		statuses = map[int]int{}
		n        atomic.Int64
		resent   atomic.Int64 // keyless claims answered wait after a resend
		stopLoad = make(chan struct{})
	)
	// webhook delivers the signed payment_intent.succeeded of a claimed
	// row until a replica acknowledges it (2xx); a 500 fails the test.
	webhook := func(client, i int, localID string) error {
		payload := fixtures.Load("stripe/2024-06-20/payment_intent.succeeded")
		var err error
		for _, kv := range [][2]string{
			{"metadata_local_id", localID}, {"id", fmt.Sprintf("evt_pg_%s_%d_%d", run, client, i)}, {"data.object.id", receiptFor(localID)},
		} {
			if payload, err = fixtures.Set(payload, kv[0], kv[1]); err != nil {
				return err
			}
		}
		for try := 0; ; try++ {
			if ctx.Err() != nil {
				return fmt.Errorf("webhook c%d_%d: %w", client, i, ctx.Err())
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addrs[(client+try)%len(addrs)]+"/webhooks/stripe", bytes.NewReader(payload))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Stripe-Signature", fixtures.SignStripe(payload, time.Now(), stripeSecret))
			resp, err := hc.Do(req)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
			switch {
			case resp.StatusCode/100 == 2:
				return nil
			case resp.StatusCode == http.StatusInternalServerError:
				return fmt.Errorf("webhook c%d_%d: 500 %s", client, i, data)
			case resp.StatusCode >= 500:
				time.Sleep(100 * time.Millisecond)
			default:
				return fmt.Errorf("webhook c%d_%d: %d %s", client, i, resp.StatusCode, data)
			}
		}
	}
	// claim sends one logical claim until a replica answers it with a
	// decision; it records every status it saw. Odd clients send an
	// Idempotency-Key (the same on every resend); even ones send none, so
	// only the store stands between a lost COMMIT answer and a wrong one:
	// their first send, answered, must be proceed too (after a resend,
	// without a key, wait on the row the first send made is the rule).
	claim := func(client, i int) error {
		keyed := client%2 == 1
		body := fmt.Sprintf(`{"run_id":"run_%s","tool":"stripe.payment_intents.create","tool_call_id":"c%d_%d","vendor":"stripe",`+
			`"tool_class":"write_idempotent","intent":{"amount":%d,"currency":"usd","client":%d}}`, run, client, i, 100+i, client)
		idem := make([]byte, 16)
		_, _ = rand.Read(idem)
		for try := 0; ; try++ {
			if ctx.Err() != nil {
				return fmt.Errorf("claim c%d_%d: %w", client, i, ctx.Err())
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addrs[(client+try)%len(addrs)]+"/v1/claims", bytes.NewReader([]byte(body)))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			if keyed {
				req.Header.Set("Idempotency-Key", hex.EncodeToString(idem))
			}
			resp, err := hc.Do(req)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			data, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
			switch {
			case rerr != nil:
				continue
			case resp.StatusCode == http.StatusInternalServerError:
				return fmt.Errorf("claim c%d_%d: 500 %s", client, i, data)
			case resp.StatusCode == http.StatusServiceUnavailable:
				if resp.Header.Get("Retry-After") == "" {
					return fmt.Errorf("claim c%d_%d: 503 without Retry-After", client, i)
				}
				time.Sleep(100 * time.Millisecond)
				continue
			case resp.StatusCode >= 500, resp.StatusCode == http.StatusConflict && bytes.Contains(data, []byte("idempotency_key_in_flight")):
				time.Sleep(50 * time.Millisecond)
				continue
			}
			var out struct {
				Decision ledger.Decision `json:"decision"`
				Row      *ledger.Row     `json:"row"`
			}
			if err := json.Unmarshal(data, &out); err != nil || out.Row == nil {
				return fmt.Errorf("claim c%d_%d: %d %s", client, i, resp.StatusCode, data)
			}
			if !keyed && try > 0 && out.Decision == ledger.DecisionWait {
				resent.Add(1)
				return nil // its first send committed and its answer was lost: no key, no proof
			}
			if out.Decision != ledger.DecisionProceed || resp.StatusCode != http.StatusCreated || out.Row.Attempt != 1 {
				return fmt.Errorf("first claim of a new intent c%d_%d answered %d %s at attempt %d, want 201 proceed at attempt 1 (after %d sends)",
					client, i, resp.StatusCode, out.Decision, out.Row.Attempt, try+1)
			}
			a := ack{key: out.Row.Key, attempt: out.Row.Attempt, pendingUntil: out.Row.PendingUntil, firstSeen: out.Row.FirstSeenAt}
			if client < 4 {
				// Four clients also deliver the vendor's signed webhook
				// for each key, through the restarts.
				if err := webhook(client, i, out.Row.MetadataLocalID); err != nil {
					return err
				}
				a.webhooked = true
			}
			mu.Lock()
			acks = append(acks, a)
			mu.Unlock()
			n.Add(1)
			return nil
		}
	}
	var wg sync.WaitGroup
	var once sync.Once
	// stop ends the load and waits for it: on every path, so no client
	// reports after the test returned.
	stop := func() {
		once.Do(func() { close(stopLoad) })
		wg.Wait()
	}
	defer stop()
	defer cancel() // runs first: a claim still resending gives up
	for client := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				if err := claim(client, i); err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
			}
		})
	}
	waitFor := func(what string, more int64) {
		t.Helper()
		target := n.Load() + more
		for n.Load() < target {
			if ctx.Err() != nil || t.Failed() {
				t.Fatalf("waiting for %s: %d of %d claims acknowledged: %v", what, n.Load(), target, ctx.Err())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The fast stop stays down past the store's retry time (10 s), so
	// claims in flight are answered 503 and resent.
	for _, phase := range []struct {
		mode string
		down time.Duration
	}{{"immediate", 500 * time.Millisecond}, {"fast", 12 * time.Second}} {
		mode := phase.mode
		waitFor("load before the "+mode+" stop", 200)
		before := n.Load()
		stopAt := time.Now()
		pg.stop(mode)
		down := time.Since(stopAt)
		time.Sleep(phase.down)
		pg.start()
		t.Logf("pg_ctl stop -m %s after %d claims (stop took %s), started again after %s", mode, before, down.Round(time.Millisecond), time.Since(stopAt).Round(time.Millisecond))
		waitFor("the replicas to reconnect after -m "+mode, 200)
		t.Logf("the replicas served 200 more claims %s after the restart", time.Since(pg.startedAt[len(pg.startedAt)-1]).Round(time.Millisecond))
	}
	stop()
	if t.Failed() {
		return
	}
	mu.Lock()
	t.Logf("%d claims acknowledged; statuses seen %v; %d keyless claims answered wait after a resend; %s",
		len(acks), statuses, resent.Load(), time.Since(start).Round(time.Millisecond))
	if statuses[http.StatusServiceUnavailable] == 0 {
		t.Error("no 503 was seen while the database was down for 12 s")
	}
	mu.Unlock()

	// Every acknowledged claim reads back unchanged: the same attempt, the
	// same lease, the same first_seen_at — nothing acknowledged was lost
	// or re-run.
	for i, a := range acks {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addrs[i%len(addrs)]+"/v1/claims/"+a.key, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		row, err := rowOf(data)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("read back %s: %d %s %v", a.key, resp.StatusCode, data, err)
		}
		if a.webhooked {
			if row.Status != ledger.StatusSucceeded || row.Attempt != a.attempt || !row.FirstSeenAt.Equal(a.firstSeen) {
				t.Errorf("acknowledged claim %s with an acknowledged webhook: %s attempt %d first seen %s; want succeeded at attempt %d, first seen %s",
					a.key, row.Status, row.Attempt, row.FirstSeenAt, a.attempt, a.firstSeen)
			}
			continue
		}
		if row.Status != ledger.StatusPending || row.Attempt != a.attempt || !row.PendingUntil.Equal(a.pendingUntil) || !row.FirstSeenAt.Equal(a.firstSeen) {
			t.Errorf("acknowledged claim %s changed: %s attempt %d until %s first seen %s; acknowledged attempt %d until %s first seen %s",
				a.key, row.Status, row.Attempt, row.PendingUntil, row.FirstSeenAt, a.attempt, a.pendingUntil, a.firstSeen)
		}
	}

	// Every acknowledged webhook's event is published exactly once: the
	// outbox drains, and the stream holds one succeeded event per key
	// (and no message id twice).
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d outbox records left after 60 s", left)
		}
	}
	succeeded := map[string]int{}
	perID := map[string]int{}
	for _, m := range streamMessages(t, ctx, js, stream) {
		perID[m.Header.Get(jetstream.MsgIDHeader)]++
		var ev ledger.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("decode event: %v", err)
		}
		if ev.Status == string(ledger.StatusSucceeded) {
			succeeded[ev.Key]++
		}
	}
	for id, k := range perID {
		if k != 1 {
			t.Errorf("message id %s published %d times", id, k)
		}
	}
	webhooked := 0
	for _, a := range acks {
		if a.webhooked {
			webhooked++
			if succeeded[a.key] != 1 {
				t.Errorf("key %s: %d succeeded events for its acknowledged webhook, want 1", a.key, succeeded[a.key])
			}
		}
	}
	t.Logf("%d acknowledged webhooks, each published once", webhooked)
}
