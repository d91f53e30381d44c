package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/internal/tracing"
)

// Main is the program: main.go only parses the command line into it, runs it
// and closes it on a signal. Its fields are exported so a test can drive the
// real program with a t.TempDir(), its own environment and port 0.
type Main struct {
	// Config is the effective configuration; ParseFlags fills it in.
	Config config.Config
	// Command is the subcommand ParseFlags chose ("serve" by default).
	Command string

	Stdout io.Writer // --help
	Stderr io.Writer // the JSON log, when Logger is nil
	// Getenv reads the environment: RECONCILER_* settings, ${VAR} in the
	// config file, and whether OTEL_* variables ask for traces (the
	// OpenTelemetry SDK reads their details from the process, tracing.go).
	Getenv func(string) string
	// Logger is built by Run from Config.LogLevel (JSON to Stderr) when nil.
	Logger *slog.Logger
	// Now is the clock handed to every component.
	Now func() time.Time
	// Rand is the randomness of generated tokens.
	Rand io.Reader

	mu       sync.Mutex
	closers  [numStages][]namedCloser
	closed   bool
	httpAddr string
	natsURL  string
	fatal    chan error
	// onShutdownHTTP runs when the HTTP server starts shutting down
	// (http.Server.RegisterOnShutdown): the API ends its long polls.
	onShutdownHTTP []func()
}

// NewMain returns a Main reading the process's environment and clock.
func NewMain() *Main {
	return &Main{
		Config: config.Default(),
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Getenv: os.Getenv,
		Now:    time.Now,
		Rand:   rand.Reader,
		fatal:  make(chan error, 1),
	}
}

// ParseFlags chooses the subcommand and loads the configuration from flags,
// the environment and the config file. It returns flag.ErrHelp after printing
// the help to Stdout; ExitCode maps every error to the process's status.
func (m *Main) ParseFlags(_ context.Context, args []string) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	m.Command = cmd
	switch {
	case cmd == "serve":
	case cmd == "help":
		m.usage(m.Stdout)
		return flag.ErrHelp
	default:
		return &exitError{code: 2, err: fmt.Errorf("unknown command %q (run reconciler --help)", cmd)}
	}

	fs := flag.NewFlagSet("reconciler serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // we print our own help and one-line errors
	flags := config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			m.usage(m.Stdout)
			return err
		}
		return &exitError{code: 2, err: fmt.Errorf("%w (run reconciler --help)", err)}
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q (run reconciler --help)", fs.Arg(0))}
	}
	cfg, err := flags.Load(m.getenv)
	m.Config = cfg
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Run starts the service and returns once it serves; the components run
// until Close. ctx bounds start-up only (connecting to the store and NATS).
func (m *Main) Run(ctx context.Context) error {
	if m.Logger == nil {
		// trace_id and span_id on every record logged inside a span.
		m.Logger = slog.New(tracing.LogHandler(slog.NewJSONHandler(m.Stderr, &slog.HandlerOptions{Level: m.Config.LogLevel})))
	}
	if m.fatal == nil {
		m.fatal = make(chan error, 1)
	}
	if err := m.Config.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := os.MkdirAll(m.Config.Data, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := m.Config.EnsureTokens(m.getenv, m.Rand, m.Logger); err != nil {
		return err
	}
	// The one line that shows the effective configuration; Config.LogValue redacts it.
	m.Logger.Info("starting reconciler", "command", m.Command, "config", m.Config)

	// Listen first: a taken port fails before anything else starts.
	ln, err := net.Listen("tcp", m.Config.HTTP)
	if err != nil {
		return fmt.Errorf("listen http %s: %w", m.Config.HTTP, errors.Unwrap(err))
	}
	handler, err := m.wire(ctx)
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn),
	}
	for _, fn := range m.onShutdownHTTP {
		srv.RegisterOnShutdown(fn)
	}
	served := make(chan struct{})
	go func() { // owner: Main; exits when the "http" closer shuts the server down
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			m.fail(fmt.Errorf("http: %w", err))
		}
	}()
	m.onClose(stageHTTP, "http", func(ctx context.Context) error {
		err := srv.Shutdown(ctx) // stops intake, waits for requests in flight
		if err != nil {
			_ = srv.Close() // the deadline passed: cut the stragglers
		}
		<-served
		return err
	})
	m.mu.Lock()
	m.httpAddr = ln.Addr().String()
	m.mu.Unlock()
	m.Logger.Info("listening", "http", ln.Addr().String())
	return nil
}

