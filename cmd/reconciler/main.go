package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// closeTimeout bounds a graceful shutdown; a supervisor's kill follows it.
const closeTimeout = 30 * time.Second

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if len(os.Args) > 1 && os.Args[1] == "send-fixture" {
		return sendFixture(ctx, os.Args[2:], os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "ledger" {
		return runLedger(ctx, os.Args[2:], os.Stdout, os.Stderr, os.Getenv)
	}
	if len(os.Args) > 1 && os.Args[1] == "tools" {
		return runTools(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	}
	if len(os.Args) > 1 && os.Args[1] == "nats-creds" {
		return runNATSCreds(os.Args[2:], os.Stdout, os.Stderr, os.Getenv)
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp-gate" {
		return runMCPGate(ctx, os.Args[2:], &mcp.StdioTransport{}, os.Stdout, os.Stderr, os.Getenv)
	}
	if len(os.Args) > 1 && os.Args[1] == "backup" {
		return runBackup(ctx, os.Args[2:], os.Stdout, os.Stderr, os.Getenv)
	}
	if len(os.Args) > 1 && os.Args[1] == "restore" {
		return runRestore(ctx, os.Args[2:], os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "compact" {
		return runCompact(ctx, os.Args[2:], os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "drill" {
		return runDrill(ctx, os.Args[2:], os.Stdout, os.Stderr)
	}
	m := NewMain()
	if err := m.ParseFlags(ctx, os.Args[1:]); err != nil {
		return report(err)
	}
	code := 0
	if err := m.Run(ctx); err != nil {
		code = report(err)
	} else {
		select {
		case <-ctx.Done():
		case err := <-m.Err():
			code = report(err)
		}
	}
	stop() // a second signal now kills the process at once

	closeCtx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := m.Close(closeCtx); err != nil {
		code = max(code, report(err))
	}
	return code
}

// report prints err as one line to stderr and returns the exit status.
func report(err error) int {
	if code := ExitCode(err); code == 0 {
		return 0
	}
	fmt.Fprintln(os.Stderr, "reconciler:", oneLine(err))
	return ExitCode(err)
}
