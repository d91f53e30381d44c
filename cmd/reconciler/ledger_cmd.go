package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/ledger"
)

// ledgerUsage is the help of `reconciler ledger`.
const ledgerUsage = `Usage:
  reconciler ledger list --tenant T [--status S] [--run-id R] [--limit N] [--cursor C] [--all] [--json]
  reconciler ledger show KEY --tenant T [--json]
  reconciler ledger resolve KEY --tenant T --status succeeded|failed_poison --note "why"
                           [--receipt-id ID] [--actor NAME] [--json]

An operator's view of the ledger through a running node's admin API.

  list     the tenant's rows, newest first: a table (key, status, run_id, tool,
           vendor, attempt, receipt, updated_at, paged), or one JSON object per
           line with --json. One page unless --all, which follows next_cursor.
  show     every field of one row.
  resolve  close an open row by hand; records who (--actor) and why (--note)
           and prints the row.

Common flags:
  --url URL        the node (default $RECONCILER_URL, else http://127.0.0.1:8080)
  --tenant T       the row's tenant (required: the admin token has none)
  --timeout D      bound on each request (default 10s)
  --json           print the API's JSON instead of text

The admin token is read from $RECONCILER_ADMIN_TOKEN, never from a flag (a
flag shows in the process list). A development node keeps it in
data/admin_token:  RECONCILER_ADMIN_TOKEN=$(cat data/admin_token) reconciler ledger …

Exit status: 0 on success, 1 when the API refuses or cannot be reached
(the API's error is printed as one line: "reconciler ledger: 404 not_found: …"),
2 for a usage error.
`

// Defaults and bounds of the ledger command.
const (
	ledgerDefaultURL     = "http://127.0.0.1:8080"
	ledgerDefaultTimeout = 10 * time.Second
	ledgerEnvURL         = "RECONCILER_URL"
	// ledgerMaxAnswer caps one API answer: a page of MaxListLimit rows, each
	// of which may keep a request body of up to the API's body limit, is
	// large but finite; past this the answer is refused, not truncated.
	ledgerMaxAnswer = 64 << 20
)

// ledgerUsageError is a mistake in the command line: exit 2 with the help.
type ledgerUsageError struct{ msg string }

func (e *ledgerUsageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error {
	return &ledgerUsageError{msg: fmt.Sprintf(format, a...)}
}

// runLedger runs `reconciler ledger list|show|resolve`; the lead wires it as
// the subcommand. getenv is os.Getenv in production. It never prints the
// token: the token travels only in the Authorization header.
func runLedger(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return subcommandExit("ledger", ledgerUsage, ledgerMain(ctx, args, stdout, stderr, getenv), stdout, stderr)
}

// subcommandExit prints how an admin subcommand (ledger, tools) ended and
// returns its exit code: 0 done or --help, 2 a usage error, 1 anything
// else, in one line.
func subcommandExit(name, usage string, err error, stdout, stderr io.Writer) int {
	var ue *ledgerUsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "reconciler %s: %s\n", name, ledgerClean(ue.msg))
		fmt.Fprintf(stderr, "run 'reconciler %s --help' for usage\n", name)
		return 2
	default:
		fmt.Fprintf(stderr, "reconciler %s: %s\n", name, ledgerClean(oneLine(err)))
		return 1
	}
}

// ledgerOpts are the flags of every subcommand; each uses a subset.
type ledgerOpts struct {
	url, tenant, token string
	timeout            time.Duration
	json               bool

	// list
	status, runID, cursor string
	limit                 int
	all                   bool

	// resolve
	note, receiptID, actor string
}

