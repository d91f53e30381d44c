package natsserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/ledger"
)

// pageConsumer is a durable consumer of the service's
// (resolver.DefaultPageConsumer; natsserver's tests may not import
// resolver), which no tenant may reach.
const pageConsumer = "reconciler-page-resolver"

var scope = events.PermissionScope{}

// bus is a NATS server that grants the reconciler's permission set: the
// service's JetStream and a seed file per tenant runtime.
type bus struct {
	url   string
	seeds map[string]string // tenant → nkey seed file
	// service connects as the service (a new connection each call).
	service func(t *testing.T) jetstream.JetStream
	// restart restarts the service's side: the embedded server with a new
	// service key, or the service's connection to an external one.
	restart func(t *testing.T)
}

// newSeed makes a user key pair and writes its seed to a 0600 file.
func newSeed(t *testing.T, name string) (pub, file string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ = kp.PublicKey()
	seed, _ := kp.Seed()
	file = filepath.Join(t.TempDir(), name+".nk")
	if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return pub, file
}

func newPub(t *testing.T) string {
	pub, _ := newSeed(t, "x")
	return pub
}

// tenantKeys makes a key pair per tenant: the public keys for the
// layout, the seed files for the runtimes.
func tenantKeys(t *testing.T, tenants ...string) (map[string][]string, map[string]string) {
	t.Helper()
	keys, seeds := map[string][]string{}, map[string]string{}
	for _, tn := range tenants {
		pub, file := newSeed(t, tn)
		keys[tn], seeds[tn] = []string{pub}, file
	}
	return keys, seeds
}

// accounts is natsserver.Options.Accounts for the tenants' keys, as serve
// passes it.
func accounts(keys map[string][]string) func(string) (string, error) {
	return func(service string) (string, error) {
		return events.AccountLayout{Scope: scope, Service: service, Tenants: keys}.ServerConfig()
	}
}

// embeddedBus is the embedded server with an account per tenant, as serve
// runs it.
func embeddedBus(t *testing.T) *bus {
	t.Helper()
	keys, seeds := tenantKeys(t, "acme", "globex")
	dir := t.TempDir()
	var mu sync.Mutex
	var srv *natsserver.Server
	start := func(t *testing.T, listen string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := natsserver.Start(ctx, natsserver.Options{Listen: listen, StoreDir: dir, Accounts: accounts(keys)})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		mu.Lock()
		srv = s
		mu.Unlock()
	}
	start(t, "127.0.0.1:-1")
	b := &bus{url: srv.ClientURL(), seeds: seeds}
	t.Cleanup(func() { natstest.Shutdown(t, srv) })
	b.service = func(t *testing.T) jetstream.JetStream {
		mu.Lock()
		s := srv
		mu.Unlock()
		nc, js, err := events.Connect(natsserver.ServiceURL, nil, s.ServiceOptions()...)
		if err != nil {
			t.Fatalf("service connect: %v", err)
		}
		t.Cleanup(nc.Close)
		return js
	}
	b.restart = func(t *testing.T) {
		natstest.Shutdown(t, srv)
		start(t, strings.TrimPrefix(b.url, "nats://"))
	}
	return b
}

