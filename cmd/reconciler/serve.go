package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/approvals"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/eventsprom"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/freeze"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/postgres"
	"github.com/agentledger/reconciler/paging"
	"github.com/agentledger/reconciler/registry"
	"github.com/agentledger/reconciler/resolver"
	"github.com/agentledger/reconciler/webhooks"
)

// wire builds the components of `serve` in dependency order — store, NATS,
// stream, relay, API — registering each one's closer in its shutdown stage,
// and returns the HTTP handler. On error the closers registered so far still
// run in Close.
func (m *Main) wire(ctx context.Context) (http.Handler, error) {
	cfg := m.Config
	log := m.Logger
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	tp, err := m.startTracing(ctx)
	if err != nil {
		return nil, err
	}
	st, err := m.openStore(ctx)
	if err != nil {
		return nil, err
	}

	reg.MustRegister(newRowsCollector(st, log.With("component", "metrics"), m.Now))

	nc, js, err := m.connectNATS(ctx)
	if err != nil {
		return nil, err
	}
	stream, err := events.EnsureStream(ctx, js, events.StreamConfig{Name: cfg.Events.Stream, SubjectPrefix: cfg.Events.SubjectPrefix, Replicas: int(cfg.Events.Replicas),
		Limits: cfg.Events.StreamLimits()})
	if err != nil {
		return nil, fmt.Errorf("nats stream %s: %w", cfg.Events.Stream, err)
	}
	// The outbox autonomy's work items, beside the events (subjects
	// <prefix>_work.>, which do not overlap <prefix>.>).
	limits := cfg.Events.StreamLimits()
	workCfg := events.WorkStreamConfig{Name: cfg.Events.WorkStream, SubjectPrefix: cfg.Events.SubjectPrefix, Replicas: int(cfg.Events.Replicas),
		MaxBytes: limits.MaxBytes, MaxMsgSize: limits.MaxMsgSize}
	if _, err := events.EnsureWorkStream(ctx, js, workCfg); err != nil {
		return nil, fmt.Errorf("nats stream %s: %w", cfg.Events.WorkStream, err)
	}
	// A tenant's runtimes cannot make their work consumer in the account
	// layout: the service makes every tenant's.
	for _, name := range []string{cfg.Events.Stream, cfg.Events.WorkStream} {
		if st, err := js.Stream(ctx, name); err == nil {
			if c := st.CachedInfo(); c.Config.MaxBytes != limits.MaxBytes {
				log.Warn("a stream holds more than events.max_bytes, so its limit was left as it is: lowering it would drop stored events; purge the stream or raise the setting",
					"stream", name, "bytes", c.State.Bytes, "max_bytes", c.Config.MaxBytes, "events.max_bytes", limits.MaxBytes)
			}
		}
	}
	if err := events.EnsureWorkConsumers(ctx, js, workCfg, 0, natsTenants(cfg)); err != nil {
		return nil, fmt.Errorf("nats stream %s: %w", cfg.Events.WorkStream, err)
	}

	relayMetrics, err := eventsprom.NewRelayMetrics(reg)
	if err != nil {
		return nil, err
	}
	streamUsage := func(ctx context.Context) ([]events.StreamUsage, error) {
		return events.ReadStreamUsage(ctx, js, cfg.Events.Stream, cfg.Events.WorkStream)
	}
	if err := eventsprom.RegisterStreamFill(reg, func(ctx context.Context) ([]eventsprom.StreamFill, error) {
		us, err := streamUsage(ctx)
		fills := make([]eventsprom.StreamFill, 0, len(us))
		for _, u := range us {
			fills = append(fills, eventsprom.StreamFill{Stream: u.Stream, Bytes: float64(u.Bytes), MaxBytes: float64(u.MaxBytes)})
		}
		return fills, err
	}); err != nil {
		return nil, err
	}
	replicas := stream.CachedInfo().Config.Replicas
	syncedAfter := relaySyncedAfter(cfg.Events.SyncedAfter, cfg.EmbeddedNATS(), replicas)
	log.Info("relay keeps published events until the stream has synced them", "synced_after", syncedAfter,
		"configured", cfg.Events.SyncedAfter.String(), "stream_replicas", replicas)
	relay, err := events.NewRelay(st, js, events.RelayOptions{
		Stream: cfg.Events.Stream, WorkStream: cfg.Events.WorkStream, SubjectPrefix: cfg.Events.SubjectPrefix, SyncedAfter: syncedAfter,
		Logger: log.With("component", "relay"), Metrics: relayMetrics, Now: m.Now, TracerProvider: tp,
	})
	if err != nil {
		return nil, err
	}
	// Closers of a stage run last-registered first: Run stops, then one
	// last pass publishes what the final requests committed.
	m.onClose(stageRelay, "relay-drain", func(ctx context.Context) error {
		if err := relay.Drain(ctx); err != nil {
			// Nothing is lost: the records wait in the outbox for the next start.
			log.Warn("relay: last pass at shutdown did not finish; events stay in the outbox", "err", err)
		}
		return nil
	})
	m.goUntilClose(stageRelay, "relay", relay.Run)
	m.goUntilClose(stageRelay, "work-consumers", func(ctx context.Context) error {
		return events.KeepWorkConsumers(ctx, js, workCfg, natsTenants(cfg), 0, log.With("component", "nats"))
	})

	// The kill switch: loaded before the API serves and the resolver
	// replays (a start-up that cannot read it fails rather than run with
	// every tool thawed), refreshed every 2 s so replicas sharing
	// PostgreSQL follow each other's changes.
	kill := freeze.New(st, freeze.Options{Logger: log.With("component", "freeze")})
	if _, err := kill.Load(ctx); err != nil {
		return nil, fmt.Errorf("kill switch: %w", err)
	}
	m.goUntilClose(stageResolver, "freeze-refresh", kill.Run)

	// The tool registry, likewise: loaded before the API serves, refreshed
	// every 2 s so replicas follow each other's registrations.
	tools := registry.New(st, registry.Options{Logger: log.With("component", "registry")})
	if err := tools.Load(ctx); err != nil {
		return nil, fmt.Errorf("tool registry: %w", err)
	}
	m.goUntilClose(stageResolver, "registry-refresh", tools.Run)

	pagers, err := m.pagers()
	if err != nil {
		return nil, err
	}
	res, err := m.startResolver(st, js, reg, kill.Frozen, pagers.resolver, tp)
	if err != nil {
		return nil, err
	}
	m.goUntilClose(stageResolver, "inbox-pruner", func(ctx context.Context) error {
		return pruneInbox(ctx, st, cfg.InboxRetention, m.Now, log)
	})
	m.goUntilClose(stageResolver, "idempotency-pruner", func(ctx context.Context) error {
		return pruneIdempotency(ctx, st, ledger.IdempotencyRetention(cfg.Policy()), m.Now, log)
	})
	if err := m.startRetention(st, reg); err != nil {
		return nil, err
	}

	srv, err := api.New(api.Options{
		KillSwitch:     kill,
		Registry:       tools,
		Store:          st,
		Tokens:         cfg.TokenTenants(),
		AdminTokens:    cfg.AdminTokens,
		ApproverTokens: cfg.ApproverTokens(),
		ApprovalTTL:    cfg.Approvals.TTL,
		StrictRegistry: cfg.Registry.Strict,
		BodyLimit:      int64(cfg.BodyLimit),
		Policy:         cfg.Policy(),
		ReplayWindow:   cfg.ReplayWindow,
		VendorKey:      cfg.VendorKey,
		WakeRelay:      relay.Wake,
		Backup:         backuperOf(st),
		Ready: append([]api.ReadyCheck{
			{Name: "store", Check: func(ctx context.Context) error {
				_, err := st.Get(ctx, config.DefaultTenant, "readyz")
				if errors.Is(err, ledger.ErrNotFound) {
					return nil
				}
				return err
			}},
			{Name: "nats", Check: func(context.Context) error {
				return natsReadiness(nc.Status(), relay.Healthy())
			}},
			{Name: "outbox", Check: func(context.Context) error {
				return outboxBacklog(relay, int(cfg.Events.DegradedDepth))
			}},
			{Name: "streams", Check: func(ctx context.Context) error {
				return streamsNearFull(ctx, streamUsage)
			}},
		}, storeWritesCheck(st)...),
		Registerer: reg, Gatherer: reg,
		TracerProvider: tp,
		Logger:         log.With("component", "api"),
		Now:            m.Now,
	})
	if err != nil {
		return nil, err
	}
	m.startApprovals(st, js, srv.Signal, pagers.approvals, tp)

	wo, err := webhookOptions(cfg)
	if err != nil {
		return nil, err
	}
	wo.Store, wo.Registerer, wo.Now, wo.Applied = st, reg, m.Now, srv.Signal
	wo.Refetch, wo.Recheck = refetchVendors(cfg.Profiles()), res.Wake
	wo.Logger = log.With("component", "webhooks")
	wh, err := webhooks.New(wo)
	if err != nil {
		return nil, err
	}
	m.onClose(stageHTTP, "webhooks", func(context.Context) error { wh.Close(); return nil })
	m.onShutdownHTTP = append(m.onShutdownHTTP, srv.EndWaits)
	wh.Register(srv.Echo())
	return m.withConsole(st, nc, js, srv)
}

