package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestReadmeTour runs the curl tour of README.md, as written, against the
// real program, so the documented commands keep working.
func TestReadmeTour(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- readme-test:begin -->")
	block, _, ok2 := strings.Cut(block, "<!-- readme-test:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no readme-test block")
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	block = strings.TrimSuffix(block, "```")

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
