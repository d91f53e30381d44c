package config

import (
	"crypto/rand"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
)

func TestLoadOrCreateTokenConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	const n = 8
	var wg sync.WaitGroup
	toks := make([]string, n)
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			toks[i], created[i], errs[i] = loadOrCreateToken(path, rand.Reader) // safe for concurrent use
		}()
	}
	wg.Wait()
	creators := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if toks[i] != toks[0] {
			t.Errorf("caller %d got a different token", i)
		}
		if created[i] {
			creators++
		}
	}
	if creators != 1 {
		t.Errorf("%d callers created the file, want 1", creators)
	}
	if got := configtest.ReadToken(t, path); got != toks[0] {
		t.Error("the file does not hold the token the callers got")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".token-*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// TestIgnoredTokenWarning: RECONCILER_TOKEN is said to be ignored only when
// the config file's tenants do not use it (the README's example config
// names it as ${RECONCILER_TOKEN}).
func TestIgnoredTokenWarning(t *testing.T) {
	const envTok = "tok-from-the-environment-0123456789"
	for _, tc := range []struct {
		name     string
		fileTok  string
		wantWarn bool
	}{
		{"the file uses it", envTok, false},
		{"the file names another token", "tok-in-the-file-only-0123456789ab", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			getenv := func(k string) string {
				switch k {
				case EnvToken:
					return envTok
				case EnvAdminToken:
					return "admin-token-from-the-environment-0123"
				}
				return ""
			}
			c := Default()
			c.Data = t.TempDir()
			c.Tenants = []Tenant{{ID: "acme", Tokens: []string{tc.fileTok}}}
			if err := c.EnsureTokens(getenv, nil, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "RECONCILER_TOKEN is ignored"); got != tc.wantWarn {
				t.Fatalf("warned %v, want %v:\n%s", got, tc.wantWarn, logs.String())
			}
		})
	}
}
