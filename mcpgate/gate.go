package mcpgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// Defaults of a Gate.
const (
	// DefaultCallTimeout bounds one upstream tools/call. A write that runs
	// past it is reported as a timeout: its row becomes unknown.
	DefaultCallTimeout = 60 * time.Second
	// DefaultReportTimeout bounds an outcome report with its retries. It
	// runs even when the caller gave up: the call that used its time up is
	// exactly the one whose outcome the ledger must learn.
	DefaultReportTimeout = 30 * time.Second
	// syncTimeout bounds a refresh of the tool list started by the
	// upstream's list_changed notification.
	syncTimeout = 30 * time.Second
)

// Options configure a Gate. Ledger is required.
type Options struct {
	// Ledger is the claim API with a tenant token: the gate claims,
	// reports and reads the tenant's tool registry through it.
	Ledger *client.Client
	// RunID is the run_id of a call whose _meta names none
	// ("reconciler/run_id"). Empty: one per gate, "mcp-" and 16 hex
	// digits, so the calls of one session share a run and a retry within
	// it finds its key.
	RunID string
	// CallTimeout bounds each upstream call (default DefaultCallTimeout).
	CallTimeout time.Duration
	// ReportTimeout bounds each outcome report (default DefaultReportTimeout).
	ReportTimeout time.Duration
	// Strict refuses a call of a tool the registry does not know, instead of
	// passing it through unclaimed.
	Strict bool
	// Version is the gate's version in its MCP implementation info.
	Version string
	// Logger receives decisions and failures (default: discard). Arguments
	// and results are never logged: they may hold personal data.
	Logger *slog.Logger
}

// Gate is an MCP server in front of one upstream MCP server. Build it with
// New, connect the upstream with Open, serve one client session with
// Serve, and release the upstream with Close.
type Gate struct {
	ledger        *client.Client
	runID         string
	callTimeout   time.Duration
	reportTimeout time.Duration
	strict        bool
	version       string
	log           *slog.Logger

	// ctx ends with Close: it bounds the refreshes the upstream's
	// notifications start, whose goroutines wg counts.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	upstream *mcp.ClientSession
	// upstreamDone is closed when the upstream session ends.
	upstreamDone chan struct{}
	server       *mcp.Server

	// unanswered counts the client's requests read and not yet answered on
	// the wire (wire.go), so a session the upstream ended still delivers
	// the results of its calls in flight before it closes: the SDK drops
	// the answers of a session closed under them.
	unansweredMu sync.Mutex
	unanswered   int
	answered     chan struct{} // closed and replaced when unanswered falls to 0

	// syncMu serialises refreshes of the listed tools; listed holds each
	// listed tool's JSON, so a refresh changes (and announces) only what
	// changed.
	syncMu sync.Mutex
	listed map[string]string
}

// New returns a gate that is not connected to its upstream yet.
func New(o Options) (*Gate, error) {
	if o.Ledger == nil {
		return nil, errors.New("mcpgate: options: a Ledger client is required")
	}
	if o.CallTimeout < 0 || o.ReportTimeout < 0 {
		return nil, errors.New("mcpgate: options: negative timeout")
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.ReportTimeout == 0 {
		o.ReportTimeout = DefaultReportTimeout
	}
	if o.RunID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b) // crypto/rand.Read never fails
		o.RunID = "mcp-" + hex.EncodeToString(b)
	}
	if err := ledger.ValidateRunID(o.RunID); err != nil {
		return nil, fmt.Errorf("mcpgate: options: run id %q: %w", o.RunID, err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Gate{
		ledger: o.Ledger, runID: o.RunID, callTimeout: o.CallTimeout, reportTimeout: o.ReportTimeout,
		strict: o.Strict, version: o.Version, log: o.Logger,
		ctx: ctx, cancel: cancel, upstreamDone: make(chan struct{}), listed: map[string]string{},
		answered: make(chan struct{}),
	}, nil
}

// ErrUpstreamEnded is Serve's error when the upstream MCP server ended its
// session (its process exited, its HTTP session was lost).
var ErrUpstreamEnded = errors.New("mcpgate: the upstream MCP server ended the session")

// RunID is the run_id of calls whose _meta names none.
func (g *Gate) RunID() string { return g.runID }

// Open connects to the upstream over t (an mcp.CommandTransport for a
// command, an mcp.StreamableClientTransport for a URL) and lists its tools
// as the gate will serve them. It fails when the upstream cannot be reached
// or the ledger's tool registry cannot be read: without the registry the
// gate cannot tell a read from a write. Call it once.
func (g *Gate) Open(ctx context.Context, t mcp.Transport) error {
	c := mcp.NewClient(&mcp.Implementation{Name: "reconciler-mcp-gate", Version: g.version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { g.resync() },
	})
	cs, err := c.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcpgate: connect upstream: %w", err)
	}
	g.upstream = cs
	go func() { // owner: Gate; ends when the upstream session does (Close ends it)
		_ = cs.Wait()
		close(g.upstreamDone)
	}()

	opts := &mcp.ServerOptions{
		// Tools are served even while the upstream lists none, so a client
		// asks again when they appear.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	}
	if res := cs.InitializeResult(); res != nil {
		opts.Instructions = res.Instructions
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "reconciler-mcp-gate", Version: g.version}, opts)
	g.server.AddReceivingMiddleware(g.refreshOnList)
	if err := g.sync(ctx); err != nil {
		_ = cs.Close()
		return err
	}
	return nil
}

