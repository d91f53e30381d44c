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
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/internal/yamlnode"
	"github.com/agentledger/reconciler/ledger"
)

// toolsUsage is the help of `reconciler tools`.
const toolsUsage = `Usage:
  reconciler tools apply -f FILE [--dry-run] [--json]
  reconciler tools list [--tenant T] [--json]
  reconciler tools show NAME [--tenant T] [--json]
  reconciler tools delete NAME

A tenant's tool registry (docs/architecture.md §11) through a running node's API.

  apply    register every entry of FILE (YAML or JSON; - reads stdin): a list
           under "tools:", each entry's fields named as the API's JSON (name,
           vendor, class, side_effect, key_placement, intent_fields,
           checklist, autonomy, policy). The whole file is checked first —
           YAML syntax, unknown or misspelt fields, types, names — and
           nothing is sent when any check fails. Then each entry is PUT in
           file order and one line printed: created, changed or unchanged.
           An entry the API refuses (400: its message names the field) is
           reported and the rest are still applied; the exit status is then 1.
           Any other failure (unreachable, 401, 403, 5xx) stops at once.
           --dry-run checks the file and sends nothing.
  list     the registry: name, vendor, class, autonomy asked for, the
           effective autonomy, open checklist boxes, version, updated_at.
  show     every field of one entry.
  delete   unregister a tool: its claims are then served as any
           unregistered tool's.

Common flags:
  --url URL        the node (default $RECONCILER_URL, else http://127.0.0.1:8080)
  --timeout D      bound on each request (default 10s)
  --json           print JSON (one object a line) instead of text
  --tenant T       list and show only: read tenant T's registry with the
                   admin token ($RECONCILER_ADMIN_TOKEN)

The tenant's token is read from $RECONCILER_TOKEN, never from a flag (a flag
shows in the process list); the registry written is that token's tenant's.
A development node keeps it in data/token:
  RECONCILER_TOKEN=$(cat data/token) reconciler tools apply -f tools.yaml

Exit status: 0 on success, 1 when the file has problems, the API refuses an
entry or cannot be reached, 2 for a usage error.
`

// toolsMaxFile caps a registry file: a few thousand entries fit.
const toolsMaxFile = 4 << 20

// runTools runs `reconciler tools apply|list|show|delete`. getenv is
// os.Getenv in production, stdin what `-f -` reads. It never prints a
// token: a token travels only in the Authorization header.
func runTools(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return subcommandExit("tools", toolsUsage, toolsMain(ctx, args, stdin, stdout, stderr, getenv), stdout, stderr)
}

// toolsAdminHint turns the API's answer to an admin token that named no
// tenant (it speaks of ?tenant=) into what the command wants: --tenant,
// with the token in the admin variable.
func toolsAdminHint(printed, err error, tenant string) error {
	var ae *client.Error
	if tenant == "" && errors.As(err, &ae) && ae.Code == "invalid_input" && strings.Contains(ae.Message, "?tenant=") {
		return fmt.Errorf("%w (an admin token reads a tenant's registry with --tenant T and the token in %s)", printed, config.EnvAdminToken)
	}
	return printed
}

// toolsOpts are the flags of every subcommand; each uses a subset.
type toolsOpts struct {
	url, tenant, file string
	timeout           time.Duration
	json, dryRun      bool
}

func toolsMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return usageErrorf("want a subcommand: apply, list, show or delete")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	case "apply", "list", "show", "delete":
	default:
		return usageErrorf("unknown subcommand %q: want apply, list, show or delete", sub)
	}

	o := toolsOpts{url: cmp.Or(getenv(ledgerEnvURL), ledgerDefaultURL), timeout: ledgerDefaultTimeout}
	fs := flag.NewFlagSet("reconciler tools "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // we print our own help and one-line errors
	fs.StringVar(&o.url, "url", o.url, "")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "")
	switch sub {
	case "apply":
		fs.StringVar(&o.file, "f", "", "")
		fs.StringVar(&o.file, "file", "", "")
		fs.BoolVar(&o.dryRun, "dry-run", false, "")
		fs.BoolVar(&o.json, "json", false, "")
	case "list", "show":
		fs.StringVar(&o.tenant, "tenant", "", "")
		fs.BoolVar(&o.json, "json", false, "")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		if strings.Contains(err.Error(), "-tenant") {
			return usageErrorf("%v: the registry is written with the tenant's own token (%s); --tenant is for list and show", err, config.EnvToken)
		}
		return &ledgerUsageError{msg: err.Error()}
	}
	if u, err := url.Parse(o.url); err == nil && u.User != nil && o.tenant == "" {
		// ledgerBaseURL would name the admin token's variable.
		return usageErrorf("--url: credentials belong in %s, not the URL", config.EnvToken)
	}
	base, err := ledgerBaseURL(o.url)
	if err != nil {
		return err
	}
	if o.timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	if o.tenant != "" {
		if err := ledger.ValidateTenant(o.tenant); err != nil {
			return usageErrorf("--tenant: %v", err)
		}
	}
	var name string
	switch {
	case sub == "apply" && o.file == "":
		return usageErrorf("apply wants -f FILE (- for stdin)")
	case (sub == "apply" || sub == "list") && len(pos) > 0:
		return usageErrorf("%s takes no arguments, got %q", sub, pos[0])
	case (sub == "show" || sub == "delete") && len(pos) != 1:
		return usageErrorf("%s wants exactly one tool NAME, got %d", sub, len(pos))
	case sub == "show" || sub == "delete":
		name = pos[0]
		if err := ledger.ValidateToolID(config.DefaultTenant, name); err != nil {
			return usageErrorf("NAME: %v", err)
		}
	}

	// The file is read and checked before the token: a file with problems
	// is reported as such wherever it is checked, and --dry-run needs none.
	var items []toolsItem
	if sub == "apply" {
		if items, err = readToolsFile(o.file, stdin); err != nil {
			return toolsReportFile(stderr, err)
		}
		if o.dryRun {
			for _, it := range items {
				fmt.Fprintf(stdout, "%-9s %s (not sent)\n", "valid", it.tool.Name)
			}
			return nil
		}
	}

	tokenEnv := config.EnvToken
	if o.tenant != "" {
		tokenEnv = config.EnvAdminToken
	}
	token := strings.TrimSpace(getenv(tokenEnv))
	switch {
	case token == "" && tokenEnv == config.EnvToken:
		return usageErrorf("%s is not set: the tenant's token (a development node keeps it in data/token; with --tenant, list and show read with %s)", config.EnvToken, config.EnvAdminToken)
	case token == "":
		return usageErrorf("%s is not set: --tenant reads with the admin token (a development node keeps it in data/admin_token)", config.EnvAdminToken)
	case strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return usageErrorf("%s holds white space or control characters", tokenEnv)
	}
	if !ledgerSafeTransport(base) {
		fmt.Fprintf(stderr, "reconciler tools: warning: sending the token over plain http to %s\n", base.Host)
	}
	api, err := newLedgerAPI(base, ledgerOpts{token: token, tenant: o.tenant, timeout: o.timeout})
	if err != nil {
		return err
	}

	switch sub {
	case "apply":
		return toolsApply(ctx, api, items, o, stdout, stderr)
	case "list":
		list, err := api.c.ListTools(ctx)
		if err != nil {
			return toolsAdminHint(api.failure(err), err, o.tenant)
		}
		return toolsPrintList(stdout, stderr, list, o.json)
	case "show":
		t, err := api.c.GetTool(ctx, name)
		if err != nil {
			return toolsAdminHint(api.failure(err), err, o.tenant)
		}
		return toolsPrintTool(stdout, t, o.json)
	default:
		if err := api.c.DeleteTool(ctx, name); err != nil {
			return api.failure(err)
		}
		fmt.Fprintf(stdout, "%-9s %s\n", "deleted", name)
		return nil
	}
}

