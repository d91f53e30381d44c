package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/resolver"
	"github.com/agentledger/reconciler/vendors"
)

// vendorsUsage is the help of `reconciler vendors`.
const vendorsUsage = `Usage:
  reconciler vendors list [--config FILE]
  reconciler vendors check NAME --local-id ID [--receipt ID] [--key KEY] [--age D] [--config FILE]
  reconciler vendors check NAME --probe --i-know-this-writes --request FILE [--config FILE]

Reads the same configuration as serve (--config, $RECONCILER_CONFIG, the
environment) and never changes a row.

  list      the configured vendor profiles: name, preset, where the key goes,
            replay window, whether there is a lookup. Secrets are not shown.
  check     runs the profile's retrieve (with --receipt) and lookup (by the
            row's metadata_local_id) against the vendor and prints what the
            resolver would decide: found ID, absent, duplicate — would page,
            too young to tell (a miss younger than the lookup's min_age: give
            the time since the write's last attempt with --age), or that the
            vendor has no lookup. --key is the row's key, for lookups that
            name {vendor_key} (Linear). A lookup that lists from the row's
            first_seen_at (Mailgun) starts --age ago (without --age: from the
            start of the vendor's retention). Exit 0 when it could decide, 1 when
            the vendor call failed, 2 on a usage error.
  --probe   sends the request in FILE (JSON: {method, path, content_type,
            body}; the path is under api_base) twice with one fresh key at the
            profile's placement and reports whether the vendor replayed the
            first answer — whether the key is honoured at all. It WRITES:
            use sandbox keys only; it is refused without --i-know-this-writes.
`

func runVendors(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return subcommandExit("vendors", vendorsUsage, vendorsMain(ctx, args, stdout, getenv), stdout, stderr)
}

func vendorsMain(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return usageErrorf("want a subcommand: list or check")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		return flag.ErrHelp
	}
	sub, args := args[0], args[1:]
	name := ""
	if sub == "check" && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("reconciler vendors "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	localID := fs.String("local-id", "", "")
	receipt := fs.String("receipt", "", "")
	key := fs.String("key", "", "")
	age := fs.Duration("age", 0, "")
	probe := fs.Bool("probe", false, "")
	writes := fs.Bool("i-know-this-writes", false, "")
	reqFile := fs.String("request", "", "")
	flags := config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErrorf("%v", err)
	}
	if name == "" && sub == "check" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q", fs.Arg(0))
	}
	switch sub {
	case "list", "check":
	default:
		return usageErrorf("unknown subcommand %q: want list or check", sub)
	}
	if sub == "check" {
		switch {
		case name == "":
			return usageErrorf("check: name the vendor")
		case *probe && !*writes:
			return usageErrorf("check --probe sends a write to the vendor twice: add --i-know-this-writes (sandbox keys only)")
		case *probe && *reqFile == "":
			return usageErrorf("check --probe: give the request to send with --request FILE")
		case !*probe && *localID == "" && *receipt == "":
			return usageErrorf("check: give --local-id (and --receipt when the vendor's id is known)")
		}
	}
	cfg, err := flags.Load(getenv)
	if err != nil {
		return usageErrorf("config: %s", oneLine(err))
	}
	if sub == "list" {
		return listVendors(stdout, cfg.Profiles())
	}
	p, ok := cfg.Profile(name)
	if !ok {
		return usageErrorf("check: no vendor %q in the configuration (vendors list shows them)", name)
	}
	if !p.Callable() {
		return usageErrorf("check: vendor %s has no api_base: there is nothing to call", name)
	}
	lk, err := resolver.NewProfiled(p, nil)
	if err != nil {
		return usageErrorf("check: %v", err)
	}
	if *probe {
		return probeVendor(ctx, stdout, lk, *reqFile)
	}
	row := ledger.Row{MetadataLocalID: *localID, UpstreamReceiptID: *receipt, Vendor: name}
	if *age > 0 {
		// {first_seen_unix}: the write was made about --age ago.
		row.FirstSeenAt = time.Now().Add(-*age)
	}
	if *key != "" {
		row.Key, row.VendorKey = *key, p.VendorKey(*key)
	}
	return checkVendor(ctx, stdout, lk, row, *age)
}