// Serve serves one client session over t (a stream transport: stdio, or
// in-memory in tests) until the client ends it, the upstream session ends
// (ErrUpstreamEnded, once the calls in flight are answered), or ctx is
// done.
func (g *Gate) Serve(ctx context.Context, t mcp.Transport) error {
	if g.server == nil {
		return errors.New("mcpgate: Serve before Open")
	}
	ss, err := g.server.Connect(ctx, &wireTransport{Transport: t, g: g}, nil)
	if err != nil {
		return fmt.Errorf("mcpgate: serve: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }() // owner: Serve; ss.Close below ends it
	select {
	case err := <-done:
		return err
	case <-g.upstreamDone:
		// The calls in flight end quickly now (no upstream to wait for)
		// and report; their results reach the client before it is cut off.
		g.drain(ctx, g.callTimeout+g.reportTimeout)
		_ = ss.Close()
		<-done
		return ErrUpstreamEnded
	case <-ctx.Done():
		_ = ss.Close()
		<-done
		return nil
	}
}

// Close ends the upstream session (a command transport stops its process)
// and waits for the gate's goroutines.
func (g *Gate) Close() error {
	g.cancel()
	var err error
	if g.upstream != nil {
		err = g.upstream.Close()
		<-g.upstreamDone
	}
	g.wg.Wait()
	if err != nil {
		return fmt.Errorf("mcpgate: close upstream: %w", err)
	}
	return nil
}

// refreshOnList refreshes the served tools before a tools/list is
// answered, so the list follows the registry (a tool registered as a read
// shows its own schema) without a timer.
func (g *Gate) refreshOnList(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/list" {
			if err := g.sync(ctx); err != nil {
				// The last list stays; calls read the registry afresh anyway.
				g.log.WarnContext(ctx, "mcp gate: tool list not refreshed", "err", err)
			}
		}
		return next(ctx, method, req)
	}
}

// resync refreshes the tools after the upstream announced a change. The
// SDK delivers the notification on its connection's goroutine, which a
// tools/list sent from there would wait on, so the refresh runs apart.
func (g *Gate) resync() {
	if g.ctx.Err() != nil {
		return
	}
	g.wg.Add(1)
	go func() { // owner: Gate; bounded by syncTimeout and Close
		defer g.wg.Done()
		ctx, cancel := context.WithTimeout(g.ctx, syncTimeout)
		defer cancel()
		if err := g.sync(ctx); err != nil && g.ctx.Err() == nil {
			g.log.Warn("mcp gate: tool list not refreshed after the upstream's change", "err", err)
		}
	}()
}

// sync makes the served tools the upstream's, as presented for the
// registry: it adds or replaces the tools whose presentation changed and
// removes the ones the upstream no longer lists.
func (g *Gate) sync(ctx context.Context) error {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	entries, err := g.ledger.ListTools(ctx)
	if err != nil {
		return fmt.Errorf("mcpgate: read the tool registry: %w", err)
	}
	registry := make(map[string]ledger.Tool, len(entries))
	for _, t := range entries {
		registry[t.Name] = t
	}
	seen := map[string]bool{}
	for ut, err := range g.upstream.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("mcpgate: list upstream tools: %w", err)
		}
		entry, registered := registry[ut.Name]
		tool, err := present(ut, entry, registered)
		if err != nil {
			g.log.WarnContext(ctx, "mcp gate: upstream tool not served", "tool", ut.Name, "err", err)
			continue
		}
		seen[tool.Name] = true
		b, err := json.Marshal(tool)
		if err != nil {
			return fmt.Errorf("mcpgate: encode tool %s: %w", tool.Name, err)
		}
		if g.listed[tool.Name] == string(b) {
			continue
		}
		g.server.AddTool(tool, g.handler(tool.Name))
		g.listed[tool.Name] = string(b)
	}
	var gone []string
	for name := range g.listed {
		if !seen[name] {
			gone = append(gone, name)
			delete(g.listed, name)
		}
	}
	if len(gone) > 0 {
		g.server.RemoveTools(gone...)
	}
	return nil
}

// present is the upstream tool as the gate lists it: a registered read
// untouched, any other tool with its key-like properties (and the
// registry's key argument) removed from its input schema, so the model
// never chooses a key.
func present(ut *mcp.Tool, entry ledger.Tool, registered bool) (*mcp.Tool, error) {
	t := *ut
	raw, err := json.Marshal(ut.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if !(registered && entry.Class == ledger.ClassRead) {
		if raw, err = scrubberFor(entry).ScrubSchema(raw); err != nil {
			return nil, err
		}
	}
	// The SDK refuses (panics on) a tool whose input schema is not an object.
	var probe struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil || probe.Type != "object" {
		return nil, errors.New(`input schema is not of type "object"`)
	}
	t.InputSchema = json.RawMessage(raw)
	return &t, nil
}