// quorumReplicas is the replica count from which a stream's PubAck means a
// quorum of servers stored the message, so the relay need not wait for a
// sync before deleting the record.
const quorumReplicas = 3

// relaySyncedAfter is events.synced_after for the relay: the configured
// duration, or for auto the embedded server's natsserver.SyncedAfter, 0
// for an external stream of quorumReplicas or more, and otherwise
// events.StockSyncedAfter (an external server's sync policy cannot be read
// from a client).
func relaySyncedAfter(c config.SyncedAfter, embedded bool, replicas int) time.Duration {
	switch {
	case c != config.SyncedAfterAuto:
		return time.Duration(c)
	case embedded:
		return natsserver.SyncedAfter
	case replicas >= quorumReplicas:
		return 0
	}
	return events.StockSyncedAfter
}

// natsReadiness is /readyz's nats check: degraded (200 with a detail),
// never failing, while the connection is down or the relay cannot publish
// (a NATS outage, a stream without a quorum, a full stream): claims and
// webhooks are still taken and their events wait in the outbox, so a load
// balancer that took every replica out of rotation would turn late events
// into a whole outage. The detail names the kind of failure only (it is
// served without a token; the relay logs the error). Until the relay's
// first pass has an outcome (events.ErrRelayNotStarted) the check fails: a
// replica just started has shown nothing yet.
func natsReadiness(status nats.Status, relayErr error) error {
	const wait = ": events wait in the outbox"
	switch {
	case errors.Is(relayErr, events.ErrRelayNotStarted):
		return relayErr
	case status != nats.CONNECTED:
		return &api.Degraded{Detail: "nats " + strings.ToLower(status.String()) + wait}
	case errors.Is(relayErr, events.ErrStreamFull):
		return &api.Degraded{Detail: "the stream is full" + wait}
	case errors.Is(relayErr, ledger.ErrUnavailable):
		return &api.Degraded{Detail: "the relay cannot read the outbox" + wait}
	case relayErr != nil:
		return &api.Degraded{Detail: "the relay cannot publish (no PubAck; the log says why)" + wait}
	}
	return nil
}