func listVendors(w io.Writer, ps []vendors.Profile) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPRESET\tKEY PLACEMENT\tMAX KEY\tWINDOW\tLOOKUP\tRETRIEVE\tAPI BASE")
	for _, p := range ps {
		r := p.Redacted()
		preset, base := r.Preset, r.APIBase
		if preset == "" {
			preset = "-"
		}
		if base == "" {
			base = "- (no calls: paged after the window)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Name, preset, r.Idempotency, r.MaxKeyLen, r.ReplayWindow,
			yesNo(r.Lookup != nil), yesNo(r.Retrieve != nil), base)
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// checkVendor is the resolver's first two steps for one row, printed: a
// vendor call that fails is an error (exit 1).
func checkVendor(ctx context.Context, w io.Writer, lk *resolver.Profiled, row ledger.Row, age time.Duration) error {
	if row.UpstreamReceiptID != "" {
		f, err := lk.Retrieve(ctx, row)
		if err != nil {
			return fmt.Errorf("retrieve %s: %w", row.UpstreamReceiptID, err)
		}
		if f.Found {
			fmt.Fprintf(w, "found %s (%s)\n", f.ReceiptID, statusWord(f.Status))
			return nil
		}
		if row.MetadataLocalID == "" {
			fmt.Fprintf(w, "absent: the vendor knows no object %s\n", row.UpstreamReceiptID)
			return nil
		}
	}
	f, err := lk.Find(ctx, row)
	switch {
	case errors.Is(err, resolver.ErrNoLookup):
		if lk.Profile().CanReplay() {
			fmt.Fprintf(w, "no lookup: the resolver would replay the stored request with the same key inside the %s window, then page\n", lk.Profile().ReplayWindow)
		} else {
			fmt.Fprintln(w, "no lookup and no replay: the resolver would page once the window closed")
		}
		return nil
	case err != nil:
		return fmt.Errorf("lookup %s: %w", row.MetadataLocalID, err)
	case f.Duplicate:
		fmt.Fprintf(w, "duplicate — would page (%s)\n", f.Detail)
	case f.Found:
		fmt.Fprintf(w, "found %s (%s)\n", f.ReceiptID, statusWord(f.Status))
	case age < lk.SearchLag():
		fmt.Fprintf(w, "too young to tell: a miss counts after %s since the last attempt (--age %s)\n", lk.SearchLag(), age)
	case lk.Retention() > 0 && age > lk.Retention():
		fmt.Fprintf(w, "absent, but older than the vendor's %s retention: a miss proves nothing — would page\n", lk.Retention())
	default:
		fmt.Fprintln(w, "absent")
	}
	return nil
}

func statusWord(s ledger.Status) string {
	if s == "" {
		return "not settled yet"
	}
	return string(s)
}

// probeVendor sends one request twice under one fresh key and says whether
// the second answer was the first one's replay.
func probeVendor(ctx context.Context, w io.Writer, lk *resolver.Profiled, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return usageErrorf("--request: %v", err)
	}
	var req ledger.Request
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Method == "" || !strings.HasPrefix(req.Path, "/") {
		return usageErrorf("--request %s: want JSON {method, path (under api_base), content_type, body}", file)
	}
	p := lk.Profile()
	if !p.Idempotency.Places() {
		fmt.Fprintf(w, "vendor %s takes no key (idempotency: none): nothing to probe; use tool class write_ledger\n", p.Name)
		return nil
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	key := "probe-" + hex.EncodeToString(b[:])
	row := ledger.Row{Key: key, VendorKey: p.VendorKey(key), Request: &req, Vendor: p.Name}
	first, err := lk.Replay(ctx, row)
	if err != nil {
		return fmt.Errorf("probe, first send: %w", err)
	}
	second, err := lk.Replay(ctx, row)
	if err != nil {
		return fmt.Errorf("probe, second send: %w", err)
	}
	fmt.Fprintf(w, "sent twice with %s = %s\n", p.Idempotency, row.VendorKey)
	switch {
	case first.Page != "" || second.Page != "":
		fmt.Fprintf(w, "undecided: the vendor refused (%s%s)\n", first.Page, second.Page)
	case first.ReceiptID == "" || second.ReceiptID == "":
		fmt.Fprintln(w, "undecided: no receipt_path id in the answers to compare")
	case first.ReceiptID == second.ReceiptID:
		fmt.Fprintf(w, "replayed: both answers name %s — the vendor honours the key\n", first.ReceiptID)
	default:
		fmt.Fprintf(w, "NOT replayed: %s then %s — the vendor ignores the key; do not rely on it (replay_window 0, tool class write_ledger)\n", first.ReceiptID, second.ReceiptID)
	}
	return nil
}
