package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/internal/testkit"
)

// configTestdata holds the config package's test documents; the program's
// tests start serve with some of them.
const configTestdata = "internal/config/testdata/"

// valueOf reads a setting the way the config file spells it.
func valueOf(t *testing.T, c config.Config, key string) string {
	t.Helper()
	v, ok := c.Value(key)
	if !ok {
		t.Fatalf("no setting %q", key)
	}
	return v
}

type testMain struct {
	*Main
	stdout, stderr *testkit.SyncBuffer // the program's goroutines and the test share them
}

// newTestMain returns the real program with its own environment and output;
// it is closed when the test ends.
func newTestMain(t *testing.T, env map[string]string) *testMain {
	t.Helper()
	m := NewMain()
	tm := &testMain{Main: m, stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{}}
	// Never the machine's NATS port: an embedded server on a random one.
	withNATS := map[string]string{"RECONCILER_NATS_LISTEN": "127.0.0.1:0"}
	for k, v := range env {
		withNATS[k] = v
	}
	m.Getenv = configtest.MapEnv(withNATS)
	m.Stdout, m.Stderr = tm.stdout, tm.stderr
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tm
}

// startMain parses args and runs the program, failing the test on an error.
func startMain(t *testing.T, env map[string]string, args ...string) *testMain {
	t.Helper()
	m := newTestMain(t, env)
	if err := m.ParseFlags(context.Background(), args); err != nil {
		t.Fatalf("ParseFlags: %v", err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return m
}

// logLines decodes the JSON log.
func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func findLog(t *testing.T, lines []map[string]any, msg string) map[string]any {
	t.Helper()
	for _, l := range lines {
		if l["msg"] == msg {
			return l
		}
	}
	t.Fatalf("no log line %q", msg)
	return nil
}

func TestMainServe(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{}
	for k, v := range configtest.FullEnv() {
		env[k] = v
	}
	// Secrets from the environment settings, too.
	env["RECONCILER_PAYPAL_CLIENT_SECRET"] = "env-SeKrEt-0009"
	env["RECONCILER_PAGING_WEBHOOK_URL"] = "https://hooks.example/env-SeKrEt-0010"
	m := startMain(t, env, "serve", "--config", configTestdata+"full.yaml", "--data", data, "--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--log-level", "debug")

	addr := m.HTTPAddr()
	if addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("HTTPAddr = %q, want the bound port", addr)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Errorf("GET /healthz = %d %s", resp.StatusCode, body)
	}
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("data directory mode = %#o, want 0700", got)
	}
	for _, f := range []string{config.TokenFile, config.AdminTokenFile} {
		if _, err := os.Stat(filepath.Join(data, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s written although the config names tokens (stat: %v)", f, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the server still answers after Close")
	}

	log := m.stderr.String()
	if strings.Contains(log, "SeKrEt") {
		t.Errorf("the log holds a secret:\n%s", log)
	}
	start := findLog(t, logLines(t, log), "starting reconciler")
	cfg, ok := start["config"].(map[string]any)
	if !ok {
		t.Fatalf("start line has no config: %v", start)
	}
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"tenant token", cfg["tenants"].([]any)[0].(map[string]any)["tokens"], []any{config.RedactedText}},
		{"approver token", cfg["tenants"].([]any)[0].(map[string]any)["approver_tokens"], []any{config.RedactedText}},
		{"approvals shown", cfg["approvals"], map[string]any{"ttl": "12h"}},
		{"registry shown", cfg["registry"], map[string]any{"strict": "true"}},
		{"admin token", cfg["admin_tokens"], []any{config.RedactedText}},
		{"stripe api key", cfg["stripe"].(map[string]any)["api_key"], config.RedactedText},
		{"paypal client secret from env", cfg["paypal"].(map[string]any)["client_secret"], config.RedactedText},
		{"pager webhook from env", cfg["paging"].(map[string]any)["webhook"].(map[string]any)["url"], "https://hooks.example/REDACTED"},
		{"http shown", cfg["http"], "127.0.0.1:0"},
		{"data shown", cfg["data"], data},
		{"config file shown", cfg["config"], configTestdata + "full.yaml"},
		{"resolver shown", cfg["resolver"], map[string]any{"interval": "30s", "grace": "1m", "pending_ttl": "15m"}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("logged %#v, want %#v", c.got, c.want)
			}
		})
	}
	if n := strings.Count(log, `"msg":"starting reconciler"`); n != 1 {
		t.Errorf("the effective config was logged %d times, want once", n)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"serve", "--help"}, {"help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			m := newTestMain(t, nil)
			err := m.ParseFlags(context.Background(), args)
			if !errors.Is(err, flag.ErrHelp) || ExitCode(err) != 0 {
				t.Fatalf("err = %v (exit %d), want flag.ErrHelp (exit 0)", err, ExitCode(err))
			}
			out := m.stdout.String()
			want := []string{"--config", config.EnvConfig, config.EnvToken, config.EnvAdminToken, "drill", "send-fixture", "ledger", "tools apply", "nats-creds", "mcp-gate",
				"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER"}
			def := config.Default()
			for _, s := range config.Settings() {
				want = append(want, s.Env(), valueOf(t, def, s.Key))
				if s.Flag() != "" {
					want = append(want, "--"+s.Flag()+" ")
				}
			}
			for _, w := range want {
				if w != "" && !strings.Contains(out, w) {
					t.Errorf("help lacks %q", w)
				}
			}
			for _, s := range config.Settings() {
				if s.EnvOnly && strings.Contains(out, "--"+strings.NewReplacer(".", "-", "_", "-").Replace(s.Key)) {
					t.Errorf("help offers a flag for secret %s", s.Key)
				}
			}
		})
	}
}