// externalBus is the machine's nats-server binary configured only through
// its own configuration file, with the users and permissions an admin
// copies from `reconciler nats-creds`.
func externalBus(t *testing.T) *bus {
	t.Helper()
	bin := "/usr/sbin/nats-server"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("nats-server"); err != nil {
			t.Skip("no nats-server binary (/usr/sbin/nats-server or on PATH): the external-server run needs one")
		}
	}
	svcPub, svcSeed := newSeed(t, "service")
	keys, seeds := tenantKeys(t, "acme", "globex")
	accountsConf, err := events.AccountLayout{Scope: scope, Service: svcPub, Tenants: keys}.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	dir := t.TempDir()
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\n%s", port, dir, accountsConf)
	confFile := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", confFile)
	out, err := os.Create(filepath.Join(dir, "nats-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(out.Name())
			t.Logf("nats-server log:\n%s", log)
		}
	})
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	b := &bus{url: url, seeds: seeds}
	b.service = func(t *testing.T) jetstream.JetStream {
		opts, err := events.Credentials{NKeyFile: svcSeed}.Options()
		if err != nil {
			t.Fatal(err)
		}
		var nc *nats.Conn
		var js jetstream.JetStream
		deadline := time.Now().Add(10 * time.Second)
		for {
			nc, js, err = events.Connect(url, nil, append(opts, nats.RetryOnFailedConnect(false))...)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // the process is still starting
		}
		if err != nil {
			t.Fatalf("service connect: %v", err)
		}
		t.Cleanup(nc.Close)
		return js
	}
	b.restart = func(*testing.T) {} // the service reconnects with its seed: b.service again
	return b
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestTenantPermissionsEmbedded(t *testing.T) { testTenantPermissions(t, embeddedBus(t)) }

func TestTenantPermissionsExternal(t *testing.T) { testTenantPermissions(t, externalBus(t)) }

// runtime is one tenant runtime's connection, with the permission errors
// the server sent it.
type runtime struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu     sync.Mutex
	denied []string // lower-cased permission violations, as they came
}

func connectTenant(t *testing.T, b *bus, tenant string) *runtime {
	t.Helper()
	opts, err := events.Credentials{NKeyFile: b.seeds[tenant]}.Options()
	if err != nil {
		t.Fatal(err)
	}
	r := &runtime{}
	opts = append(opts,
		nats.CustomInboxPrefix(events.InboxPrefix(tenant)),
		nats.PermissionErrOnSubscribe(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				r.mu.Lock()
				r.denied = append(r.denied, strings.ToLower(err.Error()))
				r.mu.Unlock()
			}
		}))
	r.nc, _, err = events.Connect(b.url, nil, opts...)
	if err != nil {
		t.Fatalf("%s connect: %v", tenant, err)
	}
	t.Cleanup(r.nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r.js, err = events.TenantJetStream(ctx, r.nc); err != nil {
		t.Fatalf("%s jetstream: %v", tenant, err)
	}
	return r
}

