package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/internal/yamlnode"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/matcher"
	"github.com/nats-io/nkeys"
	"gopkg.in/yaml.v3"
)

// valueOf reads a setting the way the config file spells it.
func valueOf(t *testing.T, c Config, key string) string {
	t.Helper()
	f, ok := fieldByPath(reflect.ValueOf(&c).Elem(), key)
	if !ok {
		t.Fatalf("no setting %q", key)
	}
	return fmt.Sprint(documentValue(f))
}

// yamlFor writes {key: value} as a nested YAML document ("resolver.grace" → resolver: {grace: …}).
func yamlFor(t *testing.T, key, value string) []byte {
	t.Helper()
	parts := strings.Split(key, ".")
	var doc any = value
	for i := len(parts) - 1; i >= 0; i-- {
		doc = map[string]any{parts[i]: doc}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// precedenceSamples holds three distinct valid values per setting: for the
// file, the environment and the flag, in that order.
var precedenceSamples = map[string][3]string{
	"data":                         {"/srv/file", "/srv/env", "/srv/flag"},
	"http":                         {"127.0.0.1:1001", ":1002", "127.0.0.1:1003"},
	"store":                        {"postgres://f@db/x", "postgres://e@db/x", "postgresql://g@db/x"},
	"store_listen_url":             {"postgres://f@db:5432/x", "postgres://e@db:5432/x", "postgresql://g@db:5432/x"},
	"nats_url":                     {"nats://file:4222", "nats://env:4222", "tls://flag:4222"},
	"nats_listen":                  {"127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"},
	"nats_listen_cert":             {pemFile, pemEnv, pemFlag},
	"nats_listen_key":              {pemFile, pemEnv, pemFlag},
	"nats_creds":                   {pemFile, pemEnv, pemFlag},
	"nats_nkey":                    {"testdata/nats/file.nk", "testdata/nats/env.nk", "testdata/nats/flag.nk"},
	"nats_ca":                      {pemFile, pemEnv, pemFlag},
	"nats_cert":                    {pemFile, pemEnv, pemFlag},
	"nats_key":                     {pemFile, pemEnv, pemFlag},
	"body_limit":                   {"2MiB", "3MiB", "4MiB"},
	"log_level":                    {"debug", "warn", "error"},
	"inbox_retention":              {"100h", "200h", "300h"},
	"bolt_wal":                     {"false", "true", "false"},
	"retention.settled_rows":       {"700h", "800h", "900h"},
	"retention.archive_dir":        {"/tmp/a1", "/tmp/a2", "/tmp/a3"},
	"resolver.interval":            {"1s", "2s", "3s"},
	"resolver.grace":               {"4s", "5s", "6s"},
	"resolver.pending_ttl":         {"7m", "8m", "9m"},
	"events.stream":                {"FILE", "ENV", "FLAG"},
	"events.work_stream":           {"FILE_WORK", "ENV_WORK", "FLAG_WORK"},
	"events.subject_prefix":        {"file", "env.x", "flag"},
	"events.replicas":              {"1", "3", "5"},
	"events.synced_after":          {"0s", "5s", "auto"},
	"events.degraded_depth":        {"0", "500", "20000"},
	"events.max_bytes":             {"1GiB", "2GiB", "3GiB"},
	"events.max_msg_size":          {"64KiB", "128KiB", "256KiB"},
	"events.discard":               {"new", "old", "new"},
	"stripe.api_base":              {"https://file.example", "https://env.example", "http://flag.example"},
	"stripe.api_key":               {"sk_file", "sk_env", ""},
	"stripe.replay_window":         {"1h", "2h", "720h"},
	"stripe.search_lag":            {"1m", "2m", "3m"},
	"paypal.api_base":              {"https://file.example", "https://env.example", "https://flag.example"},
	"paypal.replay_window":         {"6h", "7h", "8h"},
	"paypal.orders_replay_window":  {"1h", "2h", "3h"},
	"paypal.client_id":             {"cid-file", "cid-env", "cid-flag"},
	"paypal.client_secret":         {"cs-file", "cs-env", ""},
	"paging.pagerduty.url":         {"https://pd.file.example/v2", "https://pd.env.example/v2", "https://pd.flag.example/v2"},
	"paging.pagerduty.routing_key": {"rk-file", "rk-env", ""},
	"paging.webhook.url":           {"https://hook.file.example/a", "https://hook.env.example/b", ""},
	"approvals.ttl":                {"1h", "2h", "3h"},
	"registry.strict":              {"true", "false", "true"},
	"console.enabled":              {"false", "true", "false"},
	"console.trace_url":            {"https://file.example/{trace_id}", "https://env.example/t/{trace_id}", "http://flag.example/{trace_id}"},
	"console.secure_cookie":        {"true", "false", "true"},
	"console.session_ttl":          {"1h", "2h", "3h"},
	"console.session_key":          {"file-session-key-0123456789abcdef0123", "env-session-key-0123456789abcdef01234", ""},
	"console.search_timeout":       {"1s", "2s", "3s"},
}

// Files the NATS samples name: validation checks that they exist (and that
// an nkey seed file holds a seed), not what a certificate says.
const (
	pemFile = "testdata/nats/file.pem"
	pemEnv  = "testdata/nats/env.pem"
	pemFlag = "testdata/nats/flag.pem"
)

// precedenceContext holds, per setting, the environment its non-default
// samples need to be valid: the setting it pairs with, or the mode it
// belongs to.
var precedenceContext = map[string]map[string]string{
	"nats_listen_cert": {"RECONCILER_NATS_LISTEN_KEY": pemFile},
	"nats_listen_key":  {"RECONCILER_NATS_LISTEN_CERT": pemFile},
	"nats_creds":       {"RECONCILER_NATS_URL": "nats://x:4222"},
	"nats_nkey":        {"RECONCILER_NATS_URL": "nats://x:4222"},
	"nats_ca":          {"RECONCILER_NATS_URL": "nats://x:4222"},
	"nats_cert":        {"RECONCILER_NATS_URL": "nats://x:4222", "RECONCILER_NATS_KEY": pemFile},
	"nats_key":         {"RECONCILER_NATS_URL": "nats://x:4222", "RECONCILER_NATS_CERT": pemFile},
	"store_listen_url": {"RECONCILER_STORE": "postgres://u@pgbouncer:6432/x"},
	// An archive needs retention on.
	"retention.archive_dir": {"RECONCILER_RETENTION_SETTLED_ROWS": "720h"},
}

func TestPrecedence(t *testing.T) {
	def := Default()
	for _, s := range settings {
		sample, ok := precedenceSamples[s.Key]
		if !ok {
			t.Errorf("setting %q has no precedence samples: add them", s.Key)
			continue
		}
		fileV, envV, flagV := sample[0], sample[1], sample[2]
		file := configtest.WriteFile(t, "c.yaml", yamlFor(t, s.Key, fileV))
		cases := []struct {
			name  string
			file  string
			env   map[string]string
			flags map[string]string
			want  string
		}{
			{name: "default", want: valueOf(t, def, s.Key)},
			{name: "file beats default", file: file, want: fileV},
			{name: "env beats file", file: file, env: map[string]string{s.Env(): envV}, want: envV},
			{name: "empty env is unset", file: file, env: map[string]string{s.Env(): ""}, want: fileV},
		}
		if s.Flag() != "" {
			cases = append(cases, struct {
				name  string
				file  string
				env   map[string]string
				flags map[string]string
				want  string
			}{name: "flag beats env", file: file, env: map[string]string{s.Env(): envV}, flags: map[string]string{s.Key: flagV}, want: flagV})
		}
		for _, tc := range cases {
			t.Run(s.Key+"/"+tc.name, func(t *testing.T) {
				env := map[string]string{}
				if tc.name != "default" {
					maps.Copy(env, precedenceContext[s.Key])
				}
				maps.Copy(env, tc.env)
				c, err := Load(tc.file, configtest.MapEnv(env), tc.flags)
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				got := valueOf(t, c, s.Key)
				want := tc.want
				if tc.name != "default" {
					// Normalise the sample through the same parser ("100h" → "100h", "2MiB" → "2MiB").
					var w Config
					f, _ := fieldByPath(reflect.ValueOf(&w).Elem(), s.Key)
					if err := setScalar(f, want); err != nil {
						t.Fatal(err)
					}
					want = fmt.Sprint(documentValue(f))
				}
				if got != want {
					t.Errorf("%s = %q, want %q", s.Key, got, want)
				}
			})
		}
	}
}

func TestSettingNames(t *testing.T) {
	cases := []struct {
		key, flag, env string
	}{
		{"http", "http", "RECONCILER_HTTP"},
		{"nats_url", "nats-url", "RECONCILER_NATS_URL"},
		{"store_listen_url", "store-listen-url", "RECONCILER_STORE_LISTEN_URL"},
		{"nats_listen", "nats-listen", "RECONCILER_NATS_LISTEN"},
		{"nats_listen_cert", "nats-listen-cert", "RECONCILER_NATS_LISTEN_CERT"},
		{"nats_creds", "nats-creds", "RECONCILER_NATS_CREDS"},
		{"nats_nkey", "nats-nkey", "RECONCILER_NATS_NKEY"},
		{"nats_ca", "nats-ca", "RECONCILER_NATS_CA"},
		{"body_limit", "body-limit", "RECONCILER_BODY_LIMIT"},
		{"log_level", "log-level", "RECONCILER_LOG_LEVEL"},
		{"resolver.pending_ttl", "resolver-pending-ttl", "RECONCILER_RESOLVER_PENDING_TTL"},
		{"stripe.api_key", "", "RECONCILER_STRIPE_API_KEY"},
	}
	byKey := map[string]Setting{}
	for _, s := range settings {
		byKey[s.Key] = s
		if _, ok := fieldByPath(reflect.ValueOf(&Config{}).Elem(), s.Key); !ok {
			t.Errorf("setting %q names no Config field", s.Key)
		}
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			s, ok := byKey[tc.key]
			if !ok {
				t.Fatalf("no setting %q", tc.key)
			}
			if got := s.Flag(); got != tc.flag {
				t.Errorf("flag = %q, want %q", got, tc.flag)
			}
			if got := s.Env(); got != tc.env {
				t.Errorf("env = %q, want %q", got, tc.env)
			}
		})
	}
}

