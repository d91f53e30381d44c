package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/mcpgate"
)

// mcpGateUsage is the help of `reconciler mcp-gate`.
const mcpGateUsage = `Usage:
  reconciler mcp-gate [flags] -- COMMAND [ARG…]    front an MCP server that runs as COMMAND (stdio)
  reconciler mcp-gate [flags] --upstream-url URL   front a streamable-HTTP MCP server

An MCP server on stdin/stdout that fronts another one (docs/architecture.md
§14). It lists the upstream's tools with key-like properties removed from
their input schemas, passes registered reads through, and puts every
registered write under the ledger: a claim per call, the row's key in the
argument the registry names (key_placement: {argument: NAME}), the result
stored as the receipt, so a repeated call returns it without calling
upstream. Configure it as the MCP server in the agent's client, in place of
the upstream.

Flags:
  --url URL            the reconciler node (default $RECONCILER_URL, else http://127.0.0.1:8080)
  --token T            the tenant token (default $RECONCILER_TOKEN; prefer the environment:
                       a flag shows in the process list)
  --run-id ID          the run_id of calls whose _meta["reconciler/run_id"] names none
                       (default: one per gate session, mcp-<16 hex>)
  --upstream-url URL   a streamable-HTTP upstream instead of COMMAND
  --call-timeout D     bound on each upstream call (default 60s); a write past it is unknown
  --strict             refuse tools the registry does not know instead of passing them through
  --log-level L        debug, info, warn or error (default info); logs go to stderr as JSON

Exit status: 0 when the client ends the session, 1 when the upstream or the
ledger cannot be reached at start or the upstream ends, 2 for a usage error.
`

// mcpGateOpts are the parsed flags of `reconciler mcp-gate`.
type mcpGateOpts struct {
	url, token, runID, upstreamURL string
	callTimeout                    time.Duration
	strict                         bool
	level                          slog.Level
	command                        []string
}

// runMCPGate runs `reconciler mcp-gate`: it serves one MCP session over
// downstream (stdio in production) until the client or the upstream ends
// it, or ctx does. stdout is for --help only: on stdout the gate speaks
// MCP, so everything else goes to stderr, which the gate's log and the
// upstream command share (so it must take concurrent writes, as
// os.Stderr does).
func runMCPGate(ctx context.Context, args []string, downstream mcp.Transport, stdout, stderr io.Writer, getenv func(string) string) int {
	o, err := parseMCPGate(args, getenv)
	var ue *ledgerUsageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = io.WriteString(stdout, mcpGateUsage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "reconciler mcp-gate: %s\nrun 'reconciler mcp-gate --help' for usage\n", ue.msg)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.level}))
	if err := mcpGate(ctx, o, downstream, stderr, log); err != nil {
		fmt.Fprintln(stderr, "reconciler mcp-gate:", oneLine(err))
		return 1
	}
	return 0
}

func parseMCPGate(args []string, getenv func(string) string) (mcpGateOpts, error) {
	o := mcpGateOpts{url: getenv(ledgerEnvURL), token: getenv("RECONCILER_TOKEN"), callTimeout: mcpgate.DefaultCallTimeout}
	if o.url == "" {
		o.url = ledgerDefaultURL
	}
	fs := flag.NewFlagSet("reconciler mcp-gate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // we print our own help and one-line errors
	fs.StringVar(&o.url, "url", o.url, "")
	fs.StringVar(&o.token, "token", o.token, "")
	fs.StringVar(&o.runID, "run-id", "", "")
	fs.StringVar(&o.upstreamURL, "upstream-url", "", "")
	fs.DurationVar(&o.callTimeout, "call-timeout", o.callTimeout, "")
	fs.BoolVar(&o.strict, "strict", false, "")
	fs.TextVar(&o.level, "log-level", slog.LevelInfo, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageErrorf("%v", err)
	}
	o.command = fs.Args()
	switch {
	case len(o.command) == 0 && o.upstreamURL == "":
		return o, usageErrorf("name the upstream: -- COMMAND [ARG…] or --upstream-url URL")
	case len(o.command) > 0 && o.upstreamURL != "":
		return o, usageErrorf("name one upstream: -- COMMAND or --upstream-url, not both")
	case o.token == "":
		return o, usageErrorf("no token: set RECONCILER_TOKEN (or --token)")
	case o.callTimeout <= 0:
		return o, usageErrorf("--call-timeout must be positive")
	}
	if o.upstreamURL != "" {
		if u, err := url.Parse(o.upstreamURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, usageErrorf("--upstream-url %q: want http(s)://host[:port]/path", o.upstreamURL)
		}
	}
	return o, nil
}

// mcpGate connects the upstream, then serves the session.
func mcpGate(ctx context.Context, o mcpGateOpts, downstream mcp.Transport, stderr io.Writer, log *slog.Logger) error {
	lc, err := client.New(o.url, o.token, client.WithLogger(log))
	if err != nil {
		return err
	}
	g, err := mcpgate.New(mcpgate.Options{Ledger: lc, RunID: o.runID, CallTimeout: o.callTimeout, Strict: o.strict, Logger: log})
	if err != nil {
		return err
	}
	var upstream mcp.Transport
	if o.upstreamURL != "" {
		upstream = &mcp.StreamableClientTransport{Endpoint: o.upstreamURL}
	} else {
		cmd := exec.Command(o.command[0], o.command[1:]...)
		cmd.Stderr = stderr // the upstream's log joins the gate's, where the MCP client keeps it
		upstream = &mcp.CommandTransport{Command: cmd}
	}
	if err := g.Open(ctx, upstream); err != nil {
		return err
	}
	log.Info("mcp gate serving", "upstream", upstreamName(o), "run_id", g.RunID(), "strict", o.strict)
	err = g.Serve(ctx, downstream)
	if cerr := g.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// upstreamName names the upstream in the log: the command's program or
// the URL's host and path, never arguments, a query or a password (they may
// hold secrets).
func upstreamName(o mcpGateOpts) string {
	if o.upstreamURL == "" {
		return o.command[0]
	}
	u, err := url.Parse(o.upstreamURL)
	if err != nil {
		return "?"
	}
	return u.Scheme + "://" + u.Host + u.Path
}