func TestCommands(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantMsg  string
	}{
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"unknown flag", []string{"--nope"}, 2, "flag provided but not defined: -nope"},
		{"secret as a flag", []string{"--stripe-api-key", "sk"}, 2, "flag provided but not defined: -stripe-api-key"},
		{"stray argument", []string{"serve", "extra"}, 2, `unexpected argument "extra"`},
		{"missing config file", []string{"--config", "/nonexistent/reconciler.yaml"}, 1, "config: read config: open /nonexistent/reconciler.yaml"},
		{"bad flag value", []string{"--http", "nowhere"}, 1, `config: --http: http: bad listen address "nowhere"`},
		{"bad config file", []string{"--config", configTestdata + "broken.yaml"}, 1, configTestdata + "broken.yaml:4: tenants[1].id: duplicate tenant id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMain(t, nil)
			err := m.ParseFlags(context.Background(), tc.args)
			if err == nil {
				t.Fatal("ParseFlags succeeded, want an error")
			}
			if got := ExitCode(err); got != tc.wantCode {
				t.Errorf("exit code = %d, want %d (%v)", got, tc.wantCode, err)
			}
			if !strings.Contains(oneLine(err), tc.wantMsg) {
				t.Errorf("error = %q, want it to contain %q", oneLine(err), tc.wantMsg)
			}
			if strings.Contains(oneLine(err), "\n") {
				t.Error("the printed error spans several lines")
			}
		})
	}
}

func TestConfigFileChoice(t *testing.T) {
	fileA := configtest.WriteFile(t, "a.yaml", []byte("http: 127.0.0.1:1111\n"))
	fileB := configtest.WriteFile(t, "b.yaml", []byte("http: 127.0.0.1:2222\n"))
	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		wantFile string
		wantHTTP string
	}{
		{"none", nil, nil, "", "127.0.0.1:8080"},
		{"environment", map[string]string{config.EnvConfig: fileA}, nil, fileA, "127.0.0.1:1111"},
		{"flag beats environment", map[string]string{config.EnvConfig: fileA}, []string{"--config", fileB}, fileB, "127.0.0.1:2222"},
		{"flag before serve", nil, []string{"serve", "--config=" + fileB}, fileB, "127.0.0.1:2222"},
		{"http flag beats file", nil, []string{"--config", fileB, "--http", "127.0.0.1:3333"}, fileB, "127.0.0.1:3333"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMain(t, tc.env)
			if err := m.ParseFlags(context.Background(), tc.args); err != nil {
				t.Fatal(err)
			}
			if m.Command != "serve" || m.Config.File != tc.wantFile || m.Config.HTTP != tc.wantHTTP {
				t.Errorf("command %q file %q http %q, want serve %q %q", m.Command, m.Config.File, m.Config.HTTP, tc.wantFile, tc.wantHTTP)
			}
		})
	}
}