// outboxBacklog is the readiness of the event backlog: degraded (200 with
// a detail) while more than limit events wait to be published, so an
// operator sees the relay falling behind before paused runs do; never a
// failure, since the events are safe in the outbox. limit 0 disables it.
func outboxBacklog(r interface{ Backlog() (int, time.Duration) }, limit int) error {
	depth, oldest := r.Backlog()
	if limit == 0 || depth <= limit {
		return nil
	}
	return &api.Degraded{Detail: fmt.Sprintf("%d events wait in the outbox (degraded past %d); the oldest has waited %s",
		depth, limit, oldest.Round(time.Millisecond))}
}

// streamsNearFull is degraded while a stream holds events.NearFull of its
// max_bytes or more: at the limit it refuses new events, which then wait
// in the outbox. A stream that cannot be read is the nats check's concern.
func streamsNearFull(ctx context.Context, read func(context.Context) ([]events.StreamUsage, error)) error {
	us, err := read(ctx)
	if err != nil {
		return nil
	}
	var near []string
	for _, u := range us {
		if u.NearFull() {
			near = append(near, u.String())
		}
	}
	if len(near) == 0 {
		return nil
	}
	return &api.Degraded{Detail: strings.Join(near, "; ") + ": at the limit new events wait in the outbox (raise events.max_bytes, or find the consumer that does not take them)"}
}