// expectDenied waits for the server's permission violation naming subject,
// or a subject that starts with it when it ends in a dot (a consumer name
// nats.go chose follows).
func (r *runtime) expectDenied(t *testing.T, op, subject string) {
	t.Helper()
	want := strings.ToLower(op + ` to "` + subject)
	if !strings.HasSuffix(subject, ".") {
		want += `"`
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		for _, d := range r.denied {
			if strings.Contains(d, want) {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no permission violation for %s", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// publishEvent publishes ev as the relay does.
func publishEvent(t *testing.T, js jetstream.JetStream, ev ledger.Event) {
	t.Helper()
	subj, err := events.Subject("", ev)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(ev)
	msg := nats.NewMsg(subj)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, ev.Tenant+":"+ev.Key+":"+ev.Status)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("service publish %s: %v", subj, err)
	}
}

func tenantEvent(tenant, run, key string) ledger.Event {
	return ledger.Event{Key: key, Tenant: tenant, RunID: run, Tool: "stripe.payment_intents.create", ToolCallID: "call_1",
		Status: string(ledger.StatusSucceeded), ReceiptID: "pi_1", Source: ledger.SourceWebhook, At: natstest.BaseTime}
}

// awaitLive awaits ev in tenant's runtime while the service publishes it,
// as a tenant's account sees its events: live, never from the stream's
// past. The service publishes it again (a new message id each time) until
// the wait ends, so the test does not depend on when Await subscribed.
func awaitLive(t *testing.T, svc, js jetstream.JetStream, tenant string, ev ledger.Event, d time.Duration) (ledger.Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		subj, err := events.Subject("", ev)
		if err != nil {
			t.Error(err)
			return
		}
		body, _ := json.Marshal(ev)
		for i := 0; ; i++ {
			msg := nats.NewMsg(subj)
			msg.Data = body
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:%s:%s:%d", ev.Tenant, ev.Key, ev.Status, i))
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = svc.PublishMsg(pctx, msg)
			pcancel()
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	defer wg.Wait()
	defer close(done)
	return events.Await(ctx, js, tenant, ev.RunID, ev.Key)
}

// subjects returns the stream's message count per subject under filter.
func subjects(t *testing.T, js jetstream.JetStream, filter string) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// testTenantPermissions is the permission set checked with real clients:
// each tenant reads its own events and nothing else, through no door, and
// only the service publishes.
func testTenantPermissions(t *testing.T, b *bus) {
	svc := b.service(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := events.EnsureStream(ctx, svc, events.StreamConfig{}); err != nil {
		t.Fatalf("service ensure stream: %v", err)
	}
	// The service's durable consumer, which no tenant may touch.
	if _, err := svc.CreateOrUpdateConsumer(ctx, events.DefaultStream, jetstream.ConsumerConfig{
		Durable: pageConsumer, FilterSubject: "recon.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("service durable consumer: %v", err)
	}
	acme := connectTenant(t, b, "acme")
	globex := connectTenant(t, b, "globex")

	t.Run("acme receives its own events", func(t *testing.T) {
		ev, err := awaitLive(t, svc, acme.js, "acme", tenantEvent("acme", "run-1", "key-a1"), 10*time.Second)
		if err != nil || ev.Key != "key-a1" || ev.Tenant != "acme" {
			t.Fatalf("await: got %+v, %v", ev, err)
		}
		sub, err := acme.nc.SubscribeSync("recon.acme.>")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := acme.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		publishEvent(t, svc, tenantEvent("acme", "run-2", "key-a2"))
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil || msg.Subject != "recon.acme.run-2.succeeded" {
			t.Fatalf("core subscription: got %v, %v", msg, err)
		}
	})

	t.Run("globex reads its own events", func(t *testing.T) {
		// The positive control: the denials below are the boundary, not a
		// broken connection.
		ev, err := awaitLive(t, svc, globex.js, "globex", tenantEvent("globex", "run-1", "key-g1"), 10*time.Second)
		if err != nil || ev.Key != "key-g1" {
			t.Fatalf("await: got %+v, %v", ev, err)
		}
	})

	t.Run("acme's Await skips what does not parse or is not its key", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		subj := "recon.acme.run-9.succeeded"
		junk := [][]byte{nil, []byte("not json"), []byte("[]"), []byte("null"), []byte(`{"key":"key-a9"}`),
			[]byte(`{"key":"key-a9","tenant":"globex","run_id":"run-9","status":"succeeded"}`),
			[]byte(`{"key":"other","tenant":"acme","run_id":"run-9","status":"succeeded"}`)}
		genuine, _ := json.Marshal(tenantEvent("acme", "run-9", "key-a9"))
		ev, err := events.Await(ctx, acme.js, "acme", "run-9", "key-a9", events.WithOpened(func() {
			for i, body := range append(junk, genuine) {
				msg := nats.NewMsg(subj)
				msg.Data = body
				msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("junk-%d", i))
				if _, err := svc.PublishMsg(ctx, msg); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		}))
		if err != nil || ev.Key != "key-a9" || ev.Tenant != "acme" || ev.ReceiptID != "pi_1" {
			t.Fatalf("await: %+v, %v", ev, err)
		}
	})

	t.Run("a tenant's account has no JetStream of its own", func(t *testing.T) {
		plain, err := jetstream.New(globex.nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err = plain.AccountInfo(ctx); !errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			t.Fatalf("account info: got %v, want not enabled for the account", err)
		}
	})

	t.Run("globex cannot subscribe to acme's events or inboxes", func(t *testing.T) {
		for _, subj := range []string{"recon.acme.>", "recon.>", ">", "_INBOX.>", "_INBOX_acme.>", "$JS.EVENT.>"} {
			sub, err := globex.nc.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sub.NextMsg(5 * time.Second); !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("subscribe %s: got %v, want a permission violation", subj, err)
			}
			_ = sub.Unsubscribe()
		}
	})

	t.Run("globex cannot read acme's messages", func(t *testing.T) {
		if ev, err := awaitLive(t, svc, globex.js, "acme", tenantEvent("acme", "run-1", "key-a1"), 2*time.Second); err == nil {
			t.Fatalf("globex awaited acme's event: %+v", ev)
		}
		globex.expectDenied(t, "subscription", "recon.acme.run-1.*")
	})

	t.Run("globex finds no other door to the stream", func(t *testing.T) {
		byBody := func(filter string) []byte {
			b, _ := json.Marshal(map[string]any{"stream_name": "RECON", "config": map[string]any{
				"name": "snoop", "durable_name": "snoop", "filter_subject": filter, "deliver_policy": "all", "ack_policy": "none"}})
			return b
		}
		doors := []struct {
			name, subject string
			body          []byte
		}{
			{"legacy create, filter in the body", "$JS.API.CONSUMER.CREATE.RECON", byBody("recon.acme.>")},
			{"create without a filter in the subject", "$JS.API.CONSUMER.CREATE.RECON.snoop", byBody("recon.acme.>")},
			{"create on its own filter", "$JS.API.CONSUMER.CREATE.RECON.snoop.recon.globex.>", byBody("recon.globex.>")},
			{"create on acme's filter", "$JS.API.CONSUMER.CREATE.RECON.snoop.recon.acme.>", byBody("recon.acme.>")},
			{"create on every tenant", "$JS.API.CONSUMER.CREATE.RECON.snoop.recon.*.>", byBody("recon.*.>")},
			{"create on the whole stream", "$JS.API.CONSUMER.CREATE.RECON.snoop.recon.>", byBody("recon.>")},
			{"legacy durable create", "$JS.API.CONSUMER.DURABLE.CREATE.RECON.snoop", byBody("recon.acme.>")},
			{"take over the service's durable", "$JS.API.CONSUMER.CREATE.RECON." + pageConsumer + ".recon.globex.>", byBody("recon.globex.>")},
			{"pull from the service's durable", "$JS.API.CONSUMER.MSG.NEXT.RECON." + pageConsumer, []byte(`{"batch":10}`)},
			{"read the service's durable", "$JS.API.CONSUMER.INFO.RECON." + pageConsumer, nil},
			{"delete the service's durable", "$JS.API.CONSUMER.DELETE.RECON." + pageConsumer, nil},
			{"list consumer names", "$JS.API.CONSUMER.NAMES.RECON", nil},
			{"list consumers", "$JS.API.CONSUMER.LIST.RECON", nil},
			{"get a message", "$JS.API.STREAM.MSG.GET.RECON", []byte(`{"last_by_subj":"recon.acme.run-1.succeeded"}`)},
			{"direct get", "$JS.API.DIRECT.GET.RECON", []byte(`{"seq":1}`)},
			{"direct get by subject", "$JS.API.DIRECT.GET.RECON.recon.acme.run-1.succeeded", nil},
			{"stream info", "$JS.API.STREAM.INFO.RECON", []byte(`{"subjects_filter":"recon.>"}`)},
			{"purge", "$JS.API.STREAM.PURGE.RECON", nil},
			{"delete the stream", "$JS.API.STREAM.DELETE.RECON", nil},
			{"update the stream", "$JS.API.STREAM.UPDATE.RECON", []byte(`{"name":"RECON","subjects":["recon.>"]}`)},
			{"a stream of its own", "$JS.API.STREAM.CREATE.SNOOP", []byte(`{"name":"SNOOP","subjects":["snoop.>"]}`)},
			{"stream names", "$JS.API.STREAM.NAMES", nil},
			{"ack the service's messages", "$JS.ACK.RECON." + pageConsumer + ".1.1.1.0.0", nil},
		}
		// Every request at once, replies to globex's own inbox: none may
		// come back, and the server must report each one as denied.
		inbox := events.InboxPrefix("globex") + ".doors"
		answers, err := globex.nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer answers.Unsubscribe()
		for _, d := range doors {
			if err := globex.nc.PublishRequest(d.subject, inbox, d.body); err != nil {
				t.Fatal(err)
			}
		}
		if err := globex.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, d := range doors {
			t.Run(d.name, func(t *testing.T) { globex.expectDenied(t, "publish", d.subject) })
		}
		if msg, err := answers.NextMsg(500 * time.Millisecond); err == nil {
			t.Fatalf("a door answered on %s: %s", msg.Subject, msg.Data)
		}
		if _, err := svc.Consumer(ctx, events.DefaultStream, pageConsumer); err != nil {
			t.Errorf("the service's durable is gone: %v", err)
		}
	})

	t.Run("no tenant can publish under recon", func(t *testing.T) {
		for _, r := range []struct {
			who  *runtime
			subj string
		}{
			{globex, "recon.acme.run-1.succeeded"}, // the forged resume of the issue
			{globex, "recon.globex.run-1.succeeded"},
			{acme, "recon.acme.run-3.succeeded"},
		} {
			pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
			_, err := r.who.js.Publish(pctx, r.subj, []byte(`{"key":"forged"}`))
			pcancel()
			if err == nil {
				t.Fatalf("publish %s: acknowledged", r.subj)
			}
			r.who.expectDenied(t, "publish", r.subj)
		}
		got := subjects(t, svc, "recon.>")
		for subj := range got {
			switch subj {
			case "recon.acme.run-1.succeeded", "recon.acme.run-2.succeeded", "recon.acme.run-9.succeeded", "recon.globex.run-1.succeeded":
			default:
				t.Errorf("stream subject %s: not the service's", subj)
			}
		}
	})

	t.Run("each tenant's workers take its own work items and no other's", func(t *testing.T) {
		testWorkPermissions(t, svc, acme, globex)
	})

	t.Run("the service still publishes after a restart", func(t *testing.T) {
		b.restart(t)
		svc := b.service(t)
		acme := connectTenant(t, b, "acme")
		if ev, err := awaitLive(t, svc, acme.js, "acme", tenantEvent("acme", "run-4", "key-a4"), 10*time.Second); err != nil || ev.Key != "key-a4" {
			t.Fatalf("await after restart: %+v, %v", ev, err)
		}
	})
}

func TestStartRefusesAnOpenListenerOffLoopback(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:-1", "[::]:-1", "192.0.2.10:-1", "nats.internal:-1"} {
		t.Run(listen, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := natsserver.Start(ctx, natsserver.Options{Listen: listen, StoreDir: t.TempDir()})
			if err == nil {
				natstest.Shutdown(t, s)
				t.Fatal("an open server started off loopback")
			}
			if !errors.Is(err, natsserver.ErrOpenListener) {
				t.Fatalf("got %v, want ErrOpenListener", err)
			}
		})
	}
}

func TestAuthRequiresAKnownKey(t *testing.T) {
	keys, seeds := tenantKeys(t, "acme")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := natsserver.Start(ctx, natsserver.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Accounts: accounts(keys)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natstest.Shutdown(t, s) })
	_, stranger := newSeed(t, "stranger")
	for name, opts := range map[string][]nats.Option{
		"no credentials":  nil,
		"an unknown nkey": mustCreds(t, events.Credentials{NKeyFile: stranger}),
	} {
		t.Run(name, func(t *testing.T) {
			nc, err := nats.Connect(s.ClientURL(), opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("got %v, want an authorization error", err)
			}
		})
	}
	nc, err := nats.Connect(s.ClientURL(), mustCreds(t, events.Credentials{NKeyFile: seeds["acme"]})...)
	if err != nil {
		t.Fatalf("acme: %v", err)
	}
	nc.Close()
}