func ledgerMain(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return usageErrorf("want a subcommand: list, show or resolve")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	case "list", "show", "resolve":
	default:
		return usageErrorf("unknown subcommand %q: want list, show or resolve", sub)
	}

	o := ledgerOpts{url: getenv(ledgerEnvURL), timeout: ledgerDefaultTimeout}
	if o.url == "" {
		o.url = ledgerDefaultURL
	}
	fs := flag.NewFlagSet("reconciler ledger "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // we print our own help and one-line errors
	fs.StringVar(&o.url, "url", o.url, "")
	fs.StringVar(&o.tenant, "tenant", "", "")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "")
	fs.BoolVar(&o.json, "json", false, "")
	switch sub {
	case "list":
		fs.StringVar(&o.status, "status", "", "")
		fs.StringVar(&o.runID, "run-id", "", "")
		fs.StringVar(&o.cursor, "cursor", "", "")
		fs.IntVar(&o.limit, "limit", 0, "")
		fs.BoolVar(&o.all, "all", false, "")
	case "resolve":
		fs.StringVar(&o.status, "status", "", "")
		fs.StringVar(&o.note, "note", "", "")
		fs.StringVar(&o.receiptID, "receipt-id", "", "")
		// $USER is who is at the keyboard; the server records "admin" when
		// even that is unknown.
		fs.StringVar(&o.actor, "actor", getenv("USER"), "")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &ledgerUsageError{msg: err.Error()}
	}

	base, err := ledgerBaseURL(o.url)
	if err != nil {
		return err
	}
	if o.tenant == "" {
		return usageErrorf("--tenant is required: an admin token names the tenant it reads")
	}
	if err := ledger.ValidateTenant(o.tenant); err != nil {
		return usageErrorf("--tenant: %v", err)
	}
	if o.timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	var key string
	switch {
	case sub == "list" && len(pos) > 0:
		return usageErrorf("list takes no arguments, got %q", pos[0])
	case sub != "list" && len(pos) != 1:
		return usageErrorf("%s wants exactly one KEY, got %d", sub, len(pos))
	case sub != "list":
		key = pos[0]
		if err := ledger.ValidateKey(key); err != nil {
			return usageErrorf("KEY: %v", err)
		}
	}
	if err := o.validate(sub); err != nil {
		return err
	}
	// The token is checked last so that a malformed command line is reported
	// as such even where the variable is unset.
	o.token = strings.TrimSpace(getenv(config.EnvAdminToken))
	if o.token == "" {
		return usageErrorf("%s is not set (a development node keeps it in data/admin_token)", config.EnvAdminToken)
	}
	if strings.IndexFunc(o.token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return usageErrorf("%s holds white space or control characters", config.EnvAdminToken)
	}
	if !ledgerSafeTransport(base) {
		fmt.Fprintf(stderr, "reconciler ledger: warning: sending the admin token over plain http to %s\n", base.Host)
	}

	admin, err := newLedgerAPI(base, o)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		return ledgerList(ctx, admin, o, stdout, stderr)
	case "show":
		row, err := admin.c.GetJSON(ctx, key)
		if err != nil {
			return admin.failure(err)
		}
		return ledgerPrintRow(stdout, row, o.json)
	default:
		row, err := admin.c.ResolveJSON(ctx, key, client.ResolveRequest{
			Tenant: o.tenant, Status: ledger.Status(o.status), ReceiptID: o.receiptID, Note: o.note, Actor: o.actor,
		})
		if err != nil {
			return admin.failure(err)
		}
		return ledgerPrintRow(stdout, row, o.json)
	}
}

// validate checks the subcommand's own flags before anything is sent.
func (o *ledgerOpts) validate(sub string) error {
	switch sub {
	case "list":
		if o.status != "" && !ledger.Status(o.status).Valid() {
			return usageErrorf("--status %q: want pending, unknown, succeeded or failed_poison", o.status)
		}
		if o.runID != "" {
			if err := ledger.ValidateRunID(o.runID); err != nil {
				return usageErrorf("--run-id: %v", err)
			}
		}
		if o.limit < 0 || o.limit > ledger.MaxListLimit {
			return usageErrorf("--limit must be 1 to %d", ledger.MaxListLimit)
		}
	case "resolve":
		if s := ledger.Status(o.status); s != ledger.StatusSucceeded && s != ledger.StatusFailedPoison {
			return usageErrorf("--status %q: want succeeded or failed_poison", o.status)
		}
		if strings.TrimSpace(o.note) == "" {
			return usageErrorf("--note is required: say why the row is resolved by hand")
		}
		if strings.IndexFunc(o.actor, unicode.IsControl) >= 0 {
			return usageErrorf("--actor must not contain control characters")
		}
	}
	return nil
}

