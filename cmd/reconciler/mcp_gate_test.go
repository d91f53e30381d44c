package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/internal/mcptest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/mcpgate"
)

// asMainEnv makes the test binary run main's run() instead of the tests:
// the real program, started as its own process with its own argv.
const asMainEnv = "RECONCILER_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	mcptest.RunChild() // the upstream MCP server, when this binary is its child process
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(run())
	}
	os.Exit(m.Run())
}

// readmeBlock returns the fenced block after marker in README.md.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), marker)
	block, _, ok2 := strings.Cut(block, "<!-- mcp-test:end -->")
	if !ok || !ok2 {
		t.Fatalf("README.md has no %s block", marker)
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```json")
	return strings.TrimSuffix(block, "```")
}

// e2eResendSecret signs the test's Resend deliveries.
var e2eResendSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-resend-secret-0123456789"))

// TestReadmeMCP runs the README's MCP example as written: the registry
// entry registered on the real program, and the MCP client config's
// command — `reconciler mcp-gate … -- UPSTREAM` — started as the real
// program in its own process, speaking stdio to a real client session, in
// front of a real upstream MCP server that runs as a process of its own
// and counts its side effects. The same write three times is one upstream
// call and three identical results; a call that times out leaves its row
// unknown until Resend's signed webhook settles it; a frozen tool stops.
func TestReadmeMCP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "reconciler.yaml")
	yaml := `tenants:
  - id: default
    tokens: ["${E2E_TOKEN}"]
admin_tokens: ["${E2E_ADMIN}"]
standard:
  endpoints:
    - name: resend
      tenant: default
      secrets: ["${E2E_RESEND_SECRET}"]
      local_id_path: data.tags.metadata_local_id
      vendor: resend
`
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMain(t, map[string]string{"E2E_TOKEN": e2eToken, "E2E_ADMIN": e2eAdmin, "E2E_RESEND_SECRET": e2eResendSecret},
		"serve", "--config", cfgFile, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	entry := readmeBlock(t, "<!-- mcp-test:tool -->")
	if code, body := call(t, addr, e2eToken, http.MethodPut, "/v1/tools/send_email", entry); code != http.StatusCreated {
		t.Fatalf("PUT the README's entry: %d %v", code, body)
	}
	if code, body := call(t, addr, e2eToken, http.MethodPut, "/v1/tools/slow_email", entry); code != http.StatusCreated {
		t.Fatalf("PUT slow_email: %d %v", code, body)
	}

	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(readmeBlock(t, "<!-- mcp-test:config -->")), &cfg); err != nil {
		t.Fatalf("the README's MCP config: %v", err)
	}
	srv, ok := cfg.MCPServers["mail"]
	sep := slices.Index(srv.Args, "--")
	if !ok || srv.Command != "reconciler" || len(srv.Args) == 0 || srv.Args[0] != "mcp-gate" || sep < 0 ||
		srv.Env["RECONCILER_URL"] == "" || srv.Env["RECONCILER_TOKEN"] == "" {
		t.Fatalf("the README's MCP config is not `reconciler mcp-gate … -- UPSTREAM` with the ledger's URL and token: %+v", cfg)
	}
	// The README's command line, with this test's upstream after "--" and
	// a short timeout (a later flag wins).
	logPath := filepath.Join(dir, "upstream.jsonl")
	args := append(slices.Clone(srv.Args[:sep]), "--call-timeout", "1s", "--")
	args = append(args, mcptest.Command(logPath)...)
	gate := exec.Command(os.Args[0], args...)
	gate.Env = append(os.Environ(), asMainEnv+"=1", "RECONCILER_URL=http://"+addr, "RECONCILER_TOKEN="+e2eToken)
	stderr := &testkit.SyncBuffer{}
	gate.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gate's stderr:\n%s", stderr.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: gate}, nil)
	if err != nil {
		t.Fatalf("connect to the gate: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = cs.Close()
		}
	}()

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if b, _ := json.Marshal(tool.InputSchema); tool.Name == "send_email" && bytes.Contains(b, []byte("idempotency_key")) {
			t.Errorf("send_email is listed with its key: %s", b)
		}
	}

	callTool := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("call %s: %v", name, err)
		}
		return res
	}
	email := map[string]any{"to": "ann@example.com", "subject": "Invoice INV-1042", "text": "Attached."}
	var first []byte
	for i := range 3 {
		res := callTool("send_email", email)
		b, _ := json.Marshal(res)
		if res.IsError || (i > 0 && !bytes.Equal(b, first)) {
			t.Fatalf("call %d: %s (first %s)", i+1, b, first)
		}
		first = b
	}
	upstream := func(tool string) int {
		t.Helper()
		calls, err := mcptest.ReadLog(logPath)
		if err != nil {
			t.Fatal(err)
		}
		return mcptest.CountIn(calls, tool)
	}
	if n := upstream("send_email"); n != 1 {
		t.Fatalf("%d upstream calls for three, want 1", n)
	}

	// A write that commits upstream and hangs past the timeout.
	res := callTool("slow_email", map[string]any{"to": "bob@example.com"})
	key, _ := res.Meta[mcpgate.MetaKey].(string)
	if !res.IsError || res.Meta[mcpgate.MetaStatus] != "unknown" || key == "" {
		t.Fatalf("timed-out call: %+v", res)
	}
	_, body := call(t, addr, e2eToken, http.MethodGet, "/v1/claims/"+key, "")
	if rowField(t, body, "status") != "unknown" {
		t.Fatalf("row after the timeout: %v", body)
	}
	payload, err := fixtures.Set(fixtures.Load("resend/email.sent"), "metadata_local_id", rowField(t, body, "metadata_local_id"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := fixtures.SignStandard("msg_e2e_1", payload, time.Now(), e2eResendSecret)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/standard/resend", bytes.NewReader(payload))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, body := call(t, addr, e2eToken, http.MethodGet, "/v1/claims/"+key, ""); rowField(t, body, "status") != "succeeded" {
		t.Fatalf("row after the webhook: %v", body)
	}
	if res := callTool("slow_email", map[string]any{"to": "bob@example.com"}); res.IsError || res.Meta[mcpgate.MetaDecision] != "replay" {
		t.Fatalf("the settled call again: %+v", res)
	}
	if n := upstream("slow_email"); n != 1 {
		t.Fatalf("%d upstream slow_email calls, want 1", n)
	}

	// The kill switch, through the admin API.
	if code, body := call(t, addr, e2eAdmin, http.MethodPut, "/v1/admin/freezes/default/send_email", `{"note":"incident 9","actor":"ops"}`); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("freeze: %d %v", code, body)
	}
	res = callTool("send_email", map[string]any{"to": "carol@example.com", "subject": "hi"})
	if !res.IsError || res.Meta[mcpgate.MetaCode] != "tool_frozen" || upstream("send_email") != 1 {
		t.Fatalf("a frozen tool: %+v", res)
	}

	closed = true
	if err := cs.Close(); err != nil {
		t.Fatalf("closing the session: %v", err)
	}
	if code := gate.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the gate exited %d", code)
	}
}