func mustCreds(t *testing.T, c events.Credentials) []nats.Option {
	t.Helper()
	opts, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

func TestTLSListener(t *testing.T) {
	cert, key := natstest.SelfSignedCert(t, t.TempDir())
	keys, seeds := tenantKeys(t, "acme")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := natsserver.Start(ctx, natsserver.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Accounts: accounts(keys), CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natstest.Shutdown(t, s) })

	// The service's own connection is in-process: no TLS, no certificate.
	nc, js, err := events.Connect(natsserver.ServiceURL, nil, s.ServiceOptions()...)
	if err != nil {
		t.Fatalf("service: %v", err)
	}
	defer nc.Close()
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatalf("service: %v", err)
	}

	withCA := mustCreds(t, events.Credentials{NKeyFile: seeds["acme"], CAFile: cert})
	rc, err := nats.Connect(s.ClientURL(), append(withCA, nats.CustomInboxPrefix(events.InboxPrefix("acme")))...)
	if err != nil {
		t.Fatalf("acme over TLS: %v", err)
	}
	if !rc.TLSRequired() {
		t.Error("the server does not require TLS")
	}
	rc.Close()

	if nc, err := nats.Connect(s.ClientURL(), mustCreds(t, events.Credentials{NKeyFile: seeds["acme"]})...); err == nil {
		nc.Close()
		t.Fatal("connected without the CA that verifies the server")
	}
}