// ledgerBaseURL checks --url: an http(s) origin, optionally with a path
// prefix (a node behind a proxy), never with credentials, query or fragment.
func ledgerBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, usageErrorf("--url: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, usageErrorf("--url %s: want an http:// or https:// URL", u.Redacted())
	case u.Host == "":
		return nil, usageErrorf("--url %s: no host", u.Redacted())
	case u.User != nil:
		return nil, usageErrorf("--url: credentials belong in %s, not the URL", config.EnvAdminToken)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, usageErrorf("--url %s: no query or fragment, please", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	return u, nil
}

// ledgerSafeTransport reports whether the token would travel encrypted or
// stay on this machine.
func ledgerSafeTransport(u *url.URL) bool {
	if u.Scheme == "https" {
		return true
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ledgerAPI is the admin API as the command uses it: a client.Client that
// sends each request once (an operator reruns by hand; a resolve is never
// resent behind their back), never follows a redirect, and whose failures
// failure words as one line.
type ledgerAPI struct {
	c       *client.Client
	timeout time.Duration
	// location is the Location of the last redirect refused.
	location string
}

func newLedgerAPI(base *url.URL, o ledgerOpts) (*ledgerAPI, error) {
	a := &ledgerAPI{timeout: o.timeout}
	hc := &http.Client{
		// A redirect is reported, not followed: the token would go
		// wherever the Location points.
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			a.location = req.Response.Header.Get("Location")
			return http.ErrUseLastResponse
		},
	}
	c, err := client.New(base.String(), o.token,
		client.WithHTTPClient(hc), client.WithTenant(o.tenant), client.WithRequestTimeout(o.timeout),
		client.WithRetries(0, time.Second), // one send; the backoff never applies
		client.WithMaxResponse(ledgerMaxAnswer))
	if err != nil {
		return nil, err
	}
	a.c = c
	return a, nil
}

// failure words a failed request the way the command prints it: the API's
// "404 not_found: no such claim" (for an answer that is not the API's, the
// status and the start of the body, on one line), a redirect with its
// target, a timeout as --timeout's, and a transport failure as net/http
// says it (its method and URL hold no secret). It is the command's last
// layer, so it keeps only the words.
func (a *ledgerAPI) failure(err error) error {
	var ae *client.Error
	var ue *url.Error
	switch {
	case errors.As(err, &ae):
		msg := strings.Join(strings.Fields(ae.Message), " ")
		if ae.Status/100 == 3 && a.location != "" {
			msg = "redirected to " + a.location + "; point --url there"
		}
		return fmt.Errorf("%d %s: %s", ae.Status, ae.Code, cmp.Or(msg, "(empty answer)"))
	case errors.As(err, &ue) && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s %s: no answer within %s (--timeout)", strings.ToUpper(ue.Op), ue.URL, a.timeout)
	case errors.As(err, &ue):
		return ue
	}
	return err
}

func ledgerList(ctx context.Context, admin *ledgerAPI, o ledgerOpts, stdout, stderr io.Writer) error {
	q := client.ListQuery{Status: ledger.Status(o.status), RunID: o.runID, Limit: o.limit, Cursor: o.cursor}
	// The table starts with the first page, so a request that fails at once
	// leaves stdout empty.
	var tw *tabwriter.Writer
	seen := map[string]bool{}
	n := 0
	for {
		p, err := admin.c.ListJSON(ctx, q)
		if err != nil {
			return ledgerFlushThen(tw, admin.failure(err))
		}
		if !o.json && tw == nil {
			tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSTATUS\tRUN_ID\tTOOL\tVENDOR\tATTEMPT\tRECEIPT\tUPDATED_AT\tPAGED")
		}
		for _, raw := range p.Rows {
			if err := ledgerListRow(stdout, tw, raw); err != nil {
				return ledgerFlushThen(tw, err)
			}
			n++
		}
		if p.NextCursor == "" {
			break
		}
		if !o.all {
			if err := ledgerFlushThen(tw, nil); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "more rows: rerun with --cursor %s (or --all for every page)\n", ledgerClean(p.NextCursor))
			return nil
		}
		// A server that hands back a cursor it already gave would keep us
		// here for ever; stop instead.
		if seen[p.NextCursor] {
			return ledgerFlushThen(tw, errors.New("the server repeated a cursor; stopping"))
		}
		seen[p.NextCursor] = true
		q.Cursor = p.NextCursor
	}
	if err := ledgerFlushThen(tw, nil); err != nil {
		return err
	}
	if !o.json && n == 0 {
		fmt.Fprintln(stderr, "no rows")
	}
	return nil
}

// ledgerFlushThen prints the rows gathered so far, then reports err: rows
// already fetched are not lost when a later page fails.
func ledgerFlushThen(tw *tabwriter.Writer, err error) error {
	if tw == nil {
		return err
	}
	if ferr := tw.Flush(); ferr != nil && err == nil {
		return fmt.Errorf("write: %w", ferr)
	}
	return err
}

func ledgerListRow(stdout io.Writer, tw *tabwriter.Writer, raw json.RawMessage) error {
	if tw == nil {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return fmt.Errorf("decode row: %w", err)
		}
		b.WriteByte('\n')
		_, err := stdout.Write(b.Bytes())
		return err
	}
	var r ledger.Row
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("decode row: %w", err)
	}
	paged := "-"
	if !r.PagedAt.IsZero() {
		paged = ledgerTime(r.PagedAt)
	}
	cells := []string{
		r.Key, string(r.Status), r.RunID, r.Tool, r.Vendor, strconv.Itoa(r.Attempt),
		r.UpstreamReceiptID, ledgerTime(r.UpdatedAt), paged,
	}
	for i, s := range cells {
		// A tab in a cell would shift the columns.
		cells[i] = strings.ReplaceAll(ledgerCell(s), "\t", " ")
	}
	_, err := fmt.Fprintln(tw, strings.Join(cells, "\t"))
	return err
}

func ledgerTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func ledgerCell(s string) string {
	if s == "" {
		return "-"
	}
	return ledgerClean(s)
}

// ledgerClean makes server-supplied text safe for a terminal: a note or a
// vendor's detail with control characters (an escape sequence, a newline
// that forges a line) is shown quoted instead.
func ledgerClean(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

// ledgerRowOrder is the order show prints a row's fields in: identity,
// state, the vendor's last word, times, then the nested records. Fields the
// server sends that are not listed follow in name order, so a newer server's
// fields are shown too.
var ledgerRowOrder = []string{
	"key", "vendor_key", "tenant", "status", "run_id", "tool", "tool_call_id", "vendor", "tool_class", "autonomy",
	"attempt", "upstream_receipt_id", "idempotent_replayed", "vendor_should_retry", "last_http_status",
	"intent_fingerprint", "metadata_local_id",
	"first_seen_at", "updated_at", "succeeded_at", "pending_until", "replay_window_until", "next_check_at", "paged_at",
	"compensation_of", "compensation_action",
	"approval", "expect", "request", "resolution", "alerts",
	// Last: a stored result may run to 64 KiB.
	"result",
}

// ledgerAbsent is what an absent field means where that is not "none": the
// API omits a false flag.
var ledgerAbsent = map[string]string{"idempotent_replayed": "false"}

// ledgerPrintRow prints a row as the server sent it: compact JSON with
// asJSON, else one "field  value" line per field, nested records flattened
// (resolution.actor, alerts[0].kind). Absent fields print "-", so the
// operator sees that a row was never paged rather than guessing.
func ledgerPrintRow(w io.Writer, row json.RawMessage, asJSON bool) error {
	if len(row) == 0 || row[0] != '{' {
		return errors.New("decode row: the answer holds no row")
	}
	if asJSON {
		var b bytes.Buffer
		if err := json.Compact(&b, row); err != nil {
			return fmt.Errorf("decode row: %w", err)
		}
		b.WriteByte('\n')
		_, err := w.Write(b.Bytes())
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(row))
	dec.UseNumber() // amounts and counts print exactly as sent
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return fmt.Errorf("decode row: %w", err)
	}
	keys := slices.Clone(ledgerRowOrder)
	var extra []string
	for k := range fields {
		if !slices.Contains(ledgerRowOrder, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	keys = append(keys, extra...)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range keys {
		v, ok := fields[k]
		if !ok || v == nil {
			fmt.Fprintf(tw, "%s\t%s\n", k, cmp.Or(ledgerAbsent[k], "-"))
			continue
		}
		ledgerFlatten(tw, k, v)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func ledgerFlatten(tw io.Writer, name string, v any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			fmt.Fprintf(tw, "%s\t-\n", name)
			return
		}
		ks := make([]string, 0, len(x))
		for k := range x {
			ks = append(ks, k)
		}
		slices.SortFunc(ks, ledgerNestedOrder)
		for _, k := range ks {
			ledgerFlatten(tw, name+"."+k, x[k])
		}
	case []any:
		if len(x) == 0 {
			fmt.Fprintf(tw, "%s\t-\n", name)
			return
		}
		for i, e := range x {
			ledgerFlatten(tw, fmt.Sprintf("%s[%d]", name, i), e)
		}
	case string:
		fmt.Fprintf(tw, "%s\t%s\n", name, strings.ReplaceAll(ledgerCell(x), "\t", " "))
	case nil:
		fmt.Fprintf(tw, "%s\t-\n", name)
	default: // json.Number, bool
		fmt.Fprintf(tw, "%s\t%v\n", name, x)
	}
}

// ledgerNestedOrder puts the telling fields of a nested record first
// (resolution.source before .at, alerts[i].kind before .detail), the rest
// in name order.
func ledgerNestedOrder(a, b string) int {
	first := []string{"kind", "source", "status", "actor", "note", "method", "path", "amount", "currency"}
	ia, ib := slices.Index(first, a), slices.Index(first, b)
	switch {
	case ia >= 0 && ib >= 0:
		return ia - ib
	case ia >= 0:
		return -1
	case ib >= 0:
		return 1
	}
	return strings.Compare(a, b)
}