func loadFull(t *testing.T) Config {
	t.Helper()
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("full.yaml", data, configtest.MapEnv(configtest.FullEnv()))
	if err != nil {
		t.Fatalf("Parse(full.yaml): %v", err)
	}
	return c
}

func TestParseConfigFull(t *testing.T) {
	c := loadFull(t)
	orders := &ledger.Request{Method: "POST", Path: "/v2/checkout/orders"}
	capture := &ledger.Request{Method: "POST", Path: "/v2/checkout/orders/5O190127TN364715T/capture"}
	payments := &ledger.Request{Method: "POST", Path: "/v2/payments/captures/2GG2/refund"}
	cases := []struct {
		name      string
		got, want any
	}{
		{"tenant token expanded", c.TokenTenants()["acme-SeKrEt-token-0001"], "acme"},
		{"second tenant token", c.TokenTenants()["globex-token-rotated-9876"], "globex"},
		{"admin token", c.AdminTokens, []string{"admin-SeKrEt-token-0002"}},
		{"approver token", c.ApproverTokens(), map[string]string{"approver-SeKrEt-token-0009": "acme"}},
		{"approvals", c.Approvals, ApprovalsConfig{TTL: 12 * time.Hour}},
		{"registry", c.Registry, RegistryConfig{Strict: true}},
		{"stripe api key", c.Stripe.APIKey, "sk_test_SeKrEt_0003"},
		{"console session key", c.Console.SessionKey, "console-SeKrEt-session-key-0014-0123456789"},
		{"stripe endpoint secret", c.Stripe.Endpoints[0].Secrets, []string{"whsec_SeKrEt_0004"}},
		{"stripe endpoint defaults", [2]any{c.Stripe.Endpoints[1].Tolerance, c.Stripe.Endpoints[1].MetadataKey}, [2]any{5 * time.Minute, "metadata_local_id"}},
		{"paypal verify default", c.PayPal.Endpoints[1].Verify, "postback"},
		{"paypal cert prefixes default", c.PayPal.Endpoints[1].CertURLPrefixes, []string{"https://api.paypal.com/", "https://api.sandbox.paypal.com/"}},
		{"standard endpoint", c.Standard.Endpoints[0], StandardEndpoint{
			Name: "resend", Tenant: "acme", Secrets: []string{"whsec_U2VLckV0LTAwMDY="}, Tolerance: 5 * time.Minute,
			LocalIDPath: "data.tags.metadata_local_id", Vendor: "resend", ReplayWindow: 24 * time.Hour,
		}},
		{"resolver", c.Resolver, ResolverConfig{Interval: 30 * time.Second, Grace: 60 * time.Second, PendingTTL: 15 * time.Minute}},
		{"events", c.Events, EventsConfig{Stream: "RECON", WorkStream: "RECON_WORK", SubjectPrefix: "recon", SyncedAfter: SyncedAfterAuto, DegradedDepth: 10000,
			MaxBytes: 1 << 30, MaxMsgSize: 1 << 20, Discard: "new"}},
		{"inbox retention", c.InboxRetention, 168 * time.Hour},
		{"bolt wal on by default", c.BoltWAL, true},
		{"pagerduty", c.Paging.PagerDuty, PagerDutyConfig{URL: "https://events.pagerduty.com/v2/enqueue", RoutingKey: "pd-SeKrEt-0007"}},
		{"event types", c.EventTypes["stripe"]["payment_intent.payment_failed"], matcher.Failed},
		{"top-level defaults", [4]any{c.Data, c.HTTP, c.Store, c.BodyLimit}, [4]any{"./data", "127.0.0.1:8080", "bolt", ByteSize(1 << 20)}},
		{"embedded nats", [2]any{c.EmbeddedNATS(), c.NATSListen}, [2]any{true, "127.0.0.1:4222"}},
		{"ledger policy", c.Policy(), ledger.Policy{PendingTTL: 15 * time.Minute, Grace: time.Minute}},
		{"replay windows", [4]time.Duration{c.ReplayWindow("stripe", nil), c.ReplayWindow("paypal", payments), c.ReplayWindow("resend", nil), c.ReplayWindow("sendgrid", nil)},
			[4]time.Duration{24 * time.Hour, 72 * time.Hour, 24 * time.Hour, 0}},
		// Orders v2 forgets a PayPal-Request-Id after 6 h: its claims, and
		// PayPal claims that store no request, get that window.
		{"paypal orders replay windows", [3]time.Duration{c.ReplayWindow("paypal", orders), c.ReplayWindow("paypal", capture), c.ReplayWindow("paypal", nil)},
			[3]time.Duration{6 * time.Hour, 6 * time.Hour, 6 * time.Hour}},
		{"paths", [2]string{c.BoltPath(), c.NATSDir()}, [2]string{"data/reconciler.db", "data/nats"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !reflect.DeepEqual(tc.got, tc.want) {
				t.Errorf("got %#v, want %#v", tc.got, tc.want)
			}
		})
	}
}

