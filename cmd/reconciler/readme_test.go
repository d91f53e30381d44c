package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
)

// TestReadmeTour runs the curl tour of README.md, as written, against the
// real program, so the documented commands keep working.
func TestReadmeTour(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	block := readmeShellBlock(t, "readme-test")

	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HOST=http://"+m.HTTPAddr(), "TOKEN="+e2eToken, "ADMIN_TOKEN="+e2eAdmin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README tour failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		`"decision":"proceed"`, `"status":"unknown"`, `"decision":"retry_same_key"`,
		`"status":"succeeded"`, `"upstream_receipt_id":"pi_3Nabc"`, `"idempotent_replayed":true`,
		`"actor":"alice"`, `"relay":"woken"`, `"status":"ready"`, `reconciler_claims_total{decision="proceed",tenant="default"} 2`,
		`reconciler_rows{status="succeeded"} 2`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the tour's output lacks %s:\n%s", want, out)
		}
	}
}

// readmeShellBlock returns the shell block of README.md between the
// markers <!-- NAME:begin --> and <!-- NAME:end -->.
func readmeShellBlock(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- "+name+":begin -->")
	block, _, ok2 := strings.Cut(block, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("README.md has no %s block", name)
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	return strings.TrimSuffix(block, "```")
}

// TestReadmeRegistry runs the README's worked example of the tool registry
// — `reconciler tools apply` of examples/tools.yaml, list, a wire transfer
// that waits for an approver and then proceeds, a charge that fails its
// policy — as written, from the repository's root, with the real program
// as the reconciler on PATH (this test binary, run as main: asMainEnv).
func TestReadmeRegistry(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	block := readmeShellBlock(t, "readme-test-registry")
	const approverToken = "readme-approver-token-0123456789"
	cfg := configtest.WriteFile(t, "reconciler.yaml", []byte(`tenants:
  - id: default
    tokens: ["`+e2eToken+`"]
    approver_tokens: ["`+approverToken+`"]
admin_tokens: ["`+e2eAdmin+`"]
`))
	m := startMain(t, nil, "serve", "--config", cfg, "--data", t.TempDir(), "--http", "127.0.0.1:0")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "reconciler")); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = "../.." // examples/tools.yaml, as the README says
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RECONCILER_") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, asMainEnv+"=1", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOST=http://"+m.HTTPAddr(), "TOKEN="+e2eToken, "APPROVER_TOKEN="+approverToken)
	raw, err := cmd.CombinedOutput()
	out := string(raw)
	if err != nil {
		t.Fatalf("the README's registry example failed: %v\n%s", err, out)
	}
	folded := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"created stripe.payment_intents.create (version 1) created bank.wire_transfers.create (version 1) " +
			"created email.invoices.send (version 1) created stripe.customers.retrieve (version 1) " +
			"unchanged stripe.payment_intents.create (version 1) unchanged bank.wire_transfers.create (version 1) " +
			"unchanged email.invoices.send (version 1) unchanged stripe.customers.retrieve (version 1)",
		"NAME VENDOR CLASS AUTONOMY EFFECTIVE OPEN VERSION UPDATED_AT",
		"bank.wire_transfers.create acme_bank write_irreversible approval approval 0 1",
		`"state":"granted"`, `"actor":"carol"`,
		`"reason":"policy: intent.amount`,
	} {
		if !strings.Contains(folded, want) {
			t.Errorf("the example's output lacks %s:\n%s", want, out)
		}
	}
	// In order: the wire waits, proceeds after the grant; the small charge
	// proceeds, the large one waits.
	decisions := regexp.MustCompile(`"decision":"([a-z_]+)"`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, d := range decisions {
		got = append(got, d[1])
	}
	if want := "await_approval proceed proceed await_approval"; strings.Join(got, " ") != want {
		t.Errorf("decisions %q, want %q\n%s", got, want, out)
	}
}