// TestMCPGateFlags: the command line's mistakes are usage errors (exit 2),
// before anything starts; --help prints the usage on stdout.
func TestMCPGateFlags(t *testing.T) {
	env := configtest.MapEnv(map[string]string{"RECONCILER_TOKEN": e2eToken})
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) string
		want string
	}{
		{"no upstream", []string{"--url", "http://127.0.0.1:1"}, env, "name the upstream"},
		{"two upstreams", []string{"--upstream-url", "http://127.0.0.1:1/mcp", "--", "cat"}, env, "not both"},
		{"no token", []string{"--", "cat"}, configtest.MapEnv(nil), "no token"},
		{"bad upstream url", []string{"--upstream-url", "ftp://x"}, env, "want http(s)"},
		{"bad timeout", []string{"--call-timeout", "0s", "--", "cat"}, env, "must be positive"},
		{"unknown flag", []string{"--frobnicate", "--", "cat"}, env, "frobnicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseMCPGate(tc.args, tc.env)
			var ue *ledgerUsageError
			if !errors.As(err, &ue) || !strings.Contains(ue.msg, tc.want) {
				t.Fatalf("parse %v = %v, want a usage error about %q", tc.args, err, tc.want)
			}
			var stdout, stderr bytes.Buffer
			if code := runMCPGate(context.Background(), tc.args, nil, &stdout, &stderr, tc.env); code != 2 || stdout.Len() != 0 {
				t.Fatalf("exit %d, stdout %q", code, stdout.String())
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		if _, err := parseMCPGate([]string{"--help"}, env); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("--help = %v", err)
		}
		var stdout, stderr bytes.Buffer
		if code := runMCPGate(context.Background(), []string{"-h"}, nil, &stdout, &stderr, env); code != 0 || !strings.Contains(stdout.String(), "reconciler mcp-gate [flags] -- COMMAND") {
			t.Fatalf("exit %d, stdout %q", code, stdout.String())
		}
	})
	t.Run("the ledger unreachable at start", func(t *testing.T) {
		var stdout bytes.Buffer
		stderr := &testkit.SyncBuffer{} // the upstream's stderr is copied into it too
		argv := mcptest.Command(filepath.Join(t.TempDir(), "log"))
		args := append([]string{"--url", "http://127.0.0.1:1"}, append([]string{"--"}, argv...)...)
		if code := runMCPGate(context.Background(), args, nil, &stdout, stderr, env); code != 1 || !strings.Contains(stderr.String(), "tool registry") {
			t.Fatalf("exit %d, stderr %q", code, stderr.String())
		}
	})
}