func TestStartChecksItsOptions(t *testing.T) {
	keys, _ := tenantKeys(t, "acme")
	cert, _ := natstest.SelfSignedCert(t, t.TempDir())
	cases := []struct {
		name string
		opts natsserver.Options
		want string
	}{
		{"not a public key", natsserver.Options{Accounts: accounts(map[string][]string{"x": {"SUABC"}})},
			`nats accounts: tenant x: "SUABC" is not a public user nkey (U…)`},
		{"a key twice", natsserver.Options{Accounts: accounts(map[string][]string{"acme": keys["acme"], "globex": keys["acme"]})}, "is also tenant acme's"},
		{"no tenant key", natsserver.Options{Accounts: accounts(nil)}, "no tenant has a NATS key"},
		{"a configuration without the service", natsserver.Options{Accounts: func(string) (string, error) {
			return events.AccountLayout{Scope: scope, Service: keys["acme"][0], Tenants: map[string][]string{"globex": {newPub(t)}}}.ServerConfig()
		}}, "it has no user for the service's key"},
		{"a certificate without its key", natsserver.Options{Accounts: accounts(keys), CertFile: cert}, "nats tls: the listener needs both a certificate and a key file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Listen, tc.opts.StoreDir = "127.0.0.1:-1", t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := natsserver.Start(ctx, tc.opts)
			if err == nil {
				natstest.Shutdown(t, s)
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want %q", err, tc.want)
			}
		})
	}
}

