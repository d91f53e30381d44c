package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/ledger"
)

const (
	acmeToken   = "acme-e2e-token-0123456789"
	globexToken = "globex-e2e-token-0123456789"
)

// natsCredential runs `reconciler nats-creds` as an operator would, writing
// the seed to dir, and returns the seed file and the public key it printed.
func natsCredential(t *testing.T, dir string, args ...string) (seedFile, pub string) {
	t.Helper()
	name := "service"
	if len(args) == 2 && args[0] == "--tenant" {
		name = args[1]
	}
	seedFile = filepath.Join(dir, name+".nk")
	var stdout, stderr bytes.Buffer
	if code := runNATSCreds(append(args, "--out", seedFile), &stdout, &stderr, configtest.MapEnv(nil)); code != 0 {
		t.Fatalf("nats-creds %v: exit %d: %s", args, code, stderr.String())
	}
	m := regexp.MustCompile(`public key (U[A-Z0-9]{55})`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("nats-creds %v printed no public key:\n%s", args, stdout.String())
	}
	return seedFile, m[1]
}

// tenantsConfig writes a config file with tenants acme and globex; extra
// is appended to each tenant (nats_nkeys lines).
func tenantsConfig(t *testing.T, acmeExtra, globexExtra string) string {
	t.Helper()
	cfg := fmt.Sprintf("tenants:\n  - id: acme\n    tokens: [%s]\n%s  - id: globex\n    tokens: [%s]\n%sadmin_tokens: [%s]\n",
		acmeToken, acmeExtra, globexToken, globexExtra, e2eAdmin)
	p := filepath.Join(t.TempDir(), "reconciler.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// awaitSettled claims a charge of run for the token's tenant, awaits its
// resolution on js and, once Await listens, reports the charge's success,
// so the relay publishes a succeeded event: a tenant's account sees its
// events live (events.AccountLayout). It returns the key and what Await
// returned.
func awaitSettled(t *testing.T, addr, token, run string, js jetstream.JetStream, tenant string, d time.Duration) (string, ledger.Event, error) {
	t.Helper()
	claim := fmt.Sprintf(`{"run_id":%q,"tool":"stripe.payment_intents.create","tool_call_id":"call_1",
	"vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd","customer":"cus_1"}}`, run)
	code, body := call(t, addr, token, "POST", "/v1/claims", claim)
	if code != http.StatusCreated {
		t.Fatalf("claim = %d %v", code, body)
	}
	key := rowField(t, body, "key")
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	reported := false
	ev, err := events.Await(ctx, js, tenant, run, key, events.WithOpened(func() {
		reported = true
		code, body := call(t, addr, token, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"response","http_status":200,"receipt_id":"pi_nats"}`)
		if code != http.StatusOK || rowField(t, body, "status") != "succeeded" {
			t.Errorf("outcome = %d %v", code, body)
		}
	}))
	if !reported {
		t.Fatalf("await never listened: %v", err)
	}
	return key, ev, err
}

// runtimeConn connects a tenant's runtime with its seed file the way the
// README shows, reporting permission violations on its subscriptions.
func runtimeConn(t *testing.T, url, tenant, seedFile string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js, err := client.ConnectNATS(url, tenant, client.NATSCredentials{NKeyFile: seedFile}, nats.PermissionErrOnSubscribe(true))
	if err != nil {
		t.Fatalf("%s connect: %v", tenant, err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// checkIsolation: acme's runtime receives its own resolution; globex's
// cannot read it through a consumer or a subscription, nor publish a forged
// one; a connection without credentials is refused.
func checkIsolation(t *testing.T, m *testMain, url string, seeds map[string]string) {
	t.Helper()
	_, acme := runtimeConn(t, url, "acme", seeds["acme"])
	key, ev, err := awaitSettled(t, m.HTTPAddr(), acmeToken, "run_nats", acme, "acme", 15*time.Second)
	if err != nil || ev.Status != "succeeded" || ev.Tenant != "acme" || ev.Key != key {
		t.Fatalf("acme await: %+v, %v", ev, err)
	}

	gnc, globex := runtimeConn(t, url, "globex", seeds["globex"])
	gctx, gcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer gcancel()
	if ev, err := events.Await(gctx, globex, "acme", "run_nats", key); err == nil {
		t.Fatalf("globex read acme's event: %+v", ev)
	}
	sub, err := gnc.SubscribeSync("recon.acme.>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("globex subscribing to recon.acme.>: got %v, want a permission violation", err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
	defer pcancel()
	if _, err := globex.Publish(pctx, "recon.acme.run_nats.succeeded", []byte(`{"key":"forged"}`)); err == nil {
		t.Fatal("globex published a forged resolution")
	}

	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	}
}

// TestE2ENATSCredentials: tenants with NATS keys switch the embedded
// server's authentication on; every runtime uses a credential made by
// `reconciler nats-creds`, and the service keeps publishing after a restart
// (its own key is made anew at each start).
func TestE2ENATSCredentials(t *testing.T) {
	dir := t.TempDir()
	acmeSeed, acmePub := natsCredential(t, dir, "--tenant", "acme")
	globexSeed, globexPub := natsCredential(t, dir, "--tenant", "globex")
	cfg := tenantsConfig(t, "    nats_nkeys: ["+acmePub+"]\n", "    nats_nkeys: ["+globexPub+"]\n")
	seeds := map[string]string{"acme": acmeSeed, "globex": globexSeed}
	data := t.TempDir()

	m := startMain(t, nil, "serve", "--config", cfg, "--data", data, "--http", "127.0.0.1:0")
	checkIsolation(t, m, m.NATSURL(), seeds)
	if l := findLog(t, logLines(t, m.stderr.String()), "embedded nats started"); l["auth"] != "nkey, an account per tenant" || l["users"] != float64(3) {
		t.Errorf("start-up log: %v, want auth nkey with 3 users (the tenants' and the service's)", l)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m = startMain(t, nil, "serve", "--config", cfg, "--data", data, "--http", "127.0.0.1:0")
	_, acme := runtimeConn(t, m.NATSURL(), "acme", acmeSeed)
	if key, ev, err := awaitSettled(t, m.HTTPAddr(), acmeToken, "run_after_restart", acme, "acme", 15*time.Second); err != nil || ev.Key != key {
		t.Fatalf("after the restart: %+v, %v", ev, err)
	}
}

// TestE2EOpenNATSSaysSo: with no NATS keys the single node stays open on
// loopback, as before, and the log says what that means.
func TestE2EOpenNATSSaysSo(t *testing.T) {
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	l := findLog(t, logLines(t, m.stderr.String()), "embedded nats has no users: any process on this machine can publish events and read every tenant's; give tenants nats_nkeys (reconciler nats-creds --tenant T) to require credentials")
	if l["level"] != "WARN" {
		t.Errorf("log: %v, want a warning", l)
	}
	nc, err := nats.Connect(m.NATSURL())
	if err != nil {
		t.Fatalf("a local client without credentials: %v", err)
	}
	nc.Close()
}

// TestNATSListenOffLoopbackNeedsUsers: one clear line naming the setting.
func TestNATSListenOffLoopbackNeedsUsers(t *testing.T) {
	m := newTestMain(t, e2eEnv)
	err := m.ParseFlags(context.Background(), []string{"serve", "--data", t.TempDir(), "--nats-listen", "0.0.0.0:4222"})
	want := "config: --nats-listen: nats_listen: 0.0.0.0:4222 can be reached from other hosts and the embedded NATS server has no users, so anyone could publish and read every tenant's events: give the tenants nats_nkeys (reconciler nats-creds --tenant T makes one) or listen on 127.0.0.1"
	if err == nil || oneLine(err) != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// TestE2EExternalNATS: the service on a NATS server it does not run,
// configured by its admin from `reconciler nats-creds` output, reached with
// --nats-url and the service's seed file.
func TestE2EExternalNATS(t *testing.T) {
	bin := "/usr/sbin/nats-server"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("nats-server"); err != nil {
			t.Skip("no nats-server binary (/usr/sbin/nats-server or on PATH): the external-server test needs one")
		}
	}
	dir := t.TempDir()
	svcSeed, _ := natsCredential(t, dir, "--service")
	acmeSeed, acmePub := natsCredential(t, dir, "--tenant", "acme")
	globexSeed, globexPub := natsCredential(t, dir, "--tenant", "globex")
	cfg := tenantsConfig(t, "    nats_nkeys: ["+acmePub+"]\n", "    nats_nkeys: ["+globexPub+"]\n")

	// The admin's step: the accounts from the service's config.
	var accounts, stderr bytes.Buffer
	if code := runNATSCreds([]string{"--server-config", "--config", cfg}, &accounts, &stderr,
		configtest.MapEnv(map[string]string{"RECONCILER_NATS_URL": "nats://127.0.0.1:4222", "RECONCILER_NATS_NKEY": svcSeed})); code != 0 {
		t.Fatalf("nats-creds --server-config: exit %d: %s", code, stderr.String())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\n%s", port, filepath.Join(dir, "js"), accounts.String())
	confFile := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var serverLog bytes.Buffer
	cmd := exec.Command(bin, "-c", confFile)
	cmd.Stdout, cmd.Stderr = &serverLog, &serverLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("nats-server:\n%s", serverLog.String())
		}
	})
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server does not listen: %v", err)
		}
	}

	env := map[string]string{"RECONCILER_NATS_URL": url, "RECONCILER_NATS_NKEY": svcSeed}
	data := t.TempDir()
	m := startMain(t, env, "serve", "--config", cfg, "--data", data, "--http", "127.0.0.1:0")
	checkIsolation(t, m, url, map[string]string{"acme": acmeSeed, "globex": globexSeed})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m = startMain(t, env, "serve", "--config", cfg, "--data", data, "--http", "127.0.0.1:0")
	_, acme := runtimeConn(t, url, "acme", acmeSeed)
	if key, ev, err := awaitSettled(t, m.HTTPAddr(), acmeToken, "run_after_restart", acme, "acme", 15*time.Second); err != nil || ev.Key != key {
		t.Fatalf("after the restart: %+v, %v", ev, err)
	}

	// Without its credential the service cannot reach this bus.
	bad := newTestMain(t, map[string]string{"RECONCILER_NATS_URL": url})
	if err := bad.ParseFlags(context.Background(), []string{"serve", "--config", cfg, "--data", t.TempDir(), "--http", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := bad.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "nats connect") {
		t.Fatalf("serve without its NATS credential: %v, want a connect error", err)
	}
}

func TestNATSCreds(t *testing.T) {
	t.Run("tenant, seed on stdout", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := runNATSCreds([]string{"--tenant", "acme"}, &stdout, &stderr, configtest.MapEnv(nil)); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		kp, err := nkeys.ParseDecoratedUserNKey(stdout.Bytes())
		if err != nil {
			t.Fatalf("stdout is no seed file: %v\n%s", err, stdout.String())
		}
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		for _, want := range []string{"public key " + pub, `nats_nkeys: ["` + pub + `"]`, "account TENANT_acme",
			`client.ConnectNATS(url, "acme", client.NATSCredentials{NKeyFile: "acme.nk"})`, "--inbox-prefix _INBOX_acme",
			"the seed went to stdout: save it as acme.nk", "reconciler nats-creds --server-config"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("instructions lack %q:\n%s", want, stderr.String())
			}
		}
		if strings.Contains(stderr.String(), string(seed)) {
			t.Error("the instructions quote the seed")
		}
	})
	t.Run("an existing file is not overwritten", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "acme.nk")
		if err := os.WriteFile(out, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := runNATSCreds([]string{"--tenant", "acme", "--out", out}, &stdout, &stderr, configtest.MapEnv(nil)); code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		if b, _ := os.ReadFile(out); string(b) != "keep" {
			t.Errorf("the file was overwritten: %q", b)
		}
	})
	t.Run("the seed file is private", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "svc.nk")
		var stdout, stderr bytes.Buffer
		if code := runNATSCreds([]string{"--service", "--out", out}, &stdout, &stderr, configtest.MapEnv(nil)); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		fi, err := os.Stat(out)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("seed file: %v, %v; want mode 0600", fi, err)
		}
		if !strings.Contains(stdout.String(), "nats_nkey: "+out) || !strings.Contains(stdout.String(), "reconciler nats-creds --server-config") ||
			!strings.Contains(stdout.String(), "keep the seed file ("+out+")") {
			t.Errorf("service instructions:\n%s", stdout.String())
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"neither tenant nor service", nil, 2, "give --tenant T or --service"},
		{"both", []string{"--tenant", "acme", "--service"}, 2, "give --tenant T or --service"},
		{"a tenant that is no subject token", []string{"--tenant", "a.b"}, 2, `--tenant "a.b": want 1-128 of [A-Za-z0-9_-]`},
		{"a broken config", []string{"--tenant", "acme", "--events-stream", "a.b"}, 1, "config: --events-stream: events.stream: invalid stream name"},
		{"server config with a tenant", []string{"--server-config", "--tenant", "acme"}, 2, "--server-config takes no --tenant, --service or --out"},
		{"server config without the service's seed", []string{"--server-config"}, 1, "--server-config needs the service's seed file (nats_nkey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runNATSCreds(tc.args, &stdout, &stderr, configtest.MapEnv(nil)); code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.want)
			}
		})
	}
}

// TestE2ENATSTLS: with nats_listen_cert and nats_listen_key the embedded
// listener is TLS only; a runtime verifies it with the certificate as CA.
func TestE2ENATSTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := natstest.SelfSignedCert(t, dir)
	acmeSeed, acmePub := natsCredential(t, dir, "--tenant", "acme")
	cfg := tenantsConfig(t, "    nats_nkeys: ["+acmePub+"]\n", "")
	m := startMain(t, nil, "serve", "--config", cfg, "--data", t.TempDir(), "--http", "127.0.0.1:0",
		"--nats-listen-cert", cert, "--nats-listen-key", key)
	if !strings.HasPrefix(m.NATSURL(), "tls://") {
		t.Fatalf("NATS URL %s, want tls://", m.NATSURL())
	}
	nc, js, err := client.ConnectNATS(m.NATSURL(), "acme", client.NATSCredentials{NKeyFile: acmeSeed, CAFile: cert})
	if err != nil {
		t.Fatalf("acme over TLS: %v", err)
	}
	defer nc.Close()
	if key1, ev, err := awaitSettled(t, m.HTTPAddr(), acmeToken, "run_tls", js, "acme", 15*time.Second); err != nil || ev.Key != key1 {
		t.Fatalf("await over TLS: %+v, %v", ev, err)
	}
	if nc, _, err := client.ConnectNATS(m.NATSURL(), "acme", client.NATSCredentials{NKeyFile: acmeSeed}); err == nil {
		nc.Close()
		t.Fatal("connected without the CA that verifies the server")
	}
}

// TestE2EStreamLimits: events.max_bytes, max_msg_size and discard shape
// both streams (the work stream always discards new), and /metrics says
// how full each is.
func TestE2EStreamLimits(t *testing.T) {
	env := map[string]string{"RECONCILER_EVENTS_MAX_BYTES": "64KiB", "RECONCILER_EVENTS_MAX_MSG_SIZE": "8KiB", "RECONCILER_EVENTS_DISCARD": "old"}
	for k, v := range e2eEnv {
		env[k] = v
	}
	m := startMain(t, env, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	_, js, err := events.Connect(m.NATSURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		stream  string
		discard jetstream.DiscardPolicy
	}{{"RECON", jetstream.DiscardOld}, {"RECON_WORK", jetstream.DiscardNew}} {
		st, err := js.Stream(ctx, tc.stream)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.CachedInfo().Config; c.MaxBytes != 64<<10 || c.MaxMsgSize != 8<<10 || c.Discard != tc.discard {
			t.Errorf("%s: max bytes %d, max msg size %d, discard %v", tc.stream, c.MaxBytes, c.MaxMsgSize, c.Discard)
		}
	}
	waitMetrics(t, m.HTTPAddr(), "# TYPE reconciler_stream_bytes gauge",
		`reconciler_stream_max_bytes{stream="RECON"} 65536`, `reconciler_stream_max_bytes{stream="RECON_WORK"} 65536`,
		`reconciler_stream_bytes{stream="RECON_WORK"} 0`)
}
