package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// TestReadmeStoreOps runs the README's "Operating the embedded store" as
// written: the node serves with the retention block as its config file,
// then the backup / restore / compact block runs from a shell, with the
// real program as the reconciler on PATH.
func TestReadmeStoreOps(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	retentionYAML := strings.TrimSuffix(strings.TrimPrefix(readmeShellBlock(t, "readme-test-retention"), "`yaml"), "`")
	retentionYAML = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(retentionYAML, "```yaml"), "`"))
	block := readmeShellBlock(t, "readme-test-storeops")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir) // the config's ./archive, as an operator's working directory
	cfg := configtest.WriteFile(t, "reconciler.yaml", []byte(retentionYAML+"\n"))
	m := startMain(t, e2eEnv, "serve", "--config", cfg, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	var keys []string
	for i := range 5 {
		body := strings.Replace(e2eClaim, `"amount":1050`, fmt.Sprintf(`"amount":%d`, 1000+i), 1)
		code, res := call(t, addr, e2eToken, "POST", "/v1/claims", body)
		if code != http.StatusCreated {
			t.Fatalf("claim = %d %v", code, res)
		}
		key := rowField(t, res, "key")
		if code, res := call(t, addr, e2eToken, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"response","http_status":200,"receipt_id":"pi_1"}`); code != http.StatusOK {
			t.Fatalf("outcome = %d %v", code, res)
		}
		keys = append(keys, key)
	}
	if !strings.Contains(m.stderr.String(), `"msg":"retention deletes settled rows"`) {
		t.Fatal("serve with the README's retention block does not run retention")
	}
	if st, err := os.Stat(filepath.Join(dir, "archive")); err != nil || !st.IsDir() {
		t.Fatalf("the archive directory: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"reconciler_retention_rows_deleted_total 0", "reconciler_store_file_bytes ", "reconciler_store_free_pages ", "reconciler_retention_oldest_settled_age_seconds "} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "reconciler")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RECONCILER_") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, asMainEnv+"=1", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOST=http://"+addr, "ADMIN_TOKEN="+e2eAdmin)
	raw, err := cmd.CombinedOutput()
	out := string(raw)
	if err != nil {
		t.Fatalf("the README's store operations failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"wrote backup.db: 5 rows, ",
		"a running node holds it", "refused: the node is running",
		"restored backup.db to restored/reconciler.db: 5 rows, ",
		"outbox: ",
		"compacted restored/reconciler.db: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "newest row updated at") == false {
		t.Errorf("restore does not say when the newest row was updated:\n%s", out)
	}
	// The restored file holds every row.
	r, err := bolt.Open(filepath.Join(dir, "restored", "reconciler.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, k := range keys {
		if _, err := r.Get(t.Context(), "default", k); err != nil {
			t.Errorf("restored row %s: %v", k, err)
		}
	}
	if err := r.CheckConsistency(t.Context()); err != nil {
		t.Error(err)
	}
	t.Logf("%s", out)
}