// publishWork publishes a work item of tenant as the relay does.
func publishWork(t *testing.T, js jetstream.JetStream, tenant, key string) {
	t.Helper()
	ev := tenantEvent(tenant, "run-w", key)
	ev.Status, ev.ReceiptID, ev.Source = ledger.EventQueued, "", ledger.SourceRuntime
	ev.Work = &ledger.WorkItem{Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, MetadataLocalID: "rl_" + key,
		Intent: json.RawMessage(`{"amount":1}`), Request: &ledger.Request{Method: "POST", Path: "/v1/payment_intents"}}
	subj, err := events.WorkSubject("", ev)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(ev)
	msg := nats.NewMsg(subj)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, ev.MsgID())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("service publish %s: %v", subj, err)
	}
}

// takeWork joins tenant's shared worker consumer, which the service made,
// as client.Worker does, takes one item and acks it.
func takeWork(t *testing.T, r *runtime, tenant string) ledger.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.js.CreateOrUpdateConsumer(ctx, events.DefaultWorkStream, events.WorkConsumerConfig("", tenant, 0)); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("%s: making the worker consumer: got %v, want no responders (the account does not import it)", tenant, err)
	}
	cons, err := r.js.Consumer(ctx, events.DefaultWorkStream, events.WorkConsumer(tenant))
	if err != nil {
		t.Fatalf("%s: worker consumer: %v", tenant, err)
	}
	if info, err := cons.Info(ctx); err != nil || info.Name != events.WorkConsumer(tenant) {
		t.Fatalf("%s: consumer info: %+v, %v", tenant, info, err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("%s: pull: %v", tenant, err)
	}
	var ev ledger.Event
	if err := json.Unmarshal(msg.Data(), &ev); err != nil {
		t.Fatal(err)
	}
	if err := msg.InProgress(); err != nil {
		t.Fatalf("%s: in progress: %v", tenant, err)
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatalf("%s: ack: %v", tenant, err)
	}
	return ev
}

