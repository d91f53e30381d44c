package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/drill"
	"github.com/agentledger/reconciler/ledger"
)

// drillUsage is the help of `reconciler drill`.
const drillUsage = `Usage:
  reconciler drill [--runtime go|python|typescript] [--clients DIR] [--json] [--run NAME]... [--timeout D] [--verbose]
  reconciler drill --tool NAME [--url URL] [--token T] [other flags as above]
  reconciler drill --vendors [--json] [--run NAME]... [--timeout D] [--verbose]

Runs the duplicate-delivery drills in-process: each drill gets a fresh
temporary directory with an embedded bbolt ledger and an embedded NATS server
on a random loopback port, the real API and webhook handlers, and a
fault-injecting fake vendor; the agent side runs through the client of the
runtime chosen, as an agent runtime would.
Prints one row per drill: name, PASS/FAIL, side effects the vendor saw,
expected, and why a drill failed.
A drill whose protocol steps the runtime's runner does not announce (or,
with --tool, that does not apply to the tool) is SKIP, with the reason.
Exit status: 0 when every drill that ran passed (and one ran), 1 when any
fails, none ran or the runtime cannot run, 2 for a usage error.

With --tool, the drills run against that tool's registry entry on the
server at --url: each drill's world registers the entry as it is (class,
vendor, key placement, autonomy, checklist, policy), with the
duplicate_delivery_test box checked, and the drills that apply to its
class and effective autonomy run. When all of them pass, the entry's
checklist gets duplicate_delivery_test: true (checked_by "reconciler
drill", checked_at now) through PUT /v1/tools/NAME; when any fails, the
entry is left as it is and the exit status is 1.

  --runtime R   the agent runtime: go (the Go SDK, in-process; the default),
                python (clients/python, needs python3) or typescript
                (clients/typescript, needs node and its dist/: npm ci && npm run build)
  --clients DIR the repository's clients/ directory, for python and typescript
                (default: ./clients, or that of the nearest parent directory)
  --json        print the results as a JSON array instead of a table
  --run NAME    run only this drill; repeatable (names: see --list)
  --list        print the drill names
  --timeout D   bound on each drill (default 15s)
  --verbose     log the components' debug output to stderr
  --vendors     run the profiled-vendor drills instead: the generic resolver on the
                shipped resend and postmark presets against fakes, the Go SDK as the
                runtime (a replay with one email, a lookup that finds the committed
                email, two matches that page, a closed window that pages once)
  --tool NAME   drill this registered tool, and check its duplicate_delivery_test box
  --url URL     the server the tool is registered on (default $RECONCILER_URL, else http://127.0.0.1:8080)
  --token T     the tool's tenant token (default $RECONCILER_TOKEN)
`

// runDrill runs `reconciler drill`; the lead wires it as the subcommand.
func runDrill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runDrillWith(ctx, args, stdout, stderr, drill.Options{})
}