func TestParseConfigSettings(t *testing.T) {
	data, err := os.ReadFile("testdata/settings.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("settings.yaml", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := [7]any{c.Data, c.HTTP, c.Store, c.NATSURL, c.NATSListen, c.BodyLimit, c.LogLevel}
	want := [7]any{"/var/lib/reconciler", "0.0.0.0:9090", "postgres://reconciler:s3cret@db.internal:5432/reconciler?sslmode=require",
		"nats://nats-1:4222,nats://nats-2:4222", "127.0.0.1:14222", ByteSize(512 << 10), slog.LevelDebug}
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// okTenant is a valid tenants block the error cases build on.
const okTenant = "tenants:\n  - id: acme\n    tokens: [acme-SeKrEt-token-0001]\n"

// testNKey and testSeed are a user nkey pair for the NATS cases.
var testNKey, testSeed = func() (string, string) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		panic(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	return pub, string(seed)
}()

func TestConfigErrors(t *testing.T) {
	caFile := configtest.WriteFile(t, "ca.pem", []byte("x"))
	seedFile := configtest.WriteFile(t, "svc.nk", []byte(testSeed+"\n"))
	cases := []struct {
		name string
		yaml string
		env  map[string]string
		want []string // each must occur in the error
	}{
		{"unknown top-level key", "http: 127.0.0.1:1\nhttp_addr: x\n",
			nil, []string{`cfg.yaml:2: http_addr: unknown key`}},
		{"unknown nested key", okTenant + "stripe:\n  endpoints:\n    - name: a\n      secrets: [whsec_SeKrEt]\n      tolerence: 5m\n",
			nil, []string{`cfg.yaml:8: stripe.endpoints[0].tolerence: unknown key (known: metadata_key, name, secrets, tenant, tolerance)`}},
		{"duplicate key", "http: 127.0.0.1:1\nhttp: 127.0.0.1:2\n",
			nil, []string{`cfg.yaml:2: http: duplicate key (first at line 1)`}},
		{"duplicate tenant id", okTenant + "  - id: acme\n    tokens: [other-SeKrEt-token-002]\n",
			nil, []string{`cfg.yaml:4: tenants[1].id: duplicate tenant id "acme" (first at line 2)`}},
		{"invalid tenant id", "tenants:\n  - id: a.b\n    tokens: [acme-SeKrEt-token-0001]\n",
			nil, []string{`cfg.yaml:2: tenants[0].id: invalid tenant id "a.b"`}},
		{"tenant without tokens", "tenants:\n  - id: acme\n",
			nil, []string{`cfg.yaml:2: tenants[0].tokens: tenant "acme" has no tokens`}},
		{"token used twice by tenants", okTenant + "  - id: globex\n    tokens: [acme-SeKrEt-token-0001]\n",
			nil, []string{`cfg.yaml:5: tenants[1].tokens[0]: token used twice (also at line 3)`}},
		{"token used twice by tenant and admin", okTenant + "admin_tokens:\n  - acme-SeKrEt-token-0001\n",
			nil, []string{`cfg.yaml:5: admin_tokens[0]: token used twice (also at line 3)`}},
		{"short token", "admin_tokens: [SeKrEt]\n",
			nil, []string{`cfg.yaml:1: admin_tokens[0]: token is shorter than 16 characters`}},
		{"duplicate stripe endpoint", okTenant + "stripe:\n  endpoints:\n    - {name: a, secrets: [whsec_SeKrEt]}\n    - {name: a, secrets: [whsec_SeKrEt]}\n",
			nil, []string{`cfg.yaml:7: stripe.endpoints[1].name: duplicate endpoint name "a" (first at line 6)`}},
		{"duplicate default-named endpoint", okTenant + "stripe:\n  endpoints:\n    - {secrets: [whsec_SeKrEt]}\n    - {secrets: [whsec_SeKrEt]}\n",
			nil, []string{`cfg.yaml:7: stripe.endpoints[1].name: duplicate endpoint name "default"`}},
		{"duplicate paypal endpoint", okTenant + "paypal:\n  endpoints:\n    - {name: p, webhook_id: WH-1}\n    - {name: p, webhook_id: WH-2}\n",
			nil, []string{`cfg.yaml:7: paypal.endpoints[1].name: duplicate endpoint name "p" (first at line 6)`}},
		{"duplicate standard endpoint", okTenant + "standard:\n  endpoints:\n    - {name: r, secrets: [whsec_U2VLckV0], local_id_path: a.b}\n    - {name: r, secrets: [whsec_U2VLckV0], local_id_path: a.b}\n",
			nil, []string{`cfg.yaml:7: standard.endpoints[1].name: duplicate endpoint name "r" (first at line 6)`}},
		{"stripe endpoint without secret", okTenant + "stripe:\n  endpoints:\n    - name: a\n      tenant: acme\n",
			nil, []string{`cfg.yaml:6: stripe.endpoints[0].secrets: endpoint "a" has no secret`}},
		{"stripe endpoint with empty secret", okTenant + "stripe:\n  endpoints:\n    - name: a\n      secrets: [\"\"]\n",
			nil, []string{`cfg.yaml:7: stripe.endpoints[0].secrets[0]: empty secret`}},
		{"standard endpoint without secret", okTenant + "standard:\n  endpoints:\n    - name: r\n      local_id_path: a.b\n",
			nil, []string{`cfg.yaml:6: standard.endpoints[0].secrets: endpoint "r" has no secret`}},
		{"standard secret not whsec", okTenant + "standard:\n  endpoints:\n    - name: r\n      local_id_path: a.b\n      secrets: [SeKrEt]\n",
			nil, []string{`cfg.yaml:8: standard.endpoints[0].secrets[0]: secret must start with whsec_`}},
		{"standard secret not base64", okTenant + "standard:\n  endpoints:\n    - name: r\n      local_id_path: a.b\n      secrets: [whsec_SeKrEt!!]\n",
			nil, []string{`cfg.yaml:8: standard.endpoints[0].secrets[0]: secret after whsec_ is not base64`}},
		{"paypal endpoint without webhook_id", okTenant + "paypal:\n  endpoints:\n    - name: p\n",
			nil, []string{`cfg.yaml:6: paypal.endpoints[0].webhook_id: endpoint "p" has no webhook_id`}},
		{"stripe endpoint unknown tenant", okTenant + "stripe:\n  endpoints:\n    - name: a\n      tenant: nobody\n      secrets: [whsec_SeKrEt]\n",
			nil, []string{`cfg.yaml:7: stripe.endpoints[0].tenant: endpoint "a" names unknown tenant "nobody"`}},
		{"paypal endpoint unknown tenant", okTenant + "paypal:\n  endpoints:\n    - name: p\n      tenant: nobody\n      webhook_id: WH-1\n",
			nil, []string{`cfg.yaml:7: paypal.endpoints[0].tenant: endpoint "p" names unknown tenant "nobody"`}},
		{"standard endpoint unknown tenant", okTenant + "standard:\n  endpoints:\n    - name: r\n      tenant: nobody\n      secrets: [whsec_U2VLckV0]\n      local_id_path: a.b\n",
			nil, []string{`cfg.yaml:7: standard.endpoints[0].tenant: endpoint "r" names unknown tenant "nobody"`}},
		{"endpoint tenant ambiguous", okTenant + "  - id: globex\n    tokens: [globex-SeKrEt-token-02]\nstripe:\n  endpoints:\n    - name: a\n      secrets: [whsec_SeKrEt]\n",
			nil, []string{`cfg.yaml:8: stripe.endpoints[0].tenant: endpoint "a" names no tenant`}},
		{"unset variable", okTenant + "stripe:\n  api_key: ${STRIPE_KEY}\n",
			nil, []string{`cfg.yaml:5: stripe.api_key: ${STRIPE_KEY} is not set in the environment`}},
		{"empty variable", okTenant + "stripe:\n  api_key: sk_${EMPTY}\n",
			map[string]string{"EMPTY": ""}, []string{`cfg.yaml:5: stripe.api_key: ${EMPTY} is not set in the environment`}},
		{"two unset variables", "admin_tokens: [\"${A}${B}\"]\n",
			nil, []string{`cfg.yaml:1: admin_tokens[0]: ${A} is not set`, `cfg.yaml:1: admin_tokens[0]: ${B} is not set`}},
		{"unset variable in a secret list is not also empty", okTenant + "stripe:\n  endpoints:\n    - name: a\n      secrets: [\"${NOPE}\"]\n",
			nil, []string{`cfg.yaml:7: stripe.endpoints[0].secrets[0]: ${NOPE} is not set in the environment`}},
		{"unterminated variable", "admin_tokens: [\"${ABC\"]\n",
			nil, []string{`cfg.yaml:1: admin_tokens[0]: unterminated ${`}},
		{"bad variable name", "admin_tokens: [\"${1X}\"]\n",
			nil, []string{`cfg.yaml:1: admin_tokens[0]: bad variable name "1X"`}},
		{"bad duration", "resolver:\n  interval: 30\n",
			nil, []string{`cfg.yaml:2: resolver.interval: invalid duration "30"`}},
		{"synced_after beyond the duplicates window", "events:\n  stream: RECON\n  synced_after: 2h\n",
			nil, []string{`cfg.yaml:3: events.synced_after: bad synced_after "2h": want auto, or a Go duration from 0s to 10m0s (the duplicates window is 1h)`}},
		{"a bad discard policy", "events:\n  discard: oldest\n",
			nil, []string{`cfg.yaml:2: events.discard: bad discard "oldest": want new (a full stream refuses events, which wait in the outbox) or old (it drops its oldest)`}},
		{"a stream without a bound", "events:\n  max_bytes: 0\n",
			nil, []string{`cfg.yaml:2: events.max_bytes: must be more than 0 (a stream without a bound fills the disk), got 0B`}},
		{"a message larger than its stream", "events:\n  max_bytes: 1MiB\n  max_msg_size: 2MiB\n",
			nil, []string{`cfg.yaml:3: events.max_msg_size: 2MiB is more than events.max_bytes 1MiB`}},
		{"negative degraded depth", "events:\n  degraded_depth: -5\n",
			nil, []string{`cfg.yaml:2: events.degraded_depth: bad count "-5": want a whole number, 0 or more`}},
		{"negative duration", "resolver:\n  interval: -1s\n",
			nil, []string{`cfg.yaml:2: resolver.interval: must be positive, got -1s`}},
		{"short inbox retention", "inbox_retention: 24h\n",
			nil, []string{`cfg.yaml:1: inbox_retention: must be at least 72h (vendors retry for about 3 days), got 24h`}},
		{"bad store value", "store: mysql://u:SeKrEt@db/x\n",
			nil, []string{`cfg.yaml:1: store: want bolt or a postgres:// URL`}},
		{"bad store word", "store: bbolt\n",
			nil, []string{`cfg.yaml:1: store: want bolt or a postgres:// URL`}},
		{"store listen url not postgres", "store: postgres://u@pgbouncer/x\nstore_listen_url: mysql://u:SeKrEt@db/x\n",
			nil, []string{`cfg.yaml:2: store_listen_url: want a postgres:// URL`}},
		{"store listen url with bolt", "store_listen_url: postgres://u:SeKrEt@db/x\n",
			nil, []string{`cfg.yaml:1: store_listen_url: is for a postgres store`}},
		{"bad http address", "http: localhost\n",
			nil, []string{`cfg.yaml:1: http: bad listen address "localhost": want host:port`}},
		{"bad http port", "http: 127.0.0.1:99999\n",
			nil, []string{`cfg.yaml:1: http: bad listen address "127.0.0.1:99999": port must be 0-65535`}},
		{"bad nats listen address", "nats_listen: 4222\n",
			nil, []string{`cfg.yaml:1: nats_listen: bad listen address "4222"`}},
		{"bad nats url", "nats_url: http://u:SeKrEt@x\n",
			nil, []string{`cfg.yaml:1: nats_url: URL 1 of the list is not a nats://`}},
		{"bad body limit", "body_limit: 1.5MiB\n",
			nil, []string{`cfg.yaml:1: body_limit: invalid size "1.5MiB"`}},
		{"huge body limit", "body_limit: 1GiB\n",
			nil, []string{`cfg.yaml:1: body_limit: must be between 1B and 64MiB, got 1GiB`}},
		{"bad log level", "log_level: loud\n",
			nil, []string{`cfg.yaml:1: log_level: slog: level string "loud"`}},
		{"list wanted", "admin_tokens: admin-SeKrEt-token-0002\n",
			nil, []string{`cfg.yaml:1: admin_tokens: want a list, got a single value`}},
		{"mapping wanted", "stripe: [a]\n",
			nil, []string{`cfg.yaml:1: stripe: want a mapping, got a list`}},
		{"value wanted", "http: {a: b}\n",
			nil, []string{`cfg.yaml:1: http: want a single value, got a mapping`}},
		{"top level not a mapping", "- a\n",
			nil, []string{`cfg.yaml:1: want a mapping, got a list`}},
		{"merge key", "base: &b {stream: X}\nevents:\n  <<: *b\n",
			nil, []string{`cfg.yaml:1: base: unknown key`, `cfg.yaml:3: events: merge keys (<<) are not supported`}},
		{"second document", "http: 127.0.0.1:1\n---\nhttp: 127.0.0.1:2\n",
			nil, []string{`cfg.yaml: line 2: a second YAML document`}},
		{"yaml syntax", "http: [\n",
			nil, []string{`cfg.yaml: yaml: line`}},
		{"paypal verify", okTenant + "paypal:\n  endpoints:\n    - {name: p, webhook_id: WH-1, verify: trust}\n",
			nil, []string{`cfg.yaml:6: paypal.endpoints[0].verify: want offline or postback, got "trust"`}},
		{"paypal postback without credentials", okTenant + "paypal:\n  endpoints:\n    - {name: p, webhook_id: WH-1, verify: postback}\n",
			nil, []string{`cfg.yaml:6: paypal.endpoints[0].verify: postback verification needs paypal.client_id and paypal.client_secret`}},
		{"paypal cert prefix without path", okTenant + "paypal:\n  endpoints:\n    - name: p\n      webhook_id: WH-1\n      cert_url_prefixes: [https://api.paypal.com]\n",
			nil, []string{`cfg.yaml:8: paypal.endpoints[0].cert_url_prefixes[0]: want an https:// URL ending in /`}},
		{"paypal cert prefix http", okTenant + "paypal:\n  endpoints:\n    - name: p\n      webhook_id: WH-1\n      cert_url_prefixes: [http://api.paypal.com/]\n",
			nil, []string{`cfg.yaml:8: paypal.endpoints[0].cert_url_prefixes[0]: want an https:// URL`}},
		{"paypal cn suffix without dot", okTenant + "paypal:\n  endpoints:\n    - name: p\n      webhook_id: WH-1\n      cert_cn_suffix: paypal.com\n",
			nil, []string{`cfg.yaml:8: paypal.endpoints[0].cert_cn_suffix: want a domain suffix starting with a dot`}},
		{"paypal missing ca file", okTenant + "paypal:\n  endpoints:\n    - name: p\n      webhook_id: WH-1\n      ca_file: /nonexistent/ca.pem\n",
			nil, []string{`cfg.yaml:8: paypal.endpoints[0].ca_file: stat /nonexistent/ca.pem`}},
		{"standard endpoint without local id path", okTenant + "standard:\n  endpoints:\n    - name: r\n      secrets: [whsec_U2VLckV0]\n",
			nil, []string{`cfg.yaml:6: standard.endpoints[0].local_id_path: must say where`}},
		{"bad event action", "event_types:\n  stripe:\n    charge.succeeded: yes\n",
			nil, []string{`cfg.yaml:3: event_types.stripe["charge.succeeded"]: invalid action "yes"`}},
		{"bad event vendor", "event_types:\n  Stripe: {a: ignore}\n",
			nil, []string{`cfg.yaml:2: event_types.Stripe: invalid vendor "Stripe"`}},
		{"bad stream", "events:\n  stream: a.b\n",
			nil, []string{`cfg.yaml:2: events.stream: invalid stream name "a.b"`}},
		{"bad work stream", "events:\n  work_stream: a.b\n",
			nil, []string{`cfg.yaml:2: events.work_stream: invalid stream name "a.b"`}},
		{"work items in the events stream", "events:\n  stream: EV\n  work_stream: EV\n",
			nil, []string{`cfg.yaml:3: events.work_stream: must not be the events stream "EV"`}},
		{"approver token also a tenant token", okTenant + "    approver_tokens: [acme-SeKrEt-token-0001]\n",
			nil, []string{`cfg.yaml:4: tenants[0].approver_tokens[0]: token used twice (also at line 3)`}},
		{"short approver token", okTenant + "    approver_tokens: [short]\n",
			nil, []string{`cfg.yaml:4: tenants[0].approver_tokens[0]: token is shorter than 16 characters`}},
		{"approvals ttl not positive", "approvals:\n  ttl: 0s\n",
			nil, []string{`cfg.yaml:2: approvals.ttl: must be positive, got 0s`}},
		{"console trace url without its placeholder", "console:\n  trace_url: https://jaeger.example/trace\n",
			nil, []string{`cfg.yaml:2: console.trace_url: must hold {trace_id}`}},
		{"console trace url not http", "console:\n  trace_url: javascript:x({trace_id})\n",
			nil, []string{`cfg.yaml:2: console.trace_url: want an http(s) URL`}},
		{"console vendor link without its placeholder", "console:\n  vendor_links:\n    stripe: https://dashboard.stripe.com/\n",
			nil, []string{`cfg.yaml:3: console.vendor_links.stripe: must hold {receipt_id}`}},
		{"console vendor link of a bad vendor", "console:\n  vendor_links:\n    Stripe: https://x.example/{receipt_id}\n",
			nil, []string{`cfg.yaml:3: console.vendor_links.Stripe: invalid vendor "Stripe"`}},
		{"console session ttl not positive", "console:\n  session_ttl: 0s\n",
			nil, []string{`cfg.yaml:2: console.session_ttl: must be positive, got 0s`}},
		{"console session key too short", "console:\n  session_key: short-key\n",
			nil, []string{`console.session_key: must be at least 32 characters`}},
		{"registry strict not a boolean", "registry:\n  strict: sometimes\n",
			nil, []string{`cfg.yaml:2: registry.strict: invalid boolean "sometimes": want true or false`}},
		{"bad subject prefix", "events:\n  subject_prefix: recon.>\n",
			nil, []string{`cfg.yaml:2: events.subject_prefix: invalid subject prefix`}},
		// A token NATS would take but the stream refuses is refused here,
		// where the error can name the line.
		{"subject prefix with a colon", "events:\n  subject_prefix: \"recon:v1\"\n",
			nil, []string{`cfg.yaml:2: events.subject_prefix: invalid subject prefix`}},
		{"bad pager webhook url", "paging:\n  webhook: {url: \"hooks.example/SeKrEt\"}\n",
			nil, []string{`cfg.yaml:2: paging.webhook.url: want an http(s) URL`}},
		{"bad api base", "stripe:\n  api_base: api.stripe.com\n",
			nil, []string{`cfg.yaml:2: stripe.api_base: want an http(s) URL, got "api.stripe.com"`}},
		{"nats listen on all interfaces without users", "nats_listen: 0.0.0.0:4222\n",
			nil, []string{`cfg.yaml:1: nats_listen: 0.0.0.0:4222 can be reached from other hosts and the embedded NATS server has no users, so anyone could publish and read every tenant's events: give the tenants nats_nkeys (reconciler nats-creds --tenant T makes one) or listen on 127.0.0.1`}},
		{"nats listen on a LAN address without users", "nats_listen: 192.168.1.20:4222\n",
			nil, []string{`cfg.yaml:1: nats_listen: 192.168.1.20:4222 can be reached from other hosts`}},
		{"nats listen on all IPv6 interfaces without users", "nats_listen: \"[::]:4222\"\n",
			nil, []string{`cfg.yaml:1: nats_listen: [::]:4222 can be reached from other hosts`}},
		{"nats listen on a host name without users", "nats_listen: nats.internal:4222\n",
			nil, []string{`cfg.yaml:1: nats_listen: nats.internal:4222 can be reached from other hosts`}},
		{"nats nkey that is a seed", okTenant + "    nats_nkeys: [SEED]\n",
			nil, []string{`cfg.yaml:4: tenants[0].nats_nkeys[0]: this is an nkey seed, the runtime's secret: put its public key (U…) here`}},
		{"nats nkey that is not one", okTenant + "    nats_nkeys: [UNOTAKEY]\n",
			nil, []string{`cfg.yaml:4: tenants[0].nats_nkeys[0]: not a public user nkey`}},
		{"nats nkey used by two tenants", okTenant + "    nats_nkeys: [NKEY]\n  - id: globex\n    tokens: [globex-SeKrEt-token-02]\n    nats_nkeys: [NKEY]\n",
			nil, []string{`cfg.yaml:7: tenants[1].nats_nkeys[0]: nkey used twice (also at line 4)`}},
		{"nats listen cert without key", "nats_listen_cert: CAFILE\n",
			nil, []string{`cfg.yaml:1: nats_listen_cert: needs its key file too (nats_listen_key)`}},
		{"nats listen cert missing", "nats_listen_cert: /nonexistent/cert.pem\nnats_listen_key: CAFILE\n",
			nil, []string{`cfg.yaml:1: nats_listen_cert: stat /nonexistent/cert.pem`}},
		{"nats listen cert with an external nats", "nats_url: nats://x:4222\nnats_listen_cert: CAFILE\nnats_listen_key: CAFILE\n",
			nil, []string{`cfg.yaml:2: nats_listen_cert: is for the embedded NATS server`, `cfg.yaml:3: nats_listen_key: is for the embedded NATS server`}},
		{"nats credentials for the embedded server", "nats_creds: CAFILE\nnats_ca: CAFILE\n",
			nil, []string{`cfg.yaml:1: nats_creds: is for an external NATS (nats_url)`, `cfg.yaml:2: nats_ca: is for an external NATS (nats_url)`}},
		{"nats creds and nkey", "nats_url: nats://x:4222\nnats_creds: CAFILE\nnats_nkey: SEEDFILE\n",
			nil, []string{`cfg.yaml:3: nats_nkey: nats_creds and nats_nkey are exclusive`}},
		{"nats nkey file without a seed", "nats_url: nats://x:4222\nnats_nkey: CAFILE\n",
			nil, []string{`cfg.yaml:2: nats_nkey: ` + "CAFILE" + ` holds no user nkey seed`}},
		{"nats client key without cert", "nats_url: nats://x:4222\nnats_key: CAFILE\n",
			nil, []string{`cfg.yaml:2: nats_key: needs its certificate file too (nats_cert)`}},
		{"every error is reported", "" +
			"tenants:\n" + //                                    1
			"  - id: acme\n" + //                                2
			"    tokens: [acme-SeKrEt-token-0001]\n" + //        3
			"  - id: acme\n" + //                                4
			"    tokens: [acme-SeKrEt-token-0001]\n" + //        5
			"    colour: blue\n" + //                            6
			"stripe:\n" + //                                     7
			"  endpoints:\n" + //                                8
			"    - name: a\n" + //                               9
			"      tenant: nobody\n" + //                        10
			"    - name: a\n" + //                               11
			"      tenant: acme\n" + //                          12
			"      secrets: [\"${NOT_SET}\"]\n" + //             13
			"      tolerance: soon\n" + //                       14
			"store: mysql://x\n" + //                            15
			"http: localhost\n", //                              16
			nil, []string{
				`cfg.yaml:4: tenants[1].id: duplicate tenant id "acme"`,
				`cfg.yaml:5: tenants[1].tokens[0]: token used twice`,
				`cfg.yaml:6: tenants[1].colour: unknown key`,
				`cfg.yaml:9: stripe.endpoints[0].secrets: endpoint "a" has no secret`,
				`cfg.yaml:10: stripe.endpoints[0].tenant: endpoint "a" names unknown tenant "nobody"`,
				`cfg.yaml:11: stripe.endpoints[1].name: duplicate endpoint name "a"`,
				`cfg.yaml:13: stripe.endpoints[1].secrets[0]: ${NOT_SET} is not set`,
				`cfg.yaml:14: stripe.endpoints[1].tolerance: invalid duration "soon"`,
				`cfg.yaml:15: store:`,
				`cfg.yaml:16: http: bad listen address`,
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			subst := strings.NewReplacer("CAFILE", caFile, "SEEDFILE", seedFile, "SEED", testSeed, "NKEY", testNKey)
			_, err := Parse("cfg.yaml", []byte(subst.Replace(tc.yaml)), configtest.MapEnv(tc.env))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			msg := err.Error()
			if strings.Contains(msg, testSeed) {
				t.Errorf("error quotes an nkey seed:\n%s", msg)
			}
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "CAFILE", caFile)
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "SeKrEt") {
				t.Errorf("error quotes a secret:\n%s", msg)
			}
			if n := strings.Count(msg, "\n") + 1; n != max(len(tc.want), 1) {
				t.Errorf("got %d errors, want %d:\n%s", n, len(tc.want), msg)
			}
		})
	}
}

