package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// restoreUsage is the help of `reconciler restore`.
const restoreUsage = `Usage:
  reconciler restore --from FILE --data DIR [--force]

Puts a copy made by 'reconciler backup' in place as DIR/reconciler.db, for a
node that is stopped. The copy is checked first (bbolt's consistency check
and the ledger's invariants); nothing is written unless it passes. Then it
is copied to a temporary file beside the ledger, fsynced and renamed.

  --from FILE   the copy
  --data DIR    the stopped node's data directory (its --data)
  --force       replace an existing DIR/reconciler.db

A running node holds its file: restore refuses it, with or without
--force. It prints what the copy holds, and how many events its outbox
holds: the node publishes them on start, and the stream drops those it
stored already within its duplicates window (events.synced_after's 1h).

Exit status: 0 on success, 1 when refused or failed, 2 for a usage error.
`

// compactUsage is the help of `reconciler compact`.
const compactUsage = `Usage:
  reconciler compact --data DIR

Rewrites a stopped node's DIR/reconciler.db without its free pages (bbolt
never shrinks a file; retention frees pages that later writes reuse) into
a new file beside it, fsyncs and checks the new file, and renames it over
the old one. Prints the sizes before and after. A running node holds its
file: compact refuses it.

Exit status: 0 on success, 1 when refused or failed, 2 for a usage error.
`

func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return subcommandExit("restore", restoreUsage, restoreMain(ctx, args, stdout), stdout, stderr)
}

func runCompact(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return subcommandExit("compact", compactUsage, compactMain(ctx, args, stdout), stdout, stderr)
}

// offlineFlags parses the flags of restore and compact.
func offlineFlags(name string, args []string, define func(fs *flag.FlagSet)) (data string, err error) {
	fs := flag.NewFlagSet("reconciler "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&data, "data", "", "")
	define(fs)
	pos, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return "", err
	case err != nil:
		return "", usageErrorf("%v", err)
	case len(pos) > 0:
		return "", usageErrorf("%s takes no arguments, got %q", name, pos[0])
	case data == "":
		return "", usageErrorf("--data is required: the data directory of the stopped node")
	}
	return data, nil
}

func restoreMain(ctx context.Context, args []string, stdout io.Writer) error {
	var from string
	var force bool
	data, err := offlineFlags("restore", args, func(fs *flag.FlagSet) {
		fs.StringVar(&from, "from", "", "")
		fs.BoolVar(&force, "force", false, "")
	})
	if err != nil {
		return err
	}
	if from == "" {
		return usageErrorf("--from is required: the copy to restore")
	}
	path := config.Config{Data: data}.BoltPath()
	rep, err := bolt.Restore(ctx, from, path, force)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "restore: ")) // the command names itself
	}
	fmt.Fprintf(stdout, "restored %s to %s: %d rows, %d bytes\n", from, path, rep.Rows, rep.Bytes)
	if !rep.NewestUpdate.IsZero() {
		fmt.Fprintf(stdout, "newest row updated at %s\n", rep.NewestUpdate.UTC().Format(time.RFC3339))
	}
	if rep.Outbox > 0 {
		fmt.Fprintf(stdout, "outbox: %d events, the oldest of %s, are published when the node starts\n",
			rep.Outbox, rep.OldestEvent.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(stdout, "outbox: empty, nothing is published again")
	}
	if !rep.Invariants {
		fmt.Fprintln(stdout, "the copy is of an older schema: the node completes its indexes when it opens it")
	}
	return nil
}

func compactMain(ctx context.Context, args []string, stdout io.Writer) error {
	data, err := offlineFlags("compact", args, func(*flag.FlagSet) {})
	if err != nil {
		return err
	}
	path := filepath.Clean(config.Config{Data: data}.BoltPath())
	before, after, err := bolt.Compact(ctx, path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compacted %s: %d bytes before, %d bytes after\n", path, before, after)
	return nil
}
