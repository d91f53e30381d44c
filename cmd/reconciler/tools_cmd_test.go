package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/ledger"
)

// toolsNode is the real program serving, behind a proxy that records every
// request, so a test can assert what the command sent (or did not).
type toolsNode struct {
	t    *testing.T
	m    *testMain
	url  string
	mu   sync.Mutex
	seen []string // "PUT /v1/tools/x"
}

func newToolsNode(t *testing.T) *toolsNode {
	t.Helper()
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	n := &toolsNode{t: t, m: m}
	target := &url.URL{Scheme: "http", Host: m.HTTPAddr()}
	proxy := httputil.NewSingleHostReverseProxy(target)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.seen = append(n.seen, r.Method+" "+r.URL.Path)
		n.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	n.url = hs.URL
	return n
}

// requests returns and forgets the requests seen so far.
func (n *toolsNode) requests() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.seen
	n.seen = nil
	return s
}

// run drives runTools against the node: the tenant's token in
// RECONCILER_TOKEN unless env says otherwise ("" unsets).
func (n *toolsNode) run(env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	n.t.Helper()
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		switch k {
		case config.EnvToken:
			return e2eToken
		case ledgerEnvURL:
			return n.url
		}
		return ""
	}
	var out, errb bytes.Buffer
	code = runTools(context.Background(), args, strings.NewReader(stdin), &out, &errb, getenv)
	for _, tok := range []string{e2eToken, e2eAdmin} {
		if strings.Contains(out.String(), tok) || strings.Contains(errb.String(), tok) {
			n.t.Errorf("a token reached the output of %q", args)
		}
	}
	return code, out.String(), errb.String()
}

func readExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exampleNames are the entries of examples/tools.yaml, in file order.
var exampleNames = []string{"stripe.payment_intents.create", "bank.wire_transfers.create", "email.invoices.send", "stripe.customers.retrieve"}

func resultLines(result string, version int, names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, strings.Join(strings.Fields(result+" "+n+" (version "+strconv.Itoa(version)+")"), " "))
	}
	return out
}

// normLines folds each line's runs of spaces, so the padding of the result
// column does not matter.
func normLines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l != "" {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return out
}

// putCount counts the PUTs among requests.
func putCount(reqs []string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, http.MethodPut+" ") {
			n++
		}
	}
	return n
}

