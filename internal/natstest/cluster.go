package natstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// nodeEnv names the config file a re-executed test binary runs as a
// cluster node (RunNodeIfAsked).
const nodeEnv = "RECONCILER_NATSTEST_NODE"

// RunNodeIfAsked runs this process as one node of a Cluster, and exits,
// when the Cluster started it; otherwise it returns at once. A test
// package that starts a Cluster calls it first thing in its TestMain: the
// nodes are the test binary itself, re-executed, so a node is a process
// the test can SIGKILL (a node lost, not a server shut down politely), on
// the nats-server version go.mod pins, with no binary to install.
func RunNodeIfAsked() {
	cfg := os.Getenv(nodeEnv)
	if cfg == "" {
		return
	}
	opts, err := server.ProcessConfigFile(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "natstest node: %v\n", err)
		os.Exit(2)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "natstest node: %v\n", err)
		os.Exit(2)
	}
	s.ConfigureLogger()
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "natstest node: not ready for connections after 30s")
		os.Exit(2)
	}
	// SIGTERM is the cluster's orderly stop (the test's end); SIGKILL, the
	// fault, needs no handler.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
	os.Exit(0)
}

// Cluster is a three-or-more node NATS cluster with JetStream, each node
// a process of its own (RunNodeIfAsked) on fixed loopback ports with its
// store in a temporary directory, so a node can be killed and started
// again where it was. The nodes are open (no users): loopback only.
type Cluster struct {
	tb    testing.TB
	name  string
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	name                  string
	clientPort, routePort int
	dir, config, log      string
	cmd                   *exec.Cmd
	done                  chan struct{} // closed when cmd has exited
	exitErr               error         // set before done closes
}

// StartCluster starts n nodes (at least 3, for a quorum to survive one
// loss) and waits until JetStream has a meta leader. The nodes are
// SIGKILLed when the test ends. A test package that calls it must call
// RunNodeIfAsked from its TestMain.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	if n < 3 {
		tb.Fatalf("natstest: a cluster of %d nodes; at least 3", n)
	}
	c := &Cluster{tb: tb, name: fmt.Sprintf("rt%d", time.Now().UnixNano()%1e6)}
	dir := tb.TempDir()
	routes := make([]string, n)
	for i := range n {
		nd := &clusterNode{
			name: fmt.Sprintf("n%d", i), clientPort: freeTCPPort(tb), routePort: freeTCPPort(tb),
			dir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
		}
		nd.config = filepath.Join(nd.dir, "nats.conf")
		nd.log = filepath.Join(nd.dir, "nats.log")
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", nd.routePort)
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := os.MkdirAll(filepath.Join(nd.dir, "js"), 0o700); err != nil {
			tb.Fatal(err)
		}
		conf := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%d"
jetstream { store_dir: %q }
cluster {
  name: %s
  listen: "127.0.0.1:%d"
  routes: [%s]
}
`, nd.name, nd.clientPort, filepath.Join(nd.dir, "js"), c.name, nd.routePort, strings.Join(routes, ", "))
		if err := os.WriteFile(nd.config, []byte(conf), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(c.killAll)
	for i := range c.nodes {
		c.Start(i)
	}
	c.WaitJetStream(60 * time.Second)
	return c
}

// freeTCPPort is a loopback port nobody listens on right now; a node keeps
// its ports across restarts, so they are chosen once, up front.
func freeTCPPort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// URLs are the nodes' client URLs, comma-separated, as the service's
// nats_url takes them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", nd.clientPort)
	}
	return strings.Join(urls, ",")
}

// Name is node i's server name (what a stream's cluster info names).
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Index is the index of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// Start starts node i (again, after Kill), on its ports and its store,
// and waits until it accepts client connections.
func (c *Cluster) Start(i int) {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[i]
	if nd.cmd != nil {
		select {
		case <-nd.done:
		default:
			c.tb.Fatalf("natstest: node %s is running", nd.name)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		c.tb.Fatal(err)
	}
	logf, err := os.OpenFile(nd.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+nd.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A node must not outlive a test binary that died without its
	// cleanups (a timeout's panic).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.tb.Fatalf("natstest: start node %s: %v", nd.name, err)
	}
	nd.cmd, nd.done = cmd, make(chan struct{})
	go func(nd *clusterNode, done chan struct{}) { // owner: the node; ends when its process does
		nd.exitErr = cmd.Wait()
		logf.Close()
		close(done)
	}(nd, nd.done)
	addr := fmt.Sprintf("127.0.0.1:%d", nd.clientPort)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-nd.done:
			c.tb.Fatalf("natstest: node %s exited at start: %v\n%s", nd.name, nd.exitErr, TailFile(nd.log))
		default:
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("natstest: node %s does not accept connections after 60s\n%s", nd.name, TailFile(nd.log))
		}
	}
}

// Kill SIGKILLs node i and waits until it is gone: its store keeps what
// the process had written, as after a crash.
func (c *Cluster) Kill(i int) {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[i]
	if nd.cmd == nil {
		c.tb.Fatalf("natstest: node %s never started", nd.name)
	}
	_ = nd.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-nd.done:
	case <-time.After(20 * time.Second):
		c.tb.Fatalf("natstest: node %s survived SIGKILL", nd.name)
	}
}

// WaitJetStream waits up to bound until the cluster answers a JetStream
// request (it has a meta leader), failing the test otherwise.
func (c *Cluster) WaitJetStream(bound time.Duration) {
	c.tb.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		c.tb.Fatalf("natstest: connect to the cluster: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.tb.Fatal(err)
	}
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("natstest: no JetStream in the cluster after %s: %v", bound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log is the end of node i's log, for a failure message.
func (c *Cluster) Log(i int) string { return TailFile(c.nodes[i].log) }

// killAll SIGKILLs every live node (the test is over; nothing to keep).
func (c *Cluster) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		_ = nd.cmd.Process.Signal(syscall.SIGKILL)
		<-nd.done
	}
	if c.tb.Failed() {
		for _, nd := range c.nodes {
			c.tb.Logf("log of NATS node %s:\n%s", nd.name, TailFile(nd.log))
		}
	}
}

// TailFile is the last few KiB of a log file, for failure messages (a
// node's here, a replica's in e2e/replicas).
func TailFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const n = 4000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
