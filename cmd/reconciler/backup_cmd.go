package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// backupUsage is the help of `reconciler backup`.
const backupUsage = `Usage:
  reconciler backup --out FILE [--url URL] [--timeout D]

Copies the running node's ledger (GET /v1/admin/backup: one read
transaction, claims go on meanwhile) to FILE: written to a temporary file
beside it, fsynced, checked (bbolt's consistency check and the ledger's
invariants), then renamed over FILE. Prints the rows and bytes copied.

  --out FILE       where the copy goes (replaced if it exists)
  --url URL        the node (default $RECONCILER_URL, else http://127.0.0.1:8080)
  --timeout D      bound on the node's first byte (default 30s; the copy
                   itself may take as long as it takes)

The admin token is read from $RECONCILER_ADMIN_TOKEN. A node on PostgreSQL
answers 501: back PostgreSQL up with pg_dump or point-in-time recovery.
Restore a copy with 'reconciler restore --from FILE --data DIR'.

Exit status: 0 on success, 1 when the copy failed (FILE is left as it
was), 2 for a usage error.
`

func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return subcommandExit("backup", backupUsage, backupMain(ctx, args, stdout, stderr, getenv), stdout, stderr)
}

func backupMain(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("reconciler backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rawURL := getenv(ledgerEnvURL)
	if rawURL == "" {
		rawURL = ledgerDefaultURL
	}
	fs.StringVar(&rawURL, "url", rawURL, "")
	out := fs.String("out", "", "")
	timeout := fs.Duration("timeout", 30*time.Second, "")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErrorf("%v", err)
	}
	switch {
	case len(pos) > 0:
		return usageErrorf("backup takes no arguments, got %q", pos[0])
	case *out == "":
		return usageErrorf("--out is required")
	case *timeout <= 0:
		return usageErrorf("--timeout must be positive")
	}
	base, err := ledgerBaseURL(rawURL)
	if err != nil {
		return err
	}
	token := strings.TrimSpace(getenv(config.EnvAdminToken))
	if token == "" {
		return usageErrorf("%s is not set (a development node keeps it in data/admin_token)", config.EnvAdminToken)
	}
	if !ledgerSafeTransport(base) {
		fmt.Fprintf(stderr, "reconciler backup: warning: sending the admin token over plain http to %s\n", base.Host)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+"/v1/admin/backup", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	hc := &http.Client{
		Transport:     &http.Transport{ResponseHeaderTimeout: *timeout, Proxy: http.ProxyFromEnvironment},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s/v1/admin/backup: %w", base.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	rows, _ := strconv.ParseInt(resp.Header.Get(api.HeaderBackupRows), 10, 64)
	n, err := writeAtomically(ctx, *out, resp.Body, resp.ContentLength)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d rows, %d bytes\n", *out, rows, n)
	return nil
}

// writeAtomically copies r (want bytes, -1 unknown) to a temporary file
// beside path, fsyncs it, checks it as a ledger file and renames it over
// path, fsyncing the directory. On any failure path is untouched.
func writeAtomically(ctx context.Context, path string, r io.Reader, want int64) (int64, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename there is nothing to remove
	n, err := io.Copy(f, r)
	if err == nil && want >= 0 && n != want {
		err = fmt.Errorf("the copy ended after %d of %d bytes", n, want)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("backup to %s: %w", path, err)
	}
	if _, err := bolt.CheckFileIsolated(ctx, tmp); err != nil {
		return 0, fmt.Errorf("backup to %s: the copy fails its check: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, err
	}
	return n, bolt.SyncDir(dir)
}
