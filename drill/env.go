package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/registry"
	"github.com/agentledger/reconciler/webhooks"
)

// Names the environment uses.
const (
	tenant        = "drill"
	tenantToken   = "tok_drill_tenant"
	approverToken = "tok_drill_approver"
	webhookSecret = "whsec_drill_secret"
	replayWindow  = 24 * time.Hour
)

// clock is the drill's injected clock: real time plus an offset the drill
// moves forward to skip a lease or a replay window without waiting.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().UTC().Add(c.off)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// env is one drill's world: a bbolt ledger and an embedded NATS server in a
// fresh temporary directory, the outbox relay, the real API with the
// webhook handlers on a loopback server, the watch in front of it, the
// fake vendor, and the agent runtime under test. close tears it down in
// the service's shutdown order, the runtime first.
type env struct {
	dir      string
	clock    *clock
	log      *slog.Logger
	sabotage string

	store *bolt.Store
	nats  *natsserver.Server
	nc    *nats.Conn          // the service's
	js    jetstream.JetStream // the service's: relay, stream checks
	// rnc and rjs are the agent runtime's, authenticated as the drill
	// tenant with the seed file a runtime would be given.
	rnc    *nats.Conn
	rjs    jetstream.JetStream
	apiSrv *httptest.Server
	vendor *Vendor
	hc     *http.Client
	// watch is the agents' way to the API; rt is the runtime whose agents
	// the drill drives (env.agent); ledger is the harness's own view of the
	// rows, straight to the API, so what a drill checks never depends on
	// the runtime it checks.
	watch  *apiWatch
	rt     runtime
	ledger *client.Client
	// approver decides approval requests, with the tenant's approver
	// token (never the token that claims).
	approver *client.Client
	// tool is the registry entry the drills' calls are made under: the
	// default charge tool, or Options.Tool (with its
	// duplicate_delivery_test box checked: the box the drills are for).
	tool ledger.Tool
	// custom is true when tool came from Options.Tool.
	custom bool

	relayStop context.CancelFunc
	relayDone chan error
}

