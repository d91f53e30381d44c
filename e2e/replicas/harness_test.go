package replicas

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
)

const (
	envNATS      = "RECONCILER_TEST_NATS_URL"
	defaultNATS  = "nats://127.0.0.1:4222"
	token        = "rt-tenant-token-0123456789abcdef"
	adminToken   = "rt-admin-token-0123456789abcdef"
	stripeSecret = "whsec_rt_0123456789abcdef"
	tenant       = "acme"
)

// configYAML is the replicas' config file: one tenant, its token, one
// Stripe endpoint; the secrets come from the environment.
const configYAML = `tenants:
  - id: acme
    tokens: ["${RT_TOKEN}"]
admin_tokens: ["${RT_ADMIN}"]
stripe:
  endpoints:
    - name: default
      tenant: acme
      secrets: ["${RT_STRIPE_SECRET}"]
`

// natsURL is the NATS the replicas share.
func natsURL() string {
	if u := os.Getenv(envNATS); u != "" {
		return u
	}
	return defaultNATS
}

// skipUnlessReplicas skips a test that needs PostgreSQL, NATS and seconds.
func skipUnlessReplicas(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("multi-process test: skipped with -short")
	}
	return pgtest.BaseURL(tb)
}

// build builds ./cmd/reconciler into dir; sharedBinary builds it once.
func build(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(dir, "reconciler")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/agentledger/reconciler/cmd/reconciler")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// freePort returns a loopback port nobody listens on right now. The
// replicas need known ports (a restart keeps its address); the window in
// which another process could take it is accepted in a test.
func freePort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cluster is a set of `reconciler serve` processes over one database.
type cluster struct {
	tb             testing.TB
	bin, dir, cfg  string
	storeURL       string
	stream, prefix string
	stripeURL      string
	extraArgs      []string
	// nats is the replicas' --nats-url (natsURL() unless set), and
	// syncedAfter their --events-synced-after.
	nats, syncedAfter   string
	mu                  sync.Mutex
	replicas            []*replica
	generation          []int
	resolverIntervalArg string
}

// replica is one process; done receives its exit once.
type replica struct {
	idx, gen int
	addr     string
	log      string
	cmd      *exec.Cmd
	done     chan struct{}
	err      error // set before done closes
}

// id names the process to the fake Stripe: each process gets its own API
// key, so a lookup tells which process (and which life of it) made it.
func (r *replica) id() string { return fmt.Sprintf("r%d_g%d", r.idx, r.gen) }

func newCluster(tb testing.TB, bin, storeURL, stream, prefix, stripeURL string, n int) *cluster {
	tb.Helper()
	dir := tb.TempDir()
	cfg := filepath.Join(dir, "reconciler.yaml")
	if err := os.WriteFile(cfg, []byte(configYAML), 0o600); err != nil {
		tb.Fatal(err)
	}
	c := &cluster{
		tb: tb, bin: bin, dir: dir, cfg: cfg, storeURL: storeURL, stream: stream, prefix: prefix,
		stripeURL: stripeURL, replicas: make([]*replica, n), generation: make([]int, n),
		resolverIntervalArg: "1s", nats: natsURL(), syncedAfter: "1s",
	}
	for i := range n {
		c.replicas[i] = &replica{idx: i, addr: freePort(tb)}
	}
	tb.Cleanup(c.stopAll)
	return c
}

// env is the replicas' environment: this process's, without any
// RECONCILER_ setting that could leak in, plus the secrets.
func (c *cluster) env(r *replica) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RECONCILER_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"RT_TOKEN="+token, "RT_ADMIN="+adminToken, "RT_STRIPE_SECRET="+stripeSecret,
		"RECONCILER_STORE="+c.storeURL,
		"RECONCILER_STRIPE_API_KEY=sk_test_"+r.id(),
	)
}