// TestToolsApply drives `reconciler tools apply` against the real program,
// step after step on one registry: create, reapply, change, refusals, and
// files or command lines that must not send anything.
func TestToolsApply(t *testing.T) {
	n := newToolsNode(t)
	example := readExample(t)
	file := configtest.WriteFile(t, "tools.yaml", []byte(example))
	changedPolicy := strings.Replace(example, "intent.amount <= 50000", "intent.amount <= 40000", 1)
	if changedPolicy == example {
		t.Fatal("the example's policy moved; update the test")
	}

	const badEntries = `tools:
  - name: good.one
    vendor: stripe
    class: write_idempotent
    side_effect: charge
    key_placement: {header: Idempotency-Key}
    checklist: {side_effect_documented: true, key_born_in_runtime: true, ledger_or_unique_field: true,
                timeout_leaves_unknown: true, error_classes_mapped: true, duplicate_delivery_test: true,
                checked_by: alice}
  - name: bad.class
    vendor: stripe
    class: write_sometimes
    side_effect: charge
    key_placement: {header: Idempotency-Key}
  - name: bad.policy
    vendor: stripe
    class: write_idempotent
    side_effect: charge
    key_placement: {header: Idempotency-Key}
    policy: "intent.amount <= "
`
	const typo = `tools:
  - name: typo.one
    vendor: stripe
    class: write_idempotent
    side_effect: charge
    key_placement: {header: Idempotency-Key}
  - name: typo.two
    vendor: stripe
    clas: write_idempotent
    side_effect: charge
    key_placement: {heder: Idempotency-Key}
`
	const syntax = "tools:\n  - name: x\n    policy: \"intent.amount < 5\n"
	const jsonFile = `{"tools": [{"name": "from.stdin", "vendor": "stripe", "class": "read"}]}`

	steps := []struct {
		name     string
		env      map[string]string
		stdin    string
		args     []string
		wantCode int
		wantOut  []string // exact lines of stdout, spaces folded; nil: not checked
		wantErr  []string // substrings of stderr
		wantPUTs int      // -1: not checked
		wantNone bool     // no request at all
	}{
		{
			name: "first apply creates every entry", args: []string{"apply", "-f", file},
			wantOut: resultLines("created", 1, exampleNames...), wantPUTs: 4,
		},
		{
			name: "second apply changes nothing", args: []string{"apply", "-f", file},
			wantOut: resultLines("unchanged", 1, exampleNames...), wantPUTs: 4,
		},
		{
			name: "a changed policy is changed, the rest unchanged", args: []string{"apply", "-f", "-"}, stdin: changedPolicy,
			wantOut: append(resultLines("changed", 2, exampleNames[0]), resultLines("unchanged", 1, exampleNames[1:]...)...), wantPUTs: 4,
		},
		{
			name: "refused entries are reported, the others applied", args: []string{"apply", "-f", "-"}, stdin: badEntries,
			wantCode: 1, wantOut: resultLines("created", 1, "good.one"), wantPUTs: 3,
			wantErr: []string{
				"reconciler tools: bad.class (stdin:10): 400 invalid_input: invalid class: want read, write_idempotent, write_ledger or write_irreversible",
				"reconciler tools: bad.policy (stdin:15): 400 invalid_input: invalid policy",
				"reconciler tools: 2 of 3 entries refused; the others are applied",
			},
		},
		{
			name: "a file whose one entry is refused applies nothing", args: []string{"apply", "-f", "-"},
			stdin:    "tools:\n  - name: bad.class\n    vendor: stripe\n    class: write_sometimes\n    side_effect: charge\n    key_placement: {header: Idempotency-Key}\n",
			wantCode: 1, wantOut: []string{}, wantPUTs: 1,
			wantErr: []string{
				"reconciler tools: bad.class (stdin:2): 400 invalid_input: invalid class: want read, write_idempotent, write_ledger or write_irreversible",
				"reconciler tools: its one entry was refused; nothing is applied",
			},
		},
		{
			name: "a typo is caught before any PUT", args: []string{"apply", "-f", "-"}, stdin: typo,
			wantCode: 1, wantOut: []string{}, wantNone: true,
			wantErr: []string{
				"reconciler tools: stdin:9: tools[1].clas: unknown field (known: name, vendor, class, side_effect, key_placement, intent_fields, checklist, autonomy, policy)",
				"reconciler tools: stdin:11: tools[1].key_placement.heder: unknown field (known: header, body_field, external_id_field, argument, none)",
				"reconciler tools: stdin: 2 problems; nothing was sent",
			},
		},
		{
			name: "a YAML syntax error names its line", args: []string{"apply", "-f", "-"}, stdin: syntax,
			wantCode: 1, wantOut: []string{}, wantNone: true,
			wantErr: []string{"reconciler tools: stdin:3: found unexpected end of stream", "nothing was sent"},
		},
		{
			name: "JSON on stdin", args: []string{"apply", "--json", "-f", "-"}, stdin: jsonFile,
			wantPUTs: 1,
		},
		{
			name: "no token", env: map[string]string{config.EnvToken: ""}, args: []string{"apply", "-f", file},
			wantCode: 2, wantOut: []string{}, wantNone: true,
			wantErr: []string{"reconciler tools: RECONCILER_TOKEN is not set: the tenant's token"},
		},
		{
			name: "dry run needs no token and sends nothing", env: map[string]string{config.EnvToken: ""}, args: []string{"apply", "--dry-run", "-f", file},
			wantOut: []string{"valid stripe.payment_intents.create (not sent)", "valid bank.wire_transfers.create (not sent)",
				"valid email.invoices.send (not sent)", "valid stripe.customers.retrieve (not sent)"}, wantNone: true,
		},
		{
			name: "apply refuses --tenant", args: []string{"apply", "-f", file, "--tenant", "default"},
			wantCode: 2, wantOut: []string{}, wantNone: true,
			wantErr: []string{"the registry is written with the tenant's own token (RECONCILER_TOKEN); --tenant is for list and show"},
		},
		{
			name: "no file", args: []string{"apply"},
			wantCode: 2, wantOut: []string{}, wantNone: true, wantErr: []string{"apply wants -f FILE"},
		},
		{
			name: "a file that is not there", args: []string{"apply", "-f", "/nonexistent/tools.yaml"},
			wantCode: 1, wantOut: []string{}, wantNone: true, wantErr: []string{"open /nonexistent/tools.yaml: no such file or directory"},
		},
		{
			name: "a wrong token stops at the first entry", env: map[string]string{config.EnvToken: "tok_wrong_toolscmd_123456"}, args: []string{"apply", "-f", file},
			wantCode: 1, wantOut: []string{}, wantPUTs: 1,
			wantErr: []string{"reconciler tools: stripe.payment_intents.create: 401 unauthorized:", "(4 of 4 entries not sent)"},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			code, out, errOut := n.run(s.env, s.stdin, s.args...)
			reqs := n.requests()
			if code != s.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, s.wantCode, out, errOut)
			}
			if s.wantOut != nil {
				got := normLines(out)
				if strings.Join(got, "\n") != strings.Join(s.wantOut, "\n") {
					t.Errorf("stdout:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(s.wantOut, "\n"))
				}
			}
			for _, w := range s.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if s.wantNone && len(reqs) > 0 {
				t.Errorf("the server got %q, want no request", reqs)
			}
			if !s.wantNone && putCount(reqs) != s.wantPUTs {
				t.Errorf("the server got %d PUTs (%q), want %d", putCount(reqs), reqs, s.wantPUTs)
			}
		})
	}

	// The JSON step printed one {result, tool} line.
	t.Run("json line", func(t *testing.T) {
		_, out, _ := n.run(nil, jsonFile, "apply", "--json", "-f", "-")
		var got struct {
			Result string      `json:"result"`
			Tool   ledger.Tool `json:"tool"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Result != "unchanged" || got.Tool.Name != "from.stdin" || got.Tool.Tenant != "default" {
			t.Errorf("got %q (%v), want one unchanged line for from.stdin", out, err)
		}
	})
	// The policy's refusal names the line and column of the problem.
	t.Run("policy position", func(t *testing.T) {
		_, _, errOut := n.run(nil, badEntries, "apply", "-f", "-")
		if !regexp.MustCompile(`bad\.policy .*invalid policy.*line 1, column \d+`).MatchString(errOut) {
			t.Errorf("the policy's refusal has no line:column:\n%s", errOut)
		}
	})
}

// TestToolsApplyNote: an entry whose claims will not get the autonomy it
// asks for says so, and why.
func TestToolsApplyNote(t *testing.T) {
	n := newToolsNode(t)
	const open = `tools:
  - name: half.checked
    vendor: stripe
    class: write_idempotent
    side_effect: charge
    key_placement: {header: Idempotency-Key}
    autonomy: autonomous
    checklist: {side_effect_documented: true, checked_by: alice}
`
	code, out, errOut := n.run(nil, open, "apply", "-f", "-")
	want := "created half.checked (version 1); claims get approval: checklist not complete: key_born_in_runtime, ledger_or_unique_field, timeout_leaves_unknown, error_classes_mapped, duplicate_delivery_test"
	if code != 0 || strings.Join(normLines(out), "\n") != want {
		t.Errorf("exit %d\n%s\nwant\n%s\nstderr %s", code, out, want, errOut)
	}
}

// TestToolsListShowDelete reads the registry back through the command.
func TestToolsListShowDelete(t *testing.T) {
	n := newToolsNode(t)
	if code, _, errOut := n.run(nil, readExample(t), "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, errOut)
	}
	admin := map[string]string{config.EnvToken: "", config.EnvAdminToken: e2eAdmin}

	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			env  map[string]string
			args []string
		}{
			{"tenant token", nil, []string{"list"}},
			{"admin token", admin, []string{"list", "--tenant", "default"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out, errOut := n.run(tc.env, "", tc.args...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
				if len(lines) != 5 {
					t.Fatalf("want a header and 4 rows:\n%s", out)
				}
				if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME VENDOR CLASS AUTONOMY EFFECTIVE OPEN VERSION UPDATED_AT" {
					t.Errorf("header %q", lines[0])
				}
				rows := map[string][]string{}
				for _, l := range lines[1:] {
					f := strings.Fields(l)
					if len(f) != 8 {
						t.Fatalf("row %q: want 8 cells", l)
					}
					rows[f[0]] = f[1:7] // the time varies
				}
				for name, want := range map[string]string{
					"stripe.payment_intents.create": "stripe write_idempotent autonomous autonomous 0 1",
					"bank.wire_transfers.create":    "acme_bank write_irreversible approval approval 0 1",
					"email.invoices.send":           "postmark write_ledger outbox outbox 0 1",
					"stripe.customers.retrieve":     "stripe read - - - 1",
				} {
					if got := strings.Join(rows[name], " "); got != want {
						t.Errorf("%s: %q, want %q", name, got, want)
					}
				}
				if !regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s*$`).MatchString(lines[1]) {
					t.Errorf("updated_at is not an RFC 3339 UTC time: %q", lines[1])
				}
			})
		}
	})
	t.Run("admin token in the tenant variable", func(t *testing.T) {
		// The API asks for ?tenant=; the command names its own way.
		code, out, errOut := n.run(map[string]string{config.EnvToken: e2eAdmin}, "", "list")
		if code != 1 || out != "" || !strings.Contains(errOut, "--tenant T") || !strings.Contains(errOut, config.EnvAdminToken) {
			t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errOut)
		}
	})
	t.Run("list json", func(t *testing.T) {
		code, out, errOut := n.run(nil, "", "list", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var names []string
		for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			var tool ledger.Tool
			if err := json.Unmarshal([]byte(l), &tool); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			names = append(names, tool.Name)
		}
		// By name, as the API lists them.
		if want := "bank.wire_transfers.create email.invoices.send stripe.customers.retrieve stripe.payment_intents.create"; strings.Join(names, " ") != want {
			t.Errorf("names %q, want %q", names, want)
		}
	})
	t.Run("show", func(t *testing.T) {
		code, out, errOut := n.run(nil, "", "show", "stripe.payment_intents.create")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		fields := ledgerShowFields(out)
		for k, want := range map[string]string{
			"name": "stripe.payment_intents.create", "tenant": "default", "class": "write_idempotent",
			"key_placement.header": "Idempotency-Key", "intent_fields[1]": "currency", "effective_autonomy": "autonomous",
			"policy": `intent.amount <= 50000 && intent.currency == "usd"`, "checklist.checked_by": "alice@example.com",
			"checklist.checked_at": "2026-01-15T10:00:00Z", "checklist.duplicate_delivery_test": "true", "version": "1",
		} {
			if fields[k] != want {
				t.Errorf("%s: %q, want %q\n%s", k, fields[k], want, out)
			}
		}
		_, out, _ = n.run(nil, "", "show", "bank.wire_transfers.create")
		if got := ledgerShowFields(out)["effective_autonomy"]; got != "approval (the tool is registered with autonomy approval)" {
			t.Errorf("effective_autonomy of the wire: %q", got)
		}
	})
	t.Run("delete", func(t *testing.T) {
		code, out, errOut := n.run(nil, "", "delete", "stripe.customers.retrieve")
		if code != 0 || strings.Join(normLines(out), "") != "deleted stripe.customers.retrieve" {
			t.Fatalf("exit %d %q %s", code, out, errOut)
		}
		code, out, errOut = n.run(nil, "", "show", "stripe.customers.retrieve")
		if code != 1 || out != "" || !strings.Contains(errOut, "reconciler tools: 404 not_found:") {
			t.Errorf("show after delete: exit %d %q %q", code, out, errOut)
		}
		code, _, errOut = n.run(nil, "", "delete", "stripe.customers.retrieve")
		if code != 1 || !strings.Contains(errOut, "404 not_found") {
			t.Errorf("second delete: exit %d %q", code, errOut)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{}, "want a subcommand"},
			{[]string{"frob"}, `unknown subcommand "frob"`},
			{[]string{"show"}, "show wants exactly one tool NAME, got 0"},
			{[]string{"show", "a/b"}, "NAME: invalid tool name"},
			{[]string{"delete", "x", "--tenant", "default"}, "--tenant is for list and show"},
			{[]string{"list", "--url", "ftp://x"}, "want an http:// or https:// URL"},
			{[]string{"list", "--tenant", "default"}, "RECONCILER_ADMIN_TOKEN is not set"},
		} {
			code, _, errOut := n.run(nil, "", tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "reconciler tools --help") {
				t.Errorf("%q: exit %d %q, want 2 and %q", tc.args, code, errOut, tc.want)
			}
		}
		if code, out, _ := n.run(nil, "", "--help"); code != 0 || !strings.Contains(out, "reconciler tools apply -f FILE") {
			t.Errorf("--help: exit %d %q", code, out)
		}
	})
}