func TestConfigValid(t *testing.T) {
	cases := []struct {
		name string
		yaml string
	}{
		{"empty file", ""},
		{"only a comment", "# nothing\n"},
		{"null document", "~\n"},
		{"minimal", "tenants:\n  - id: acme\n    tokens: [acme-token-0123456789]\n"},
		{"nats on loopback without users", "nats_listen: 127.0.0.1:4222\n"},
		{"nats on localhost without users", "nats_listen: localhost:4222\n"},
		{"nats on IPv6 loopback without users", "nats_listen: \"[::1]:4222\"\n"},
		{"nats on all interfaces with users", okTenant + "    nats_nkeys: [" + testNKey + "]\nnats_listen: 0.0.0.0:4222\n"},
		{"an external nats on all interfaces", "nats_url: nats://0.0.0.0:4222\nnats_listen: 0.0.0.0:4222\n"},
		{"postgres behind pgbouncer, listen direct", "store: postgres://u@pgbouncer:6432/x?default_query_exec_mode=exec\nstore_listen_url: postgres://u@db:5432/x\n"},
		{"same endpoint name across vendors", okTenant + "stripe:\n  endpoints: [{name: x, secrets: [whsec_a]}]\npaypal:\n  endpoints: [{name: x, webhook_id: WH-1}]\n"},
		{"endpoint of the default tenant", "stripe:\n  endpoints: [{secrets: [whsec_a], tenant: default}]\n"},
		{"aliases", "tenants:\n  - id: acme\n    tokens: &t [acme-token-0123456789]\nstripe:\n  endpoints: [{secrets: *t}]\n"},
		{"literal ${", "stripe:\n  api_key: \"sk_$${literal}\"\n"},
		{"null lists", "tenants:\nadmin_tokens: ~\nevent_types:\n"},
		{"flow mappings", "resolver: {interval: 1s, grace: 0s, pending_ttl: 1m}\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse("cfg.yaml", []byte(tc.yaml), nil); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}

func TestOverrideErrors(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		flags map[string]string
		want  string
	}{
		{"bad env duration", map[string]string{"RECONCILER_RESOLVER_GRACE": "1 minute"}, nil,
			`RECONCILER_RESOLVER_GRACE: resolver.grace: invalid duration "1 minute"`},
		{"bad env address", map[string]string{"RECONCILER_HTTP": "nowhere"}, nil,
			`RECONCILER_HTTP: http: bad listen address "nowhere"`},
		{"bad env synced_after", map[string]string{"RECONCILER_EVENTS_SYNCED_AFTER": "soon"}, nil,
			`RECONCILER_EVENTS_SYNCED_AFTER: events.synced_after: bad synced_after "soon"`},
		{"bad flag size", nil, map[string]string{"body_limit": "lots"},
			`--body-limit: body_limit: invalid size "lots"`},
		{"bad flag store", nil, map[string]string{"store": "postgres//u:SeKrEt@x"},
			`--store: store: want bolt or a postgres:// URL`},
		{"good flag over bad env", map[string]string{"RECONCILER_LOG_LEVEL": "loud"}, map[string]string{"log_level": "warn"},
			`RECONCILER_LOG_LEVEL: log_level: slog: level string "loud"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("", configtest.MapEnv(tc.env), tc.flags)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "SeKrEt") {
				t.Errorf("error quotes a secret: %q", err)
			}
		})
	}
}

func TestExpandEnv(t *testing.T) {
	env := configtest.MapEnv(map[string]string{"A": "alpha", "B_2": "beta", "EMPTY": ""})
	cases := []struct {
		in       string
		want     string
		missing  []string
		wantErr  string
		wantSame bool
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "alpha"},
		{in: "x${A}y${B_2}z", want: "xalphaybetaz"},
		{in: "$A and $ alone", want: "$A and $ alone"},
		{in: "$${A}", want: "${A}"},
		{in: "a$$${A}", want: "a$${A}"},
		{in: "${MISSING}", missing: []string{"MISSING"}},
		{in: "${EMPTY}", missing: []string{"EMPTY"}},
		{in: "${A", wantErr: "unterminated ${"},
		{in: "${}", wantErr: "bad variable name"},
		{in: "${A-B}", wantErr: "bad variable name"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, missing, err := expandEnv(tc.in, env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(missing, tc.missing) {
				t.Errorf("missing = %v, want %v", missing, tc.missing)
			}
			if tc.missing == nil && got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRedacted(t *testing.T) {
	c := loadFull(t)
	c.Store = "postgres://reconciler:pg-SeKrEt-pw@db:5432/x?sslmode=require&sslpassword=ssl-SeKrEt"
	c.NATSURL = "nats://user:nats-SeKrEt@n1:4222,nats://tok-SeKrEt@n2:4222"
	before := fmt.Sprintf("%v", c.Tenants)

	r := c.Redacted()
	out, err := json.Marshal(document(r))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "SeKrEt") {
		t.Errorf("redacted config holds a secret: %s", out)
	}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c)} {
		if strings.Contains(s, "SeKrEt") {
			t.Errorf("formatting a Config shows a secret: %s", s)
		}
	}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "config", c)
	if strings.Contains(logged.String(), "SeKrEt") || !strings.Contains(logged.String(), RedactedText) {
		t.Errorf("slog of a Config: %s", logged.String())
	}
	if got := fmt.Sprintf("%v", c.Tenants); got != before {
		t.Errorf("Redacted changed the original: %s, was %s", got, before)
	}
	cases := []struct {
		name      string
		got, want any
	}{
		{"tenant token", r.Tenants[0].Tokens, []string{RedactedText}},
		{"approver token", r.Tenants[0].ApproverTokens, []string{RedactedText}},
		{"tenant id kept", r.Tenants[0].ID, "acme"},
		{"admin token", r.AdminTokens, []string{RedactedText}},
		{"stripe api key", r.Stripe.APIKey, RedactedText},
		{"stripe secrets", r.Stripe.Endpoints[1].Secrets, []string{RedactedText, RedactedText}},
		{"paypal client secret", r.PayPal.ClientSecret, RedactedText},
		{"paypal client id kept", r.PayPal.ClientID, "paypal-client"},
		{"standard secret", r.Standard.Endpoints[0].Secrets, []string{RedactedText}},
		{"routing key", r.Paging.PagerDuty.RoutingKey, RedactedText},
		{"pagerduty url kept", r.Paging.PagerDuty.URL, "https://events.pagerduty.com/v2/enqueue"},
		{"pager webhook path", r.Paging.Webhook.URL, "https://hooks.slack.com/REDACTED"},
		{"store password", r.Store, "postgres://reconciler:REDACTED@db:5432/x?sslmode=require&sslpassword=REDACTED"},
		{"nats credentials", r.NATSURL, "nats://user:REDACTED@n1:4222,nats://REDACTED@n2:4222"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !reflect.DeepEqual(tc.got, tc.want) {
				t.Errorf("got %#v, want %#v", tc.got, tc.want)
			}
		})
	}
}

func TestRedactString(t *testing.T) {
	cases := []struct {
		name, in, mode, want string
	}{
		{"bolt", "bolt", "url", "bolt"},
		{"postgres without password", "postgres://postgres@127.0.0.1:5432/test", "url", "postgres://postgres@127.0.0.1:5432/test"},
		{"postgres password", "postgresql://u:p@h/db", "url", "postgresql://u:REDACTED@h/db"},
		{"postgres password param", "postgres://h/db?user=u&password=p", "url", "postgres://h/db?password=REDACTED&user=u"},
		{"nats plain", "nats://127.0.0.1:4222", "url", "nats://127.0.0.1:4222"},
		{"nats token", "nats://tok@h:4222", "url", "nats://REDACTED@h:4222"},
		{"unparsable hides all", "postgres://u:p%zz@h", "url", RedactedText},
		{"endpoint keeps host", "https://hooks.slack.com/services/T/B/X", "endpoint", "https://hooks.slack.com/REDACTED"},
		{"endpoint without path", "https://bridge.example", "endpoint", "https://bridge.example"},
		{"endpoint with userinfo", "https://u:p@bridge.example", "endpoint", "https://bridge.example/REDACTED"},
		{"endpoint unparsable", "not a url", "endpoint", RedactedText},
		{"whole", "anything", "true", RedactedText},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := redactString(tc.in, tc.mode); got != tc.want {
				t.Errorf("redactString(%q, %q) = %q, want %q", tc.in, tc.mode, got, tc.want)
			}
		})
	}
}

// TestRedactedCoversEverySecretField fails when a field whose name says
// "secret" is added without a `secret` tag, so Redacted cannot miss it.
func TestRedactedCoversEverySecretField(t *testing.T) {
	// Public keys and the paths of files (the seed in an nkey file is a
	// secret; its path is not, and the nats CLI takes it as a flag).
	notSecret := map[string]bool{"metadata_key": true, "key_encoding": true, "max_key_len": true, "key_format": true, "nats_nkeys": true, "nats_nkey": true, "nats_key": true, "nats_listen_key": true}
	var walk func(reflect.Type, string)
	walk = func(rt reflect.Type, path string) {
		for i := range rt.NumField() {
			f := rt.Field(i)
			name := yamlnode.FieldName(f)
			if name == "" {
				continue
			}
			p := yamlnode.JoinPath(path, name)
			_, tagged := f.Tag.Lookup("secret")
			looksSecret := false
			for _, w := range []string{"secret", "token", "key", "password"} {
				looksSecret = looksSecret || strings.Contains(name, w)
			}
			if looksSecret && !tagged && !notSecret[name] {
				t.Errorf("%s looks secret but has no `secret` tag", p)
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, p)
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
}

func TestByteSize(t *testing.T) {
	cases := []struct {
		in      string
		want    ByteSize
		text    string
		wantErr bool
	}{
		{in: "1048576", want: 1 << 20, text: "1MiB"},
		{in: "1MiB", want: 1 << 20, text: "1MiB"},
		{in: "512KiB", want: 512 << 10, text: "512KiB"},
		{in: "2GiB", want: 2 << 30, text: "2GiB"},
		{in: "1MB", want: 1000000, text: "1000000B"},
		{in: "1kB", want: 1000, text: "1000B"},
		{in: " 7 B ", want: 7, text: "7B"},
		{in: "0", want: 0, text: "0B"},
		{in: "1.5MiB", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "MiB", wantErr: true},
		{in: "1TiB", wantErr: true},
		{in: "99999999999999GiB", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			var b ByteSize
			err := b.UnmarshalText([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %d, want an error", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b != tc.want || b.String() != tc.text {
				t.Errorf("got %d (%s), want %d (%s)", b, b, tc.want, tc.text)
			}
		})
	}
}

func TestAliasBomb(t *testing.T) {
	// 6 KB that expand to a million nodes against the schema: 1000 tenants
	// that all alias one mapping whose tokens alias one list of 1000.
	var b strings.Builder
	b.WriteString("tok: &k [" + strings.Repeat("a,", 999) + "a]\n")
	b.WriteString("ten: &m {id: x, tokens: *k}\n")
	b.WriteString("tenants: [" + strings.Repeat("*m,", 999) + "*m]\n")
	_, err := Parse("cfg.yaml", []byte(b.String()), nil)
	if err == nil || !strings.Contains(err.Error(), "document too large") {
		t.Fatalf("err = %v, want the node budget to stop it", err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n > maxErrors+1 {
		t.Errorf("got %d errors, want at most %d", n, maxErrors+1)
	}
}

func FuzzLoadConfig(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("tenants: [{id: a, tokens: [\"${X}\"]}]\n"))
	f.Add([]byte("a: &a [*a]\n"))
	env := configtest.MapEnv(configtest.FullEnv())
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, env)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error is not a Error: %v", err)
			}
			return
		}
		// A config that loads is valid, and its redacted copy shares nothing with it.
		if err := c.Validate(); err != nil {
			t.Fatalf("loaded config does not validate: %v", err)
		}
		r := c.Redacted()
		_ = r.String()
		for i := range r.Tenants {
			for j := range r.Tenants[i].Tokens {
				if r.Tenants[i].Tokens[j] != RedactedText {
					t.Fatalf("token %d of tenant %d not redacted", j, i)
				}
				r.Tenants[i].Tokens[j] = "changed"
				if c.Tenants[i].Tokens[j] == "changed" {
					t.Fatal("Redacted shares its token slices with the original")
				}
			}
		}
	})
}

func ExampleParse() {
	doc := "tenants:\n  - id: acme\n    tokens: [\"${ACME_TOKEN}\"]\nresolver:\n  interval: soon\n"
	_, err := Parse("reconciler.yaml", []byte(doc), func(string) string { return "" })
	fmt.Println(err)
	// Output:
	// reconciler.yaml:3: tenants[0].tokens[0]: ${ACME_TOKEN} is not set in the environment
	// reconciler.yaml:5: resolver.interval: invalid duration "soon": want a Go duration such as 90s or 15m
}

// TestArchitectureExampleParses keeps the configuration example of
// docs/architecture.md §9 valid: every key it shows must exist, and every
// value must pass validation.
func TestArchitectureExampleParses(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- config-example:begin -->\n```yaml\n")
	if !ok {
		t.Fatal("docs/architecture.md has no config example block")
	}
	block, _, ok = strings.Cut(block, "```\n<!-- config-example:end -->")
	if !ok {
		t.Fatal("the config example block of docs/architecture.md is not closed")
	}
	if _, err := Parse("docs/architecture.md", []byte(block), configtest.MapEnv(configtest.FullEnv())); err != nil {
		t.Fatalf("the example of docs/architecture.md §9 does not parse: %v", err)
	}
}