// openStore opens the ledger store named by --store: the bbolt file in the
// data directory, or PostgreSQL for a postgres:// URL.
func (m *Main) openStore(ctx context.Context) (ledger.Store, error) {
	cfg := m.Config
	var st ledger.Store
	if cfg.UsesBolt() {
		b, err := bolt.Open(cfg.BoltPath(), bolt.Options{Policy: cfg.Policy(), Logger: m.Logger.With("component", "bolt"), NoWAL: !cfg.BoltWAL})
		if err != nil {
			return nil, err
		}
		st = b
	} else {
		p, err := postgres.Open(ctx, cfg.Store, postgres.Options{Policy: cfg.Policy(), Logger: m.Logger.With("component", "postgres"), ListenURL: cfg.StoreListenURL})
		if err != nil {
			return nil, err
		}
		st = p
	}
	m.onClose(stageStore, "store", func(context.Context) error { return st.Close() })
	return st, nil
}

// goUntilClose runs fn in a goroutine owned by Main until Close reaches
// stage s, which cancels fn's context and waits for it to return. An error
// before that shuts the program down.
func (m *Main) goUntilClose(s stage, name string, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			m.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
	m.onClose(s, name, func(cctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-cctx.Done():
			return fmt.Errorf("%s did not stop: %w", name, cctx.Err())
		}
	})
}

// inboxPruner is the part of the store the pruning loop needs.
type inboxPruner interface {
	PruneInbox(ctx context.Context, cutoff time.Time) (int, error)
}