// start starts replica i (a new life of it) and waits until it is ready.
func (c *cluster) start(i int) {
	c.tb.Helper()
	c.mu.Lock()
	c.generation[i]++
	r := &replica{idx: i, gen: c.generation[i], addr: c.replicas[i].addr}
	c.replicas[i] = r
	c.mu.Unlock()
	r.log = filepath.Join(c.dir, r.id()+".log")
	logf, err := os.Create(r.log)
	if err != nil {
		c.tb.Fatal(err)
	}
	args := []string{"serve", "--config", c.cfg,
		"--data", filepath.Join(c.dir, fmt.Sprintf("data%d", i)),
		"--http", r.addr,
		"--nats-url", c.nats,
		"--events-stream", c.stream, "--events-subject-prefix", c.prefix,
		"--resolver-interval", c.resolverIntervalArg, "--resolver-grace", "500ms",
		// The machine's NATS is one server whose sync policy the suite does
		// not know, and it kills replicas, not that server: a short hold
		// lets the outbox empty within the test (auto would hold each
		// record 2m30s on a one-replica stream).
		"--events-synced-after", c.syncedAfter,
		"--log-level", "warn",
	}
	if c.stripeURL != "" {
		args = append(args, "--stripe-api-base", c.stripeURL, "--stripe-search-lag", "1s")
	}
	args = append(args, c.extraArgs...)
	r.cmd = exec.Command(c.bin, args...)
	r.cmd.Env = c.env(r)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		c.tb.Fatalf("start %s: %v", r.id(), err)
	}
	r.done = make(chan struct{})
	go func() { // owner: the replica; exits when the process does
		r.err = r.cmd.Wait()
		logf.Close()
		close(r.done)
	}()
	c.waitReady(r)
}

// waitReady polls /readyz until it answers 200; a process that exits
// first fails the test with its log.
func (c *cluster) waitReady(r *replica) {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-r.done:
			c.tb.Fatalf("%s exited before it was ready: %v\n%s", r.id(), r.err, natstest.TailFile(r.log))
		default:
		}
		resp, err := http.Get("http://" + r.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("%s not ready after 30s (last: %v)\n%s", r.id(), err, natstest.TailFile(r.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs replica i and waits for it to be gone.
func (c *cluster) kill(i int) *replica {
	c.tb.Helper()
	r := c.replica(i)
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.tb.Fatalf("kill %s: %v", r.id(), err)
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		c.tb.Fatalf("%s survived SIGKILL", r.id())
	}
	return r
}

func (c *cluster) replica(i int) *replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replicas[i]
}

// addrs are the replicas' HTTP addresses (fixed for the cluster's life).
func (c *cluster) addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.replicas))
	for i, r := range c.replicas {
		out[i] = r.addr
	}
	return out
}

// stopAll stops every live replica with SIGTERM (the graceful path), and
// SIGKILLs one that does not stop in time.
func (c *cluster) stopAll() {
	c.mu.Lock()
	rs := append([]*replica(nil), c.replicas...)
	c.mu.Unlock()
	for _, r := range rs {
		if r.cmd == nil {
			continue
		}
		select {
		case <-r.done:
			continue
		default:
		}
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, r := range rs {
		if r.cmd == nil {
			continue
		}
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			c.tb.Errorf("%s did not stop on SIGTERM; killing it", r.id())
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if c.tb.Failed() {
			c.tb.Logf("log of %s:\n%s", r.id(), natstest.TailFile(r.log))
		}
	}
}

// client is the load program's HTTP client: it fails over to the next
// replica on a transport error or a 5xx, as a load balancer would.
type client struct {
	hc    *http.Client
	addrs []string
}

func newClient(addrs []string) *client {
	return &client{
		hc:    &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		addrs: addrs,
	}
}

// errAllFailed means every replica was tried, more than once.
var errAllFailed = errors.New("no replica answered")

// do sends one request, starting at replica first; it returns the status,
// the body and the replica that answered.
func (c *client) do(ctx context.Context, first int, method, path string, header http.Header, body []byte) (int, []byte, int, error) {
	var last error
	for try := range 6 * len(c.addrs) {
		i := (first + try) % len(c.addrs)
		if try > 0 && i == first {
			// A full round failed: the killed replica's peers may be busy
			// too; give them a moment, as a vendor's retry schedule would.
			select {
			case <-ctx.Done():
				return 0, nil, i, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://"+c.addrs[i]+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, i, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		if resp.StatusCode >= 500 {
			last = fmt.Errorf("%s %s on %s: %d %s", method, path, c.addrs[i], resp.StatusCode, b)
			continue
		}
		return resp.StatusCode, b, i, nil
	}
	return 0, nil, 0, fmt.Errorf("%w: %w", errAllFailed, last)
}

// api sends an authenticated JSON request to the tenant API.
func (c *client) api(ctx context.Context, first int, method, path string, body string) (int, []byte, error) {
	h := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
	code, b, _, err := c.do(ctx, first, method, path, h, []byte(body))
	return code, b, err
}

// rowOf decodes the row of a claim, outcome or row answer.
func rowOf(body []byte) (ledger.Row, error) {
	var v struct {
		Row *ledger.Row `json:"row"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return ledger.Row{}, fmt.Errorf("decode %s: %w", body, err)
	}
	if v.Row == nil {
		return ledger.Row{}, fmt.Errorf("no row in %s", body)
	}
	return *v.Row, nil
}
