package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/reconciler/drill"
)

// drillUsage is the help of `reconciler drill`.
const drillUsage = `Usage:
  reconciler drill [--runtime go|python|typescript] [--clients DIR] [--json] [--run NAME]... [--timeout D] [--verbose]

Runs the duplicate-delivery drills in-process: each drill gets a fresh
temporary directory with an embedded bbolt ledger and an embedded NATS server
on a random loopback port, the real API and webhook handlers, and a
fault-injecting fake vendor; the agent side runs through the client of the
runtime chosen, as an agent runtime would.
Prints one row per drill: name, PASS/FAIL, side effects the vendor saw,
expected, and why a drill failed.
Exit status: 0 when every drill passes, 1 when any fails or the runtime
cannot run, 2 for a usage error.

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
	)
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
	if list {
		fmt.Fprintln(stdout, strings.Join(names, "\n"))
		return 0
	}
	for _, n := range only {
		if !slices.Contains(names, n) {
			return usageErr("no drill %q (have %s)", n, strings.Join(names, ", "))
		}
	}

	if err := drill.CheckRuntime(runtime, clients); err != nil {
		fmt.Fprintln(stderr, "reconciler drill:", err)
		return 1
	}
	opts := base
	opts.Only, opts.Timeout, opts.Runtime, opts.ClientsDir = only, timeout, runtime, clients
	if verbose {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	start := time.Now()
	results, err := drill.Run(ctx, opts)
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
	failed := 0
	for _, r := range results {
		if !r.Pass {
			failed++
		}
	}
	if !asJSON {
		fmt.Fprintf(stdout, "runtime %s: %d drills, %d failed, %.1fs\n", runtime, len(results), failed, time.Since(start).Seconds())
	}
	if failed > 0 || len(results) == 0 {
		return 1
	}
	return 0
}