// pruneInbox forgets vendor event ids older than retention, hourly. Vendors
// retry for about three days; retention is at least that (config checks).
func pruneInbox(ctx context.Context, st inboxPruner, retention time.Duration, now func() time.Time, log interface {
	Info(string, ...any)
	Warn(string, ...any)
}) error {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		n, err := st.PruneInbox(ctx, now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("inbox pruning failed", "err", err)
		case n > 0:
			log.Info("inbox pruned", "removed", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NATSURL is the NATS server the program publishes to ("" before Run): the
// embedded server's client URL, or --nats-url. Tests subscribe through it.
func (m *Main) NATSURL() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.natsURL
}

// servePagers are the pagers of the two kinds of page: the resolver pages
// one pager (PagerDuty when configured, else the generic webhook, else the
// log); an approval request notifies the generic webhook and PagerDuty,
// each when configured (at severity info: PagerDuty's low urgency), or the
// log when neither is.
type servePagers struct {
	resolver  resolver.Pager
	approvals []approvals.Pager
}

func (m *Main) pagers() (servePagers, error) {
	cfg, log := m.Config, m.Logger
	logPager := paging.NewLog(log.With("component", "paging"))
	out := servePagers{resolver: logPager}
	if cfg.Paging.Webhook.URL != "" {
		wh, err := paging.NewWebhook(paging.WebhookOptions{URL: cfg.Paging.Webhook.URL})
		if err != nil {
			return servePagers{}, fmt.Errorf("paging: %w", err)
		}
		out.resolver = wh
		out.approvals = append(out.approvals, wh)
	}
	if cfg.Paging.PagerDuty.RoutingKey != "" {
		pd, err := paging.NewPagerDuty(paging.PagerDutyOptions{URL: cfg.Paging.PagerDuty.URL, RoutingKey: cfg.Paging.PagerDuty.RoutingKey})
		if err != nil {
			return servePagers{}, fmt.Errorf("paging: %w", err)
		}
		out.resolver = pd
		out.approvals = append(out.approvals, pd)
	}
	if len(out.approvals) == 0 {
		out.approvals = []approvals.Pager{logPager}
	}
	return out, nil
}

// startApprovals runs the approval gate's background work: the expiry job
// (every replica runs one; an expiry is a conditional update) and the
// notifier, a durable JetStream consumer the replicas share. wake tells
// the API an expired row changed, so its long polls answer at once.
func (m *Main) startApprovals(st ledger.Store, js jetstream.JetStream, wake func(tenant, key string), pagers []approvals.Pager, tp trace.TracerProvider) {
	cfg, log := m.Config, m.Logger
	x := approvals.NewExpirer(st, approvals.ExpirerOptions{Now: m.Now, Logger: log.With("component", "approvals"), Expired: wake, TracerProvider: tp})
	m.goUntilClose(stageResolver, "approval-expiry", x.Run)
	n := approvals.NewNotifier(approvals.NotifierOptions{
		Pagers: pagers, Stream: cfg.Events.Stream, SubjectPrefix: cfg.Events.SubjectPrefix,
		Logger: log.With("component", "approval-notifier"), TracerProvider: tp,
	})
	m.goUntilClose(stageResolver, "approval-notifier", func(ctx context.Context) error { return n.Consume(ctx, js) })
}

// startResolver runs the resolver (due rows → vendor lookups, replays,
// pages) and the page resolver (a durable JetStream consumer that resolves
// a page once its row settles).
func (m *Main) startResolver(st ledger.Store, js jetstream.JetStream, reg prometheus.Registerer, frozen func(tenant, tool string, class ledger.ToolClass) bool, pager resolver.Pager, tp trace.TracerProvider) (*resolver.Resolver, error) {
	cfg, log := m.Config, m.Logger
	lookups := map[string]resolver.Lookup{}
	if cfg.Stripe.APIKey != "" {
		sl, err := resolver.NewStripe(resolver.StripeOptions{APIBase: cfg.Stripe.APIBase, APIKey: cfg.Stripe.APIKey,
			MetadataKey: m.stripeMetadataKey(), Now: m.Now, HTTPClient: vendorClient(tp)})
		if err != nil {
			return nil, err
		}
		lookups["stripe"] = sl
	}
	if cfg.PayPal.ClientID != "" && cfg.PayPal.ClientSecret != "" {
		pl, err := resolver.NewPayPal(resolver.PayPalOptions{APIBase: cfg.PayPal.APIBase, ClientID: cfg.PayPal.ClientID, ClientSecret: cfg.PayPal.ClientSecret,
			Now: m.Now, HTTPClient: vendorClient(tp)})
		if err != nil {
			return nil, err
		}
		lookups["paypal"] = pl
	}
	// Every profiled vendor the resolver can call runs the generic engine;
	// one without an api_base (a standard: endpoint's) is paged after its
	// window, as any vendor without a lookup.
	for _, p := range cfg.Profiles() {
		if !p.Callable() {
			continue
		}
		pl, err := resolver.NewProfiled(p, vendorClient(tp))
		if err != nil {
			return nil, err
		}
		lookups[p.Name] = pl
		log.Info("vendor profile", "vendor", p)
	}
	res := resolver.New(st, resolver.Options{
		Lookups: lookups, Pager: pager, Frozen: frozen, Interval: cfg.Resolver.Interval, SearchLag: cfg.Stripe.SearchLag,
		Now: m.Now, Logger: log.With("component", "resolver"), Registerer: reg, TracerProvider: tp,
	})
	m.goUntilClose(stageResolver, "resolver", res.Run)
	pr := resolver.NewPageResolver(pager, log.With("component", "page-resolver"), resolver.TracePages(tp))
	m.goUntilClose(stageResolver, "page-resolver", func(ctx context.Context) error {
		return pr.Consume(ctx, js, resolver.ConsumeOptions{Stream: cfg.Events.Stream, SubjectPrefix: cfg.Events.SubjectPrefix})
	})
	return res, nil
}

// stripeMetadataKey is the metadata key the resolver searches Stripe by:
// the one the Stripe endpoints share. Endpoints that use different keys
// cannot all be searched (the lookup is per vendor, not per endpoint): the
// resolver then searches the default key, and says so once.
func (m *Main) stripeMetadataKey() string {
	keys := map[string]bool{}
	for _, ep := range m.Config.Stripe.Endpoints {
		keys[ep.MetadataKey] = true
	}
	if len(keys) == 1 {
		for k := range keys {
			return k
		}
	}
	if len(keys) > 1 {
		m.Logger.Warn("stripe endpoints use different metadata_key values; the resolver searches Stripe by metadata_local_id only",
			"keys", slices.Sorted(maps.Keys(keys)))
	}
	return ""
}