// What one connection may hold of the HTTP server. The deadlines of a
// request's body and of its answer are set per request by the API
// (api/deadline.go), so that a long poll can move its own; the program
// keeps the API's defaults (api.DefaultBodyTimeout, api.DefaultAnswerTimeout).
const (
	// httpReadHeaderTimeout is how long a client has to send its headers.
	httpReadHeaderTimeout = 10 * time.Second
	// httpIdleTimeout closes a keep-alive connection that sends nothing.
	httpIdleTimeout = 2 * time.Minute
	// httpMaxHeaderBytes caps a request line and its headers (net/http's
	// default is 1 MiB): a bearer token and a vendor's signature headers
	// take well under 1 KiB; the rest is room for proxies' headers.
	httpMaxHeaderBytes = 64 << 10
)

// HTTPAddr is the address the HTTP server bound, "" before Run. With http
// set to 127.0.0.1:0 it tells a test the port.
func (m *Main) HTTPAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.httpAddr
}

// Err delivers the first error of a component that stopped on its own after
// Run returned; main shuts down on it as on a signal.
func (m *Main) Err() <-chan error { return m.fatal }

func (m *Main) fail(err error) {
	select {
	case m.fatal <- err:
	default: // one is enough to shut down
	}
}

// Shutdown stages, in the order Close runs them (STYLE.md "Shutdown order"):
// stop taking work in, stop making vendor calls, flush what was committed to
// NATS while NATS is still up, and close the store last because everything
// above may still write to it.
type stage int

const (
	stageHTTP     stage = iota // stop intake: no new claims or webhooks
	stageResolver              // no new vendor lookups, replays or pages
	stageRelay                 // drain the outbox to JetStream
	stageNATS                  // the connection, then the embedded server
	stageStore                 // everything above may still write to it
	stageTraces                // last: every stage above may still end a span
	numStages
)

type namedCloser struct {
	name string
	fn   func(context.Context) error
}

// onClose registers fn to run in stage s of Close. Within a stage closers run
// in reverse order of registration, like defers.
func (m *Main) onClose(s stage, name string, fn func(context.Context) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closers[s] = append(m.closers[s], namedCloser{name: name, fn: fn})
}

// Close shuts the program down stage by stage within ctx's deadline. Every
// closer runs even when the deadline has passed (it then closes hard rather
// than gracefully), so the store's file lock is always released. A second
// Close does nothing.
func (m *Main) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	closers := m.closers
	m.mu.Unlock()

	m.log().Info("shutting down")
	var errs []error
	for s := range numStages {
		list := closers[s]
		for i := len(list) - 1; i >= 0; i-- {
			c := list[i]
			if err := c.fn(ctx); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", c.name, err))
			}
			m.log().Debug("closed", "component", c.name)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		m.log().Error("shut down with errors", "err", err)
	} else {
		m.log().Info("shut down")
	}
	return err
}

func (m *Main) log() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger
}

func (m *Main) getenv(k string) string {
	if m.Getenv == nil {
		return ""
	}
	return m.Getenv(k)
}

// exitError carries a process status other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the process status for err: 0 for none and for --help, 2 for
// a usage error, 1 otherwise.
func ExitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		return 1
	}
}

// oneLine folds joined errors into one line for stderr.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// usage prints the commands, then every flag with its environment variable,
// config key and default.
func (m *Main) usage(w io.Writer) {
	_, _ = io.WriteString(w, `Usage:
  reconciler [serve] [flags]               run the service (the default command)
  reconciler drill [--runtime R] [--json]  run the duplicate-delivery drills in-process, the agent side in
                                           runtime R: go (default), python or typescript (exit 1 if any fails)
  reconciler send-fixture NAME --url URL --secret S [--set metadata_local_id=rl_…]
                                           sign a fixtures/ payload as the vendor would and post it
  reconciler ledger list|show|resolve      an operator's view of rows through the admin API
  reconciler tools apply|list|show|delete  a tenant's tool registry: apply -f FILE registers a YAML file's entries
  reconciler nats-creds --tenant T|--service
                                           make a NATS credential for the event bus and print its permissions
  reconciler mcp-gate [flags] -- COMMAND   an MCP server in front of another that puts its writes under the ledger
  reconciler backup --out FILE [--url URL] a consistent copy of a running node's ledger (bbolt), through the admin API
  reconciler restore --from FILE --data DIR [--force]
                                           check a copy, then put it in place for a stopped node
  reconciler compact --data DIR            rewrite a stopped node's ledger file without its free pages

Traces (OpenTelemetry) are off unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER
(otlp, console, none) is set; the other OTEL_* variables apply (OTEL_SERVICE_NAME: reconciler).

`)
	_ = config.WriteHelp(w)
}