// TestToolsFileProblems checks the local checks of a registry file: each
// problem is found, with its line, before anything is sent.
func TestToolsFileProblems(t *testing.T) {
	const head = "tools:\n  - name: a.b\n    vendor: stripe\n"
	cases := []struct {
		name, doc string
		want      []string // each a problem, in order
	}{
		{"empty", "", []string{`f.yaml: empty: want a list of entries under "tools:"`}},
		{"a list at the top", "- name: x\n", []string{`f.yaml:1: a list at the top: put the entries under "tools:"`}},
		{"another top key", "tool:\n  - name: x\n", []string{`f.yaml:1: tool: unknown key: the file holds one key, "tools"`}},
		{"tools not a list", "tools: {name: x}\n", []string{"f.yaml:1: tools: want a list of entries, got a mapping"}},
		{"empty list", "tools: []\n", []string{"f.yaml:1: tools: the list is empty"}},
		{"no name", "tools:\n  - vendor: stripe\n", []string{"f.yaml:2: tools[0].name: required"}},
		{"bad name", "tools:\n  - name: a/b\n", []string{`f.yaml:2: tools[0].name: "a/b": want 1-128`}},
		{"duplicate name", head + "  - name: a.b\n", []string{`f.yaml:4: tools[1].name: "a.b" is listed twice (first at line 2)`}},
		{"duplicate key", head + "    vendor: paypal\n", []string{"f.yaml:4: tools[0].vendor: duplicate key (first at line 3)"}},
		{"a store field", head + "    version: 3\n", []string{"f.yaml:4: tools[0].version: not part of an entry: the store counts versions"}},
		{"tenant", head + "    tenant: acme\n", []string{"f.yaml:4: tools[0].tenant: not part of an entry: the token names the tenant"}},
		{"a number for a string", head + "    side_effect: 42\n", []string{"f.yaml:4: tools[0].side_effect: want a string, got 42 (quote it)"}},
		{"a string for a bool", head + "    checklist: {side_effect_documented: \"yes\"}\n", []string{`f.yaml:4: tools[0].checklist.side_effect_documented: want true or false, got "yes"`}},
		{"a string for a list", head + "    intent_fields: amount\n", []string{`f.yaml:4: tools[0].intent_fields: want a list, got "amount"`}},
		{"a bad time", head + "    checklist: {checked_at: 2026-01-15}\n", []string{`f.yaml:4: tools[0].checklist.checked_at: "2026-01-15": want an RFC 3339 time`}},
		{"a mapping for a string", head + "    policy: {x: 1}\n", []string{"f.yaml:4: tools[0].policy: want a string, got a mapping"}},
		{"merge key", "tools:\n  - name: x\n    <<: {vendor: stripe}\n", []string{"f.yaml:3: tools[0]: merge keys (<<) are not supported"}},
		{"an alias to a list entry", "tools:\n  - &e {name: x, vendor: stripe, class: read}\n  - *e\n", []string{`f.yaml:3: tools[1].name: "x" is listed twice (first at line 2)`}},
		{"a second document", head + "---\ntools: []\n", []string{"f.yaml:4: a second YAML document"}},
		{"problems in order", "tools:\n  - name: x\n    clas: read\n  - name: y\n    vendr: stripe\n",
			[]string{"f.yaml:3: tools[0].clas: unknown field", "f.yaml:5: tools[1].vendr: unknown field"}},
		{"an alias bomb", aliasBomb(), []string{"document too large"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeToolsFile("f.yaml", []byte(tc.doc))
			fe, ok := err.(*toolsFileError)
			if !ok {
				t.Fatalf("err = %v, want a *toolsFileError", err)
			}
			if len(fe.problems) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%s", len(fe.problems), len(tc.want), strings.ReplaceAll(fe.Error(), "; ", "\n"))
			}
			for i, w := range tc.want {
				if got := fe.problems[i].String(); !strings.Contains(got, w) {
					t.Errorf("problem %d: %q, want it to contain %q", i, got, w)
				}
			}
		})
	}

	t.Run("a good file", func(t *testing.T) {
		items, err := decodeToolsFile("tools.yaml", []byte(readExample(t)))
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 4 || items[0].tool.Checklist.CheckedAt.IsZero() || items[0].tool.KeyPlacement.Header != "Idempotency-Key" ||
			!items[2].tool.KeyPlacement.None || items[3].where != "tools.yaml:"+strconv.Itoa(lineOf(t, readExample(t), "name: stripe.customers.retrieve")) {
			t.Errorf("decoded %+v", items)
		}
	})
}

func lineOf(t *testing.T, doc, s string) int {
	t.Helper()
	for i, l := range strings.Split(doc, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("no %q", s)
	return 0
}

// aliasBomb is a small file whose entries, through one alias, hold more
// nodes than the decoder walks.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("tools:\n  - name: n0\n    intent_fields: &l [")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("f" + strconv.Itoa(i))
	}
	b.WriteString("]\n")
	for i := 1; i < 200; i++ {
		b.WriteString("  - {name: n" + strconv.Itoa(i) + ", intent_fields: *l}\n")
	}
	return b.String()
}