// newEnv builds a drill's world and starts the runtime o.launch makes
// (the Go runtime when it is nil).
func newEnv(ctx context.Context, o Options) (_ *env, err error) {
	dir, err := os.MkdirTemp(o.TempDir, "reconciler-drill-*")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	e := &env{dir: dir, clock: &clock{}, log: o.Logger, sabotage: o.Sabotage, hc: &http.Client{Timeout: 30 * time.Second}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.store, err = bolt.Open(filepath.Join(dir, "reconciler.db"), bolt.Options{Policy: ledger.DefaultPolicy(), Logger: e.log}); err != nil {
		return e, fmt.Errorf("open store: %w", err)
	}
	// Never the service's 4222: a random loopback port, with the drill
	// tenant's runtime as its one user, so every drill's waits go through
	// the credentials and permissions a multi-host set-up uses.
	nopts := natsserver.DefaultOptions(filepath.Join(dir, "nats"), e.log)
	nopts.Listen = "127.0.0.1:-1"
	seedFile, pub, err := runtimeUser(dir)
	if err != nil {
		return e, err
	}
	nopts.Accounts = func(service string) (string, error) {
		return events.AccountLayout{Service: service, Tenants: map[string][]string{tenant: {pub}}}.ServerConfig()
	}
	if e.nats, err = natsserver.Start(ctx, nopts); err != nil {
		return e, fmt.Errorf("start nats: %w", err)
	}
	if e.nc, e.js, err = events.Connect(natsserver.ServiceURL, e.log, e.nats.ServiceOptions()...); err != nil {
		return e, err
	}
	if e.rnc, e.rjs, err = client.ConnectNATS(e.nats.ClientURL(), tenant, client.NATSCredentials{NKeyFile: seedFile}); err != nil {
		return e, err
	}
	if _, err = events.EnsureStream(ctx, e.js, events.StreamConfig{}); err != nil {
		return e, err
	}
	if _, err = events.EnsureWorkStream(ctx, e.js, events.WorkStreamConfig{}); err != nil {
		return e, err
	}
	// In the account layout the runtime cannot make its work consumer.
	if err = events.EnsureWorkConsumers(ctx, e.js, events.WorkStreamConfig{}, 0, []string{tenant}); err != nil {
		return e, err
	}
	relay, err := events.NewRelay(e.store, e.js, events.RelayOptions{Logger: e.log, Interval: 100 * time.Millisecond})
	if err != nil {
		return e, err
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.relayStop, e.relayDone = stop, make(chan error, 1)
	go func() { e.relayDone <- relay.Run(rctx) }()

	// The tool registry, as the service serves it (a sabotage may make
	// it ignore an open checklist box).
	var reg api.Registry = registry.New(e.store, registry.Options{Logger: e.log})
	if o.Sabotage == SabotageIgnoreChecklist {
		reg = ignoreChecklist{reg}
	}
	srv, err := api.New(api.Options{
		Store:          e.store,
		Registry:       reg,
		ApproverTokens: map[string]string{approverToken: tenant},
		Tokens:         map[string]string{tenantToken: tenant},
		Policy:         ledger.DefaultPolicy(),
		ReplayWindow:   func(string, *ledger.Request) time.Duration { return replayWindow },
		Logger:         e.log,
		Now:            e.clock.Now,
		PollInterval:   50 * time.Millisecond,
	})
	if err != nil {
		return e, err
	}
	wh, err := webhooks.New(webhooks.Options{
		Store:  e.store,
		Stripe: []webhooks.StripeEndpoint{{Name: "default", Tenant: tenant, Secrets: []string{webhookSecret}}},
		Logger: e.log,
		Now:    e.clock.Now,
	})
	if err != nil {
		return e, err
	}
	wh.Register(srv.Echo())
	e.apiSrv = httptest.NewServer(srv.Handler())
	e.vendor = NewVendor(e.clock.Now)
	if e.ledger, err = client.New(e.apiSrv.URL, tenantToken, client.WithLogger(e.log)); err != nil {
		return e, err
	}
	if e.approver, err = client.New(e.apiSrv.URL, approverToken, client.WithLogger(e.log)); err != nil {
		return e, err
	}
	e.tool, e.custom = defaultTool(), o.Tool != nil
	if o.Tool != nil {
		e.tool = drilledEntry(*o.Tool)
	}
	if err = e.register(ctx, e.tool); err != nil {
		return e, err
	}
	if e.watch, err = newAPIWatch(e.apiSrv.URL, e.log); err != nil {
		return e, err
	}
	launch := o.launch
	if launch == nil {
		launch = launchGo
	}
	e.rt, err = launch(ctx, runtimeEnv{URL: e.watch.agentsURL(), Token: tenantToken, JS: e.rjs, Log: e.log})
	if err != nil {
		return e, fmt.Errorf("start the runtime: %w", err)
	}
	return e, nil
}

// close stops everything in the service's order: the agents, HTTP intake,
// the relay, NATS, the store; then removes the directory.
func (e *env) close() {
	if e.rt != nil {
		if err := e.rt.close(); err != nil {
			e.log.Warn("runtime did not end cleanly", "err", err)
		}
	}
	if e.vendor != nil {
		e.vendor.Close()
	}
	if e.watch != nil {
		e.watch.close()
	}
	if e.apiSrv != nil {
		e.apiSrv.CloseClientConnections()
		e.apiSrv.Close()
	}
	if e.relayStop != nil {
		e.relayStop()
		<-e.relayDone
	}
	if e.rnc != nil {
		e.rnc.Close()
	}
	if e.nc != nil {
		e.nc.Close()
	}
	if e.nats != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = e.nats.Shutdown(sctx)
		cancel()
	}
	if e.store != nil {
		_ = e.store.Close()
	}
	_ = os.RemoveAll(e.dir)
}

// runtimeUser makes the drill tenant's NATS key pair, writes its seed file
// into dir as `reconciler nats-creds` would, and returns the file and the
// public key (its user in the tenant's account).
func runtimeUser(dir string) (string, string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", fmt.Errorf("nats key: %w", err)
	}
	defer kp.Wipe()
	pub, _ := kp.PublicKey() // a pair made by CreateUser always has both
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, tenant+".nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		return "", "", fmt.Errorf("nats seed file: %w", err)
	}
	return seedFile, pub, nil
}