func TestDevTokens(t *testing.T) {
	const envTok, envAdmin = "env-tenant-token-0123456789", "env-admin-token-0123456789"
	minimal, err := filepath.Abs(configTestdata + "minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		setup   func(t *testing.T, data string)
		wantErr string
		check   func(t *testing.T, m *testMain, data string)
	}{
		{
			name: "generated on first start",
			check: func(t *testing.T, m *testMain, data string) {
				for _, f := range []string{config.TokenFile, config.AdminTokenFile} {
					fi, err := os.Stat(filepath.Join(data, f))
					if err != nil {
						t.Fatal(err)
					}
					if fi.Mode().Perm() != 0o600 {
						t.Errorf("%s mode = %#o, want 0600", f, fi.Mode().Perm())
					}
				}
				tok, admin := configtest.ReadToken(t, filepath.Join(data, config.TokenFile)), configtest.ReadToken(t, filepath.Join(data, config.AdminTokenFile))
				if b, err := hex.DecodeString(tok); err != nil || len(b) != 32 {
					t.Errorf("token is not 32 random bytes in hex")
				}
				if tok == admin {
					t.Error("tenant and admin token are the same")
				}
				if got := m.Config.TokenTenants(); !reflect.DeepEqual(got, map[string]string{tok: config.DefaultTenant}) {
					t.Errorf("TokenTenants has %d entries, want the generated token for %q", len(got), config.DefaultTenant)
				}
				if !reflect.DeepEqual(m.Config.AdminTokens, []string{admin}) {
					t.Error("AdminTokens is not the generated admin token")
				}
				log := m.stderr.String()
				if strings.Contains(log, tok) || strings.Contains(log, admin) {
					t.Error("the log holds a generated token")
				}
				generated := 0
				for _, l := range logLines(t, log) {
					if l["msg"] == "generated token" {
						generated++
						if f, _ := l["file"].(string); !strings.HasPrefix(f, data) {
							t.Errorf("generated-token line names %q, want a file in %s", f, data)
						}
					}
				}
				if generated != 2 {
					t.Errorf("%d generated-token log lines, want 2", generated)
				}
			},
		},
		{
			name: "reused on the next start",
			setup: func(t *testing.T, data string) {
				first := startMain(t, nil, "--data", data, "--http", "127.0.0.1:0")
				if err := first.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, m *testMain, data string) {
				tok := configtest.ReadToken(t, filepath.Join(data, config.TokenFile))
				if m.Config.TokenTenants()[tok] != config.DefaultTenant {
					t.Error("the second start does not use the stored token")
				}
				if !reflect.DeepEqual(m.Config.AdminTokens, []string{configtest.ReadToken(t, filepath.Join(data, config.AdminTokenFile))}) {
					t.Error("the second start does not use the stored admin token")
				}
				if strings.Contains(m.stderr.String(), `"generated token"`) {
					t.Error("the second start generated a token")
				}
			},
		},
		{
			name: "taken from the environment",
			env:  map[string]string{config.EnvToken: envTok, config.EnvAdminToken: envAdmin},
			check: func(t *testing.T, m *testMain, data string) {
				if m.Config.TokenTenants()[envTok] != config.DefaultTenant || !reflect.DeepEqual(m.Config.AdminTokens, []string{envAdmin}) {
					t.Error("environment tokens not used")
				}
				for _, f := range []string{config.TokenFile, config.AdminTokenFile} {
					if _, err := os.Stat(filepath.Join(data, f)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s written although the environment has the token", f)
					}
				}
				if strings.Contains(m.stderr.String(), envTok) {
					t.Error("the log holds the environment token")
				}
			},
		},
		{
			name: "config tenants win over RECONCILER_TOKEN",
			env:  map[string]string{config.EnvToken: envTok},
			args: []string{"--config", minimal},
			check: func(t *testing.T, m *testMain, data string) {
				if _, ok := m.Config.TokenTenants()[envTok]; ok {
					t.Error("RECONCILER_TOKEN used although the config names tenants")
				}
				if !strings.Contains(m.stderr.String(), "RECONCILER_TOKEN is ignored") {
					t.Error("no warning that RECONCILER_TOKEN is ignored")
				}
				if _, err := os.Stat(filepath.Join(data, config.TokenFile)); !errors.Is(err, os.ErrNotExist) {
					t.Error("tenant token file written although the config names tenants")
				}
				if _, err := os.Stat(filepath.Join(data, config.AdminTokenFile)); err != nil {
					t.Errorf("admin token file missing although the config names no admin_tokens: %v", err)
				}
			},
		},
		{
			name: "token file open to others",
			setup: func(t *testing.T, data string) {
				if err := os.MkdirAll(data, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(data, config.TokenFile), []byte("loose-token-0123456789\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Join(data, config.TokenFile), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "is open to group or others (mode 0644): chmod 600 it",
		},
		{
			name: "empty token file",
			setup: func(t *testing.T, data string) {
				if err := os.MkdirAll(data, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(data, config.AdminTokenFile), []byte("\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "admin_token is empty: delete it to generate a new token",
		},
		{
			name:    "short environment token",
			env:     map[string]string{config.EnvToken: "short"},
			wantErr: "RECONCILER_TOKEN: tenants[0].tokens[0]: token is shorter than 16 characters",
		},
		{
			name:    "same environment token twice",
			env:     map[string]string{config.EnvToken: envTok, config.EnvAdminToken: envTok},
			wantErr: "RECONCILER_ADMIN_TOKEN: admin_tokens[0]: token used twice (also at tenants[0].tokens[0])",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			if tc.setup != nil {
				tc.setup(t, data)
			}
			m := newTestMain(t, tc.env)
			args := append([]string{"--data", data, "--http", "127.0.0.1:0"}, tc.args...)
			if err := m.ParseFlags(context.Background(), args); err != nil {
				t.Fatal(err)
			}
			err := m.Run(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run = %v, want an error containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), envTok) {
					t.Error("the error quotes a token")
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			tc.check(t, m, data)
		})
	}
}

func TestClose(t *testing.T) {
	t.Run("stages in shutdown order, reverse registration within one", func(t *testing.T) {
		m := NewMain()
		var got []string
		add := func(s stage, name string) {
			m.onClose(s, name, func(context.Context) error { got = append(got, name); return nil })
		}
		// Registered in start order, which is not the shutdown order.
		add(stageStore, "store")
		add(stageNATS, "nats")
		add(stageRelay, "relay")
		add(stageResolver, "resolver")
		add(stageHTTP, "http")
		add(stageHTTP, "http started later")
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := []string{"http started later", "http", "resolver", "relay", "nats", "store"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("close order %v, want %v", got, want)
		}
		got = nil
		if err := m.Close(context.Background()); err != nil || got != nil {
			t.Errorf("second Close ran %v, err %v; want nothing", got, err)
		}
	})
	t.Run("an error does not stop the rest", func(t *testing.T) {
		m := NewMain()
		var ran []string
		m.onClose(stageRelay, "relay", func(context.Context) error { ran = append(ran, "relay"); return errors.New("boom") })
		m.onClose(stageStore, "store", func(context.Context) error { ran = append(ran, "store"); return nil })
		err := m.Close(context.Background())
		if err == nil || err.Error() != "close relay: boom" {
			t.Errorf("err = %v, want close relay: boom", err)
		}
		if !reflect.DeepEqual(ran, []string{"relay", "store"}) {
			t.Errorf("ran %v, want relay then store", ran)
		}
	})
	t.Run("a passed deadline still closes everything", func(t *testing.T) {
		m := NewMain()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var sawDone []bool
		for _, s := range []stage{stageHTTP, stageStore} {
			m.onClose(s, fmt.Sprint(s), func(ctx context.Context) error { sawDone = append(sawDone, ctx.Err() != nil); return nil })
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sawDone, []bool{true, true}) {
			t.Errorf("closers saw done %v, want both run with the expired context", sawDone)
		}
	})
}

// TestHTTPHeaderLimit: headers past httpMaxHeaderBytes are refused with
// 431 before any handler runs; headers within it are served.
func TestHTTPHeaderLimit(t *testing.T) {
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	for _, tc := range []struct {
		name string
		pad  int
		want int
	}{
		{"within the limit", httpMaxHeaderBytes / 2, http.StatusOK},
		{"past the limit", 2 * httpMaxHeaderBytes, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, "http://"+m.HTTPAddr()+"/healthz", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Pad", strings.Repeat("a", tc.pad))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET /healthz with %d bytes of headers = %d, want %d", tc.pad, resp.StatusCode, tc.want)
			}
		})
	}
}

func TestRunPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	m := newTestMain(t, nil)
	if err := m.ParseFlags(context.Background(), []string{"--data", filepath.Join(t.TempDir(), "d"), "--http", ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	err = m.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen http") {
		t.Fatalf("Run = %v, want a listen error", err)
	}
}

// TestRunNATSPortTaken: a taken NATS port names the setting that moves it.
func TestRunNATSPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	m := newTestMain(t, nil)
	if err := m.ParseFlags(context.Background(), []string{"--data", filepath.Join(t.TempDir(), "d"), "--http", "127.0.0.1:0", "--nats-listen", ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	err = m.Run(context.Background())
	want := "nats listen " + ln.Addr().String() + ": address already in use: another NATS server may run there; give the embedded one another address with --nats-listen or RECONCILER_NATS_LISTEN"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run = %v, want %q", err, want)
	}
}

func TestRunValidatesConfig(t *testing.T) {
	m := newTestMain(t, nil)
	m.Config.Data = t.TempDir()
	m.Config.HTTP = "nowhere"
	if err := m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `http: bad listen address "nowhere"`) {
		t.Fatalf("Run = %v, want the config error", err)
	}
}

func TestExitCode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"help", flag.ErrHelp, 0},
		{"usage", &exitError{code: 2, err: errors.New("x")}, 2},
		{"wrapped usage", fmt.Errorf("a: %w", &exitError{code: 2, err: errors.New("x")}), 2},
		{"other", errors.New("x"), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExitCode(tc.err); got != tc.want {
				t.Errorf("ExitCode = %d, want %d", got, tc.want)
			}
		})
	}
	if got := oneLine(errors.Join(errors.New("a"), errors.New("b"))); got != "a; b" {
		t.Errorf("oneLine = %q", got)
	}
}
