package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// TestBackupCommandFailures: a usage error exits 2; a refusal, a copy cut
// short or a copy that is not a ledger exits 1 and leaves FILE as it was.
func TestBackupCommandFailures(t *testing.T) {
	// A real ledger file, to serve whole or cut short.
	st, err := bolt.Open(filepath.Join(t.TempDir(), "reconciler.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var good bytes.Buffer
	if _, err := st.Backup(context.Background(), &good, nil); err != nil {
		t.Fatal(err)
	}
	st.Close()

	tests := []struct {
		name    string
		handler http.HandlerFunc
		env     map[string]string
		args    []string
		code    int
		stderr  string
	}{
		{name: "no token", env: map[string]string{}, code: 2, stderr: "RECONCILER_ADMIN_TOKEN is not set"},
		{name: "no --out", args: []string{}, code: 2, stderr: "--out is required"},
		{name: "a PostgreSQL node", handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotImplemented)
			_, _ = w.Write([]byte(`{"error":{"code":"not_implemented","message":"use pg_dump"}}`))
		}, code: 1, stderr: "501"},
		{name: "a copy cut short", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "999999")
			_, _ = w.Write(good.Bytes()[:4096])
			panic(http.ErrAbortHandler)
		}, code: 1, stderr: "reconciler backup:"},
		{name: "not a ledger", handler: func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write(bytes.Repeat([]byte("x"), 16384))
		}, code: 1, stderr: "fails its check"},
		{name: "the whole copy", handler: func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+e2eAdmin || r.URL.Path != "/v1/admin/backup" {
				http.Error(w, "no", http.StatusForbidden)
				return
			}
			w.Header().Set("Reconciler-Backup-Rows", "0")
			_, _ = w.Write(good.Bytes())
		}, code: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.handler
			if h == nil {
				h = func(w http.ResponseWriter, r *http.Request) { t.Error("the command sent a request") }
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			out := filepath.Join(t.TempDir(), "backup.db")
			if err := os.WriteFile(out, []byte("the previous backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			env := tc.env
			if env == nil {
				env = map[string]string{"RECONCILER_ADMIN_TOKEN": e2eAdmin}
			}
			args := tc.args
			if args == nil {
				args = []string{"--out", out}
			}
			args = append(args, "--url", srv.URL)
			var stdout, stderr bytes.Buffer
			code := runBackup(context.Background(), args, &stdout, &stderr, configtest.MapEnv(env))
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.stderr)
			}
			b, _ := os.ReadFile(out)
			if tc.code != 0 && string(b) != "the previous backup" {
				t.Fatal("a failed backup changed FILE")
			}
			if tc.code == 0 && (!bytes.Equal(b, good.Bytes()) || !strings.Contains(stdout.String(), "wrote "+out+": 0 rows, ")) {
				t.Fatalf("the copy differs, or stdout %q", stdout.String())
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".backup.db.tmp-*")); len(left) > 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}