// drained waits until the outbox is empty, so every event the ledger wrote
// is on the stream.
func (e *env) drained(ctx context.Context) error {
	return poll(ctx, func() (bool, error) {
		recs, err := e.store.PendingEvents(ctx, 1)
		return len(recs) == 0, err
	})
}

// eventCounts returns how many events the stream holds per status for one
// run (subject recon.<tenant>.<run_id>.<status>), after the outbox drained.
func (e *env) eventCounts(ctx context.Context, runID string) (map[string]uint64, error) {
	if err := e.drained(ctx); err != nil {
		return nil, fmt.Errorf("outbox never drained: %w", err)
	}
	st, err := e.js.Stream(ctx, events.DefaultStream)
	if err != nil {
		return nil, err
	}
	prefix := events.DefaultSubjectPrefix + "." + tenant + "." + runID + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for subj, n := range info.State.Subjects {
		out[subj[len(prefix):]] += n
	}
	return out, nil
}

// webhook has the fake vendor send its signed event for object id.
func (e *env) webhook(ctx context.Context, id string) (int, string, error) {
	return e.vendor.SendWebhook(ctx, e.hc, e.apiSrv.URL+"/webhooks/stripe/default", id, webhookSecret)
}

// poll calls cond every few milliseconds until it is true, fails, or ctx ends.
func poll(ctx context.Context, cond func() (bool, error)) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// defaultTool is the registry entry of the drills' charge: a Stripe
// PaymentIntent create, write_idempotent, the key in Idempotency-Key,
// autonomous, every checklist box checked.
func defaultTool() ledger.Tool {
	return ledger.Tool{
		Name: toolCharge, Vendor: "stripe", Class: ledger.ClassWriteIdempotent, SideEffect: "charge",
		KeyPlacement: ledger.KeyPlacement{Header: keyHeader}, Autonomy: ledger.AutonomyAutonomous,
		Checklist: ledger.Checklist{SideEffectDocumented: true, KeyBornInRuntime: true, LedgerOrUniqueField: true,
			TimeoutLeavesUnknown: true, ErrorClassesMapped: true, DuplicateDeliveryTest: true, CheckedBy: "reconciler drill"},
	}
}

// drilledEntry is a registered entry as the drills' world registers it:
// as it is, but with the duplicate_delivery_test box checked, since that
// box is what the drills decide (left open, it alone would send every
// claim to approval).
func drilledEntry(t ledger.Tool) ledger.Tool {
	t = t.Clone()
	t.Tenant, t.Version, t.CreatedAt, t.UpdatedAt = "", 0, time.Time{}, time.Time{}
	t.Checklist.DuplicateDeliveryTest, t.Checklist.CheckedAt = true, time.Time{}
	if t.Checklist.CheckedBy == "" {
		t.Checklist.CheckedBy = "reconciler drill"
	}
	return t
}

// register puts t into the drill world's registry (replacing the entry of
// its name).
func (e *env) register(ctx context.Context, t ledger.Tool) error {
	if _, _, err := e.ledger.PutTool(ctx, t); err != nil {
		return fmt.Errorf("register %s: %w", t.Name, err)
	}
	return nil
}

// ignoreChecklist is the sabotaged registry: it grants what a tool asks
// for, whatever its checklist says.
type ignoreChecklist struct{ api.Registry }

func (r ignoreChecklist) Decide(ctx context.Context, t ledger.Tool, runID string, intent json.RawMessage) (ledger.Autonomy, string) {
	t.Checklist = defaultTool().Checklist
	return r.Registry.Decide(ctx, t, runID, intent)
}