// testWorkPermissions: a tenant's credential pulls its shared worker
// consumer on RECON_WORK, which the service made, and acks its items;
// another tenant's can neither join that consumer, nor make one on the
// first tenant's work subjects, nor read the work stream any other way,
// nor publish work, nor have a reply or a delivery stored in another
// tenant's subjects (issue #25).
func testWorkPermissions(t *testing.T, svc jetstream.JetStream, acme, globex *runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := events.EnsureWorkStream(ctx, svc, events.WorkStreamConfig{})
	if err != nil {
		t.Fatalf("service ensure work stream: %v", err)
	}
	if err := events.EnsureWorkConsumers(ctx, svc, events.WorkStreamConfig{}, 0, []string{"acme", "globex"}); err != nil {
		t.Fatalf("service work consumers: %v", err)
	}
	publishWork(t, svc, "acme", "key-wa")
	publishWork(t, svc, "globex", "key-wg")

	if ev := takeWork(t, acme, "acme"); ev.Key != "key-wa" || ev.Tenant != "acme" || ev.Work == nil {
		t.Fatalf("acme's worker took %+v", ev)
	}

	byBody := func(name, filter string) []byte {
		b, _ := json.Marshal(map[string]any{"stream_name": "RECON_WORK", "config": map[string]any{
			"name": name, "durable_name": name, "filter_subject": filter, "deliver_policy": "all", "ack_policy": "explicit"}})
		return b
	}
	doors := []struct {
		name, subject string
		body          []byte
	}{
		{"join acme's consumer", "$JS.API.CONSUMER.CREATE.RECON_WORK.worker-acme.recon_work.acme.>", byBody("worker-acme", "recon_work.acme.>")},
		{"its own name on acme's work", "$JS.API.CONSUMER.CREATE.RECON_WORK.worker-globex.recon_work.acme.>", byBody("worker-globex", "recon_work.acme.>")},
		{"its own name on every tenant's work", "$JS.API.CONSUMER.CREATE.RECON_WORK.worker-globex.recon_work.>", byBody("worker-globex", "recon_work.>")},
		{"its own name without a filter", "$JS.API.CONSUMER.CREATE.RECON_WORK.worker-globex", byBody("worker-globex", "recon_work.globex.>")},
		{"legacy create, filter in the body", "$JS.API.CONSUMER.CREATE.RECON_WORK", byBody("worker-globex", "recon_work.globex.>")},
		{"another name on its own work", "$JS.API.CONSUMER.CREATE.RECON_WORK.snoop.recon_work.globex.>", byBody("snoop", "recon_work.globex.>")},
		{"legacy durable create", "$JS.API.CONSUMER.DURABLE.CREATE.RECON_WORK.worker-globex", byBody("worker-globex", "recon_work.globex.>")},
		{"pull from acme's consumer", "$JS.API.CONSUMER.MSG.NEXT.RECON_WORK.worker-acme", []byte(`{"batch":10}`)},
		{"read acme's consumer", "$JS.API.CONSUMER.INFO.RECON_WORK.worker-acme", nil},
		{"delete acme's consumer", "$JS.API.CONSUMER.DELETE.RECON_WORK.worker-acme", nil},
		{"delete its own consumer", "$JS.API.CONSUMER.DELETE.RECON_WORK.worker-globex", nil},
		{"ack acme's items", "$JS.ACK.RECON_WORK.worker-acme.1.1.1.0.0", nil},
		{"get a work item", "$JS.API.STREAM.MSG.GET.RECON_WORK", []byte(`{"seq":1}`)},
		{"direct get a work item", "$JS.API.DIRECT.GET.RECON_WORK", []byte(`{"seq":1}`)},
		{"work stream info", "$JS.API.STREAM.INFO.RECON_WORK", nil},
		{"purge the work stream", "$JS.API.STREAM.PURGE.RECON_WORK", nil},
		{"publish acme a work item", "recon_work.acme.stripe.payment_intents.create", []byte(`{"key":"forged"}`)},
		{"publish itself a work item", "recon_work.globex.stripe.payment_intents.create", []byte(`{"key":"forged"}`)},
	}
	inbox := events.InboxPrefix("globex") + ".workdoors"
	answers, err := globex.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer answers.Unsubscribe()
	for _, d := range doors {
		if err := globex.nc.PublishRequest(d.subject, inbox, d.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := globex.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) { globex.expectDenied(t, "publish", d.subject) })
	}
	if msg, err := answers.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("a door answered on %s: %s", msg.Subject, msg.Data)
	}
	// Its own items it takes, as acme did.
	if ev := takeWork(t, globex, "globex"); ev.Key != "key-wg" || ev.Tenant != "globex" {
		t.Fatalf("globex's worker took %+v", ev)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 0 {
		t.Fatalf("work stream after both acks: %d messages, %v; want none (nothing forged)", info.State.Msgs, err)
	}

	t.Run("replies and deliveries globex names stay in its own account", func(t *testing.T) {
		before := subjects(t, svc, "recon.>")
		publishWork(t, svc, "globex", "key-wg2")
		// The two paths, through the only requests globex may
		// send: its own consumer's info answered to acme's event and work
		// subjects, a hundred times each, and a pull of its own consumer
		// whose delivery goes to acme's work subject.
		targets := []string{"recon.acme.run-1.succeeded", "recon_work.acme.stripe.payment_intents.create"}
		for _, reply := range targets {
			for range 100 {
				if err := globex.nc.PublishRequest("$RECON.JS.API.CONSUMER.INFO.RECON_WORK.worker-globex", reply, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := globex.nc.PublishRequest("$RECON.JS.API.CONSUMER.MSG.NEXT.RECON_WORK.worker-globex", reply, []byte(`{"batch":1,"expires":1000000000}`)); err != nil {
				t.Fatal(err)
			}
		}
		// The positive control: the same info request, answered to
		// globex's own inbox, does come back.
		if msg, err := globex.nc.Request("$RECON.JS.API.CONSUMER.INFO.RECON_WORK.worker-globex", nil, 5*time.Second); err != nil || !strings.Contains(string(msg.Data), `"name":"worker-globex"`) {
			t.Fatalf("globex's own consumer info: %v", err)
		}
		// The pull above took globex's item (delivered to a subject no one
		// reads); the stream holds it until its ack wait hands it out again.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			cinfo, err := svc.Consumer(ctx, events.DefaultWorkStream, "worker-globex")
			if err != nil {
				t.Fatal(err)
			}
			if ci := cinfo.CachedInfo(); ci.NumAckPending > 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := subjects(t, svc, "recon.>"); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("event stream changed: %v, was %v", got, before)
		}
		wi, err := st.Info(ctx, jetstream.WithSubjectFilter("recon_work.>"))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]uint64{"recon_work.globex.stripe.payment_intents.create": 1}; fmt.Sprint(wi.State.Subjects) != fmt.Sprint(want) {
			t.Errorf("work stream subjects: %v, want %v (nothing in acme's)", wi.State.Subjects, want)
		}
	})
}