// runDrillWith is runDrill with base options (tests set TempDir and, to
// prove the exit status, a sabotage).
func runDrillWith(ctx context.Context, args []string, stdout, stderr io.Writer, base drill.Options) int {
	fs := flag.NewFlagSet("reconciler drill", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		asJSON, list, verbose bool
		only                  multiFlag
		timeout               = drill.DefaultTimeout
		runtime               = drill.RuntimeGo
		clients               string
		toolName, apiURL, tok string
		profiled              bool
	)
	fs.BoolVar(&profiled, "vendors", false, "")
	fs.StringVar(&toolName, "tool", "", "")
	fs.StringVar(&apiURL, "url", "", "")
	fs.StringVar(&tok, "token", "", "")
	fs.BoolVar(&asJSON, "json", false, "")
	fs.BoolVar(&list, "list", false, "")
	fs.BoolVar(&verbose, "verbose", false, "")
	fs.Var(&only, "run", "")
	fs.DurationVar(&timeout, "timeout", timeout, "")
	fs.StringVar(&runtime, "runtime", runtime, "")
	fs.StringVar(&clients, "clients", "", "")
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "reconciler drill: "+format+"\n", a...)
		fmt.Fprint(stderr, drillUsage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, drillUsage)
			return 0
		}
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if timeout <= 0 {
		return usageErr("--timeout must be positive")
	}
	if !slices.Contains(drill.Runtimes(), runtime) {
		return usageErr("no runtime %q (have %s)", runtime, strings.Join(drill.Runtimes(), ", "))
	}
	names := drill.Names()
	if profiled {
		names = drill.ProfiledNames()
		if toolName != "" || runtime != drill.RuntimeGo {
			return usageErr("--vendors runs with the Go runtime and no --tool")
		}
	}
	if list {
		fmt.Fprintln(stdout, strings.Join(names, "\n"))
		return 0
	}
	for _, n := range only {
		if !slices.Contains(names, n) {
			return usageErr("no drill %q (have %s)", n, strings.Join(names, ", "))
		}
	}

	if toolName == "" && (apiURL != "" || tok != "") {
		return usageErr("--url and --token go with --tool")
	}

	if err := drill.CheckRuntime(runtime, clients); err != nil {
		fmt.Fprintln(stderr, "reconciler drill:", err)
		return 1
	}
	opts := base
	opts.Only, opts.Timeout, opts.Runtime, opts.ClientsDir = only, timeout, runtime, clients
	var registered *drilledTool
	if toolName != "" {
		var err error
		if registered, err = fetchTool(ctx, toolName, apiURL, tok); err != nil {
			fmt.Fprintln(stderr, "reconciler drill:", err)
			return 1
		}
		opts.Tool = &registered.tool
	}
	if verbose {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	start := time.Now()
	run := drill.Run
	if profiled {
		run = drill.RunProfiled
	}
	results, err := run(ctx, opts)
	if err != nil {
		fmt.Fprintln(stderr, "reconciler drill:", err)
		return 1
	}
	if asJSON {
		err = drill.WriteJSON(stdout, results)
	} else {
		err = drill.WriteTable(stdout, results)
	}
	if err != nil {
		fmt.Fprintln(stderr, "reconciler drill: write results:", err)
		return 1
	}
	failed, skipped := 0, 0
	for _, r := range results {
		switch {
		case r.Skipped:
			skipped++
		case !r.Pass:
			failed++
		}
	}
	if !asJSON {
		fmt.Fprintf(stdout, "runtime %s: %d drills, %d failed, %d skipped, %.1fs\n", runtime, len(results), failed, skipped, time.Since(start).Seconds())
	}
	if !drill.Passed(results) {
		if registered != nil {
			fmt.Fprintf(stderr, "reconciler drill: %s: duplicate_delivery_test left as it is\n", toolName)
		}
		return 1
	}
	if registered != nil && !drill.DeliveryTested(results) {
		// The approval and checklist drills test the gate, not duplicate
		// delivery: with only those run (another box open, a tool the
		// delivery drills do not model), checking the box would certify
		// what nothing tested.
		fmt.Fprintf(stderr, "reconciler drill: %s: no duplicate-delivery drill applies to this entry as registered (only the gate's drills ran); duplicate_delivery_test left as it is\n", toolName)
		return 1
	}
	if registered != nil {
		if err := registered.check(ctx, time.Now()); err != nil {
			fmt.Fprintln(stderr, "reconciler drill:", err)
			return 1
		}
		if !asJSON {
			fmt.Fprintf(stdout, "%s: duplicate_delivery_test checked\n", toolName)
		}
	}
	return 0
}

// drilledTool is the registry entry `--tool` drills, and the client of the
// server it is registered on.
type drilledTool struct {
	c    *client.Client
	tool ledger.Tool
}

// Defaults of --url and --token.
const (
	drillEnvURL   = "RECONCILER_URL"
	drillEnvToken = "RECONCILER_TOKEN"
	drillURL      = "http://127.0.0.1:8080"
	// drillChecker is who checked the box, as the checklist records it.
	drillChecker = "reconciler drill"
)

// fetchTool reads the entry of name from the server at url with token
// (their defaults from the environment). A read tool has nothing to drill.
func fetchTool(ctx context.Context, name, url, token string) (*drilledTool, error) {
	if url == "" {
		url = os.Getenv(drillEnvURL)
	}
	if url == "" {
		url = drillURL
	}
	if token == "" {
		token = os.Getenv(drillEnvToken)
	}
	if token == "" {
		return nil, fmt.Errorf("--tool needs the tenant's token: --token or $%s", drillEnvToken)
	}
	c, err := client.New(url, token)
	if err != nil {
		return nil, err
	}
	t, err := c.GetTool(ctx, name)
	if err != nil {
		return nil, err
	}
	if t.Class == ledger.ClassRead {
		return nil, fmt.Errorf("tool %s is a read: it makes no side effect to drill", name)
	}
	return &drilledTool{c: c, tool: t}, nil
}

// check marks the entry's duplicate_delivery_test box, as of now. It
// re-reads the entry first: one changed while the drills ran (another
// class, autonomy or key placement) was not what they drilled.
func (d *drilledTool) check(ctx context.Context, now time.Time) error {
	cur, err := d.c.GetTool(ctx, d.tool.Name)
	if err != nil {
		return fmt.Errorf("re-read %s: %w", d.tool.Name, err)
	}
	if cur.Version != d.tool.Version {
		return fmt.Errorf("%s changed while it was drilled (version %d, drilled %d): run the drills again", d.tool.Name, cur.Version, d.tool.Version)
	}
	if cur.Checklist.DuplicateDeliveryTest {
		// Already checked: a PUT would only bump the version and replace
		// the person who checked the other boxes.
		return nil
	}
	cur.Checklist.DuplicateDeliveryTest = true
	cur.Checklist.CheckedBy, cur.Checklist.CheckedAt = drillChecker, now.UTC()
	if _, _, err := d.c.PutTool(ctx, cur); err != nil {
		return fmt.Errorf("check duplicate_delivery_test of %s: %w", d.tool.Name, err)
	}
	return nil
}