// toolsEntryRefused reports whether an API refusal concerns the entry sent
// (so the next entry may fare better) rather than the token, the node or
// the network (where every entry would fail the same way).
func toolsEntryRefused(err error) bool {
	var ae *client.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// toolsApply PUTs each entry in file order. Entries are independent and a
// PUT is all or nothing for its tool, so a refused entry leaves its stored
// version as it was and the others are still applied; a rerun after the fix
// reports them unchanged.
func toolsApply(ctx context.Context, api *ledgerAPI, items []toolsItem, o toolsOpts, stdout, stderr io.Writer) error {
	refused := 0
	for i, it := range items {
		stored, changed, err := api.c.PutTool(ctx, it.tool)
		if err != nil {
			ferr := api.failure(err)
			if toolsEntryRefused(err) {
				refused++
				fmt.Fprintf(stderr, "reconciler tools: %s (%s): %s\n", it.tool.Name, it.where, ledgerClean(oneLine(ferr)))
				continue
			}
			return fmt.Errorf("%s: %w (%d of %d entries not sent)", it.tool.Name, ferr, len(items)-i, len(items))
		}
		result := "unchanged"
		switch {
		case changed && stored.Version == 1:
			result = "created"
		case changed:
			result = "changed"
		}
		if o.json {
			line, err := json.Marshal(struct {
				Result string      `json:"result"`
				Tool   ledger.Tool `json:"tool"`
			}{result, stored})
			if err != nil {
				return fmt.Errorf("encode %s: %w", stored.Name, err)
			}
			fmt.Fprintf(stdout, "%s\n", line)
			continue
		}
		note := ""
		// Say so when claims will not get what the entry asks for: the
		// operator learns of an open box here, not from the first gated claim.
		if eff, why := stored.EffectiveAutonomy(); stored.Class != ledger.ClassRead && eff != cmp.Or(stored.Autonomy, ledger.AutonomyAutonomous) {
			note = fmt.Sprintf("; claims get %s: %s", eff, why)
		}
		fmt.Fprintf(stdout, "%-9s %s (version %d)%s\n", result, ledgerClean(stored.Name), stored.Version, note)
	}
	switch {
	case refused > 0 && refused == len(items):
		// Each refusal is printed above; this is the summary.
		if refused == 1 {
			return errors.New("its one entry was refused; nothing is applied")
		}
		return fmt.Errorf("all %d entries refused; nothing is applied", refused)
	case refused > 0:
		return fmt.Errorf("%d of %d entries refused; the others are applied", refused, len(items))
	}
	return nil
}

// toolsReportFile prints each problem of a registry file on its own line
// and returns the summary the command exits with.
func toolsReportFile(stderr io.Writer, err error) error {
	var fe *toolsFileError
	if !errors.As(err, &fe) {
		return err
	}
	for _, p := range fe.problems {
		fmt.Fprintf(stderr, "reconciler tools: %s\n", ledgerClean(p.String()))
	}
	n := len(fe.problems)
	return fmt.Errorf("%s: %d %s; nothing was sent", fe.file, n, plural(n, "problem", "problems"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// toolsPrintList prints the registry as a table, or one entry a line as
// JSON.
func toolsPrintList(stdout, stderr io.Writer, list []ledger.Tool, asJSON bool) error {
	if asJSON {
		for _, t := range list {
			line, err := json.Marshal(t)
			if err != nil {
				return fmt.Errorf("encode %s: %w", t.Name, err)
			}
			fmt.Fprintf(stdout, "%s\n", line)
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVENDOR\tCLASS\tAUTONOMY\tEFFECTIVE\tOPEN\tVERSION\tUPDATED_AT")
	for _, t := range list {
		autonomy, eff, open := "-", "-", "-"
		if t.Class != ledger.ClassRead {
			// An empty autonomy is autonomous; the table says what applies.
			autonomy = string(cmp.Or(t.Autonomy, ledger.AutonomyAutonomous))
			e, _ := t.EffectiveAutonomy()
			eff, open = string(e), strconv.Itoa(len(t.Checklist.Open()))
		}
		cells := []string{t.Name, t.Vendor, string(t.Class), autonomy, eff, open, strconv.FormatInt(t.Version, 10), ledgerTime(t.UpdatedAt)}
		for i, s := range cells {
			cells[i] = strings.ReplaceAll(ledgerCell(s), "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if len(list) == 0 {
		fmt.Fprintln(stderr, "no tools registered")
	}
	return nil
}

// toolsFieldOrder is the order show prints an entry's fields in.
var toolsFieldOrder = []string{
	"name", "tenant", "vendor", "class", "side_effect", "key_placement", "intent_fields",
	"autonomy", "effective_autonomy", "policy", "checklist", "version", "created_at", "updated_at",
}

// toolsPrintTool prints every field of an entry, one "field  value" line
// each (nested ones flattened: checklist.checked_by), plus the effective
// autonomy and why, which claims of the tool get.
func toolsPrintTool(w io.Writer, t ledger.Tool, asJSON bool) error {
	raw, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode %s: %w", t.Name, err)
	}
	if asJSON {
		_, err := fmt.Fprintf(w, "%s\n", raw)
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return fmt.Errorf("decode %s: %w", t.Name, err)
	}
	eff, why := t.EffectiveAutonomy()
	fields["effective_autonomy"] = string(eff)
	if why != "" {
		fields["effective_autonomy"] = string(eff) + " (" + why + ")"
	}
	keys := slices.Clone(toolsFieldOrder)
	var extra []string
	for k := range fields {
		if !slices.Contains(keys, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range append(keys, extra...) {
		v, ok := fields[k]
		if !ok || v == nil {
			fmt.Fprintf(tw, "%s\t-\n", k)
			continue
		}
		ledgerFlatten(tw, k, v)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// A registry file.

// toolsItem is one entry of a registry file and where it is.
type toolsItem struct {
	tool  ledger.Tool
	where string // file:line
}

// toolsProblem is one problem of a registry file, located.
type toolsProblem struct {
	file string
	line int
	path string // tools[2].checklist.checked_by
	msg  string
}

func (p toolsProblem) String() string {
	var b strings.Builder
	b.WriteString(p.file)
	if p.line > 0 {
		b.WriteString(":" + strconv.Itoa(p.line))
	}
	b.WriteString(": ")
	if p.path != "" {
		b.WriteString(p.path + ": ")
	}
	b.WriteString(p.msg)
	return b.String()
}

// toolsFileError is every problem found in a registry file, top to bottom.
type toolsFileError struct {
	file     string
	problems []toolsProblem
}

func (e *toolsFileError) Error() string {
	s := make([]string, len(e.problems))
	for i, p := range e.problems {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// Limits that keep a broken or hostile file cheap: aliases can make a small
// document expand to millions of nodes.
const (
	toolsMaxNodes    = 100_000
	toolsMaxProblems = 50
)

// toolsStoreFields are ledger.Tool's fields a file may not set: the token
// names the tenant, the store keeps the rest (the API refuses them too).
var toolsStoreFields = map[string]string{
	"tenant":     "the token names the tenant",
	"version":    "the store counts versions",
	"created_at": "the store keeps the times",
	"updated_at": "the store keeps the times",
}

// readToolsFile reads and checks a registry file ("-": stdin).
func readToolsFile(name string, stdin io.Reader) ([]toolsItem, error) {
	var r io.Reader
	display := name
	if name == "-" {
		r, display = stdin, "stdin"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, toolsMaxFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", display, err)
	}
	if len(data) > toolsMaxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", display, toolsMaxFile)
	}
	return decodeToolsFile(display, data)
}

// decodeToolsFile decodes a registry file: a mapping whose one key, tools,
// holds a list of entries, each a mapping of the API's JSON field names
// (JSON is YAML, so a JSON file reads the same way). The document is walked
// as a yaml.Node tree against ledger.Tool's json tags, so every problem —
// an unknown or duplicate key, a type that does not fit, a missing or
// repeated name — is reported with its line, all of them at once. Values
// are the API's to judge: a newer node may know a class this build does not.
func decodeToolsFile(file string, data []byte) ([]toolsItem, error) {
	d := &toolsDecoder{file: file, budget: toolsMaxNodes}
	var doc yaml.Node
	if err := yamlnode.ParseOne(data, &doc, `the file holds one, its entries under "tools"`); err != nil {
		// "yaml: line 4: did not find …" reads as the other problems do: file:4: did not find …
		p := toolsProblem{file: file, msg: err.Error()}
		if m := toolsYAMLLine.FindStringSubmatch(p.msg); m != nil {
			p.line, _ = strconv.Atoi(m[1])
			p.msg = m[2]
		}
		return nil, &toolsFileError{file: file, problems: []toolsProblem{p}}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
		return nil, &toolsFileError{file: file, problems: []toolsProblem{{file: file, msg: `empty: want a list of entries under "tools:"`}}}
	}
	root := d.deref(doc.Content[0], "", doc.Content[0].Line)
	if root == nil {
		return nil, d.err()
	}
	if root.Kind == yaml.SequenceNode {
		d.fail(root.Line, "", `a list at the top: put the entries under "tools:"`)
		return nil, d.err()
	}
	var list *yaml.Node
	d.mapping(root, "", root.Line, func(key, val *yaml.Node) {
		if key.Value != "tools" {
			d.fail(key.Line, key.Value, `unknown key: the file holds one key, "tools", a list of entries`)
			return
		}
		list = d.deref(val, "tools", key.Line)
		if list != nil && list.Kind != yaml.SequenceNode {
			d.fail(key.Line, "tools", "want a list of entries, got %s", toolsKind(list))
			list = nil
		}
	})
	if list == nil && len(d.problems) == 0 {
		d.fail(root.Line, "", `no "tools:" list`)
	}
	var items []toolsItem
	firstLine := map[string]int{}
	if list != nil {
		if len(list.Content) == 0 {
			d.fail(list.Line, "tools", "the list is empty")
		}
		for i, n := range list.Content {
			if d.budget < 0 {
				break // reported once; the rest would only add noise
			}
			path := "tools[" + strconv.Itoa(i) + "]"
			var t ledger.Tool
			before := len(d.problems)
			d.decode(n, reflect.ValueOf(&t).Elem(), path, n.Line)
			if len(d.problems) > before {
				continue
			}
			// An entry's name is reported where it is written, an alias's
			// where the alias is.
			nameLine := n.Line
			if n.Kind == yaml.MappingNode {
				nameLine = d.lineOf(n, "name")
			}
			switch first, dup := firstLine[t.Name]; {
			case t.Name == "":
				d.fail(n.Line, path+".name", "required: the tool's name, as claims name it")
			case ledger.ValidateToolID(config.DefaultTenant, t.Name) != nil:
				d.fail(nameLine, path+".name", "%q: want 1-128 of [A-Za-z0-9_.-], not only dots", t.Name)
			case dup:
				d.fail(nameLine, path+".name", "%q is listed twice (first at line %d)", t.Name, first)
			default:
				firstLine[t.Name] = nameLine
				items = append(items, toolsItem{tool: t, where: file + ":" + strconv.Itoa(n.Line)})
			}
		}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return items, nil
}

// toolsYAMLLine is how yaml.v3 (and yamlnode.ParseOne) locate a problem.
var toolsYAMLLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

type toolsDecoder struct {
	file     string
	problems []toolsProblem
	budget   int
}

func (d *toolsDecoder) fail(line int, path, format string, a ...any) {
	d.problems = append(d.problems, toolsProblem{file: d.file, line: line, path: path, msg: fmt.Sprintf(format, a...)})
}

func (d *toolsDecoder) err() error {
	if len(d.problems) == 0 {
		return nil
	}
	p := d.problems
	slices.SortStableFunc(p, func(a, b toolsProblem) int { return a.line - b.line })
	if len(p) > toolsMaxProblems {
		more := len(p) - toolsMaxProblems
		p = append(p[:toolsMaxProblems:toolsMaxProblems], toolsProblem{file: d.file, msg: fmt.Sprintf("and %d more problems", more)})
	}
	return &toolsFileError{file: d.file, problems: p}
}

// deref follows aliases; nil (reported) for one to nowhere or past the
// node budget.
func (d *toolsDecoder) deref(n *yaml.Node, path string, line int) *yaml.Node {
	d.budget--
	if d.budget < 0 {
		if d.budget == -1 {
			d.fail(line, "", "document too large (more than %d nodes after expanding aliases)", toolsMaxNodes)
		}
		return nil
	}
	for n != nil && n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.fail(line, path, "alias to an unknown anchor")
			return nil
		}
		n = n.Alias
	}
	return n
}

// lineOf is the line of key in mapping n, else n's.
func (d *toolsDecoder) lineOf(n *yaml.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

// mapping walks the entries of a mapping node, refusing duplicate keys,
// non-scalar keys and merge keys (<<), which would hide where a value came
// from.
func (d *toolsDecoder) mapping(n *yaml.Node, path string, line int, each func(key, val *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		d.fail(line, path, "want a mapping, got %s", toolsKind(n))
		return
	}
	yamlnode.Mapping(n, each, func(key *yaml.Node, duplicate bool, msg string) {
		if duplicate {
			d.fail(key.Line, yamlnode.JoinPath(path, key.Value), "%s", msg)
			return
		}
		d.fail(key.Line, path, "%s", msg)
	})
}

var toolsTimeType = reflect.TypeFor[time.Time]()

// decode stores node n into v, a part of ledger.Tool: a struct (by json
// tag), a string kind, a bool, a []string or a time.Time. line is where
// the value is written (the key's line for a mapping entry).
func (d *toolsDecoder) decode(n *yaml.Node, v reflect.Value, path string, line int) {
	if n = d.deref(n, path, line); n == nil {
		return
	}
	null := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
	t := v.Type()
	switch {
	case t == toolsTimeType:
		if null {
			return
		}
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!timestamp") {
			d.fail(line, path, "want an RFC 3339 time such as 2026-01-15T10:00:00Z, got %s", toolsKind(n))
			return
		}
		at, err := time.Parse(time.RFC3339Nano, n.Value)
		if err != nil {
			d.fail(line, path, "%q: want an RFC 3339 time such as 2026-01-15T10:00:00Z", yamlnode.Truncate(n.Value, 40))
			return
		}
		v.Set(reflect.ValueOf(at))
	case t.Kind() == reflect.String:
		if null {
			return
		}
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			d.fail(line, path, "want a string, got %s (quote it)", toolsKind(n))
			return
		}
		v.SetString(n.Value)
	case t.Kind() == reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.fail(line, path, "want true or false, got %s", toolsKind(n))
			return
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			d.fail(line, path, "want true or false, got %q", yamlnode.Truncate(n.Value, 40))
			return
		}
		v.SetBool(b)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		if null {
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(line, path, "want a list, got %s", toolsKind(n))
			return
		}
		out := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, out.Index(i), path+"["+strconv.Itoa(i)+"]", item.Line)
		}
		v.Set(out)
	case t.Kind() == reflect.Struct:
		if null {
			return
		}
		d.mapping(n, path, line, func(key, val *yaml.Node) {
			p := yamlnode.JoinPath(path, key.Value)
			if why, ok := toolsStoreFields[key.Value]; ok && t == reflect.TypeFor[ledger.Tool]() {
				d.fail(key.Line, p, "not part of an entry: %s", why)
				return
			}
			i, ok := toolsField(t, key.Value)
			if !ok {
				d.fail(key.Line, p, "unknown field (known: %s)", strings.Join(toolsFieldNames(t), ", "))
				return
			}
			d.decode(val, v.Field(i), p, key.Line)
		})
	default:
		// ledger.Tool holds only the kinds above; a new field kind must be taught here.
		d.fail(line, path, "internal error: cannot decode into %s", t)
	}
}

// toolsJSONName is the field's JSON name, "" for one not in JSON.
func toolsJSONName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return cmp.Or(name, f.Name)
}

func toolsField(t reflect.Type, name string) (int, bool) {
	for i := range t.NumField() {
		if toolsJSONName(t.Field(i)) == name {
			return i, true
		}
	}
	return 0, false
}

// toolsFieldNames lists the names an entry (or a nested record) may use.
func toolsFieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		n := toolsJSONName(t.Field(i))
		if _, store := toolsStoreFields[n]; n == "" || store && t == reflect.TypeFor[ledger.Tool]() {
			continue
		}
		names = append(names, n)
	}
	return names
}

func toolsKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!str":
			return strconv.Quote(yamlnode.Truncate(n.Value, 40))
		}
		return yamlnode.Truncate(n.Value, 40)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}
