package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/postgres"
	"github.com/agentledger/reconciler/webhooks"
)

// tenant is the one tenant of the real target.
const tenant = "loadtest"

// httpServer is one loopback HTTP server and the goroutine serving it.
type httpServer struct {
	srv    *http.Server
	url    string
	served chan struct{}
	err    error // Serve's error other than ErrServerClosed; read after served
}

// serve listens on 127.0.0.1 port 0 and serves h until close. The server's
// settings are those of cmd/reconciler's.
func serve(h http.Handler, log *slog.Logger) (*httpServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &httpServer{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		url:    "http://" + ln.Addr().String(),
		served: make(chan struct{}),
	}
	go func() { // owner: the httpServer; exits when close shuts the server down
		defer close(s.served)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// close stops intake and waits for requests in flight (cut after ctx).
func (s *httpServer) close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.served
	if err == nil && s.err != nil {
		err = s.err
	}
	if err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}

// bareClaimResponse is all the bare target answers.
var bareClaimResponse = []byte(`{"decision":"proceed"}`)

// bareHandler is an echo server whose POST /v1/claims reads the body and
// answers 201 with a fixed small JSON body: no auth, no decoding, no store.
func bareHandler() http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/v1/claims", func(c echo.Context) error {
		if _, err := io.Copy(io.Discard, c.Request().Body); err != nil {
			return fmt.Errorf("read body: %w", err)
		}
		return c.JSONBlob(http.StatusCreated, bareClaimResponse)
	})
	return e
}

// realTarget is the API over the store (bolt, or PostgreSQL with
// Config.Store) with NATS and the relay, as `reconciler serve` wires it.
type realTarget struct {
	dir   string
	token string
	store ledger.Store
	// bolt is store when it is bolt (its committer's counters), else nil.
	bolt *bolt.Store
	// pgdb is the fresh PostgreSQL database the store is on, dropped at
	// close; nil on bolt.
	pgdb  *freshDB
	ns    *natsserver.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	relay *events.Relay
	// syncedAfter is how long the relay holds a published record.
	syncedAfter time.Duration
	http        *httpServer

	stopRelay context.CancelFunc
	relayDone chan error
}

// realOptions are the variations of the real target.
type realOptions struct {
	// apiLog: see Config.APILog (it covers the webhook handler's log too).
	apiLog bool
	// unsafeNoSync: see Config.UnsafeNoSync.
	unsafeNoSync bool
	// noWAL: see Config.NoWAL.
	noWAL bool
	// pgURL: see Config.Store (a postgres:// URL; empty: bolt).
	pgURL string
	// stripeSecret, when set, registers the webhook routes as serve does
	// (one Stripe endpoint, webhookEndpoint, for the tenant) and the
	// verify-only route beside them (registerVerifyOnly), which serve never
	// has.
	stripeSecret string
	// deferRelay leaves the relay stopped until startRelay, so setup writes
	// can be cleared from the outbox before it runs.
	deferRelay bool
	now        func() time.Time
}

// webhookEndpoint is the name of the real target's Stripe endpoint.
const webhookEndpoint = "load"

// startReal builds the real target in a fresh directory under parent. On
// error everything already started is stopped again.
func startReal(ctx context.Context, parent string, o realOptions, log *slog.Logger) (_ *realTarget, err error) {
	dir, err := os.MkdirTemp(parent, "httpload-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	r := &realTarget{dir: dir}
	defer func() {
		if err != nil {
			r.close(context.WithoutCancel(ctx))
		}
	}()
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	r.token = "tok_" + hex.EncodeToString(tok)

	if o.pgURL != "" {
		if r.pgdb, err = createFreshDB(ctx, o.pgURL); err != nil {
			return nil, err
		}
		ps, err := postgres.Open(ctx, r.pgdb.url, postgres.Options{Policy: ledger.DefaultPolicy(), Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		r.store = ps
	} else {
		if r.bolt, err = bolt.Open(filepath.Join(dir, "reconciler.db"), bolt.Options{Policy: ledger.DefaultPolicy(), UnsafeNoSync: o.unsafeNoSync, NoWAL: o.noWAL}); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		r.store = r.bolt
	}
	nopts := natsserver.DefaultOptions(filepath.Join(dir, "nats"), log)
	nopts.Listen = "127.0.0.1:-1" // never the machine's 4222
	if r.ns, err = natsserver.Start(ctx, nopts); err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	if r.nc, r.js, err = events.Connect(r.ns.ClientURL(), log); err != nil {
		return nil, fmt.Errorf("connect relay: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = events.EnsureStream(sctx, r.js, events.StreamConfig{})
	cancel()
	if err != nil {
		return nil, err
	}
	// As serve runs the relay with the embedded server.
	r.syncedAfter = natsserver.SyncedAfter
	if r.relay, err = events.NewRelay(r.store, r.js, events.RelayOptions{Logger: log, SyncedAfter: r.syncedAfter}); err != nil {
		return nil, err
	}
	if !o.deferRelay {
		r.startRelay(ctx)
	}

	apiLogger := slog.New(slog.DiscardHandler)
	if o.apiLog {
		// What serve does (JSON at info), minus the write to stderr.
		apiLogger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	srv, err := api.New(api.Options{
		Store:        r.store,
		Tokens:       map[string]string{r.token: tenant},
		Policy:       ledger.DefaultPolicy(),
		ReplayWindow: func(string, *ledger.Request) time.Duration { return 24 * time.Hour },
		Ready: []api.ReadyCheck{
			{Name: "relay", Check: func(context.Context) error { return r.relay.Healthy() }},
		},
		Logger: apiLogger,
	})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if o.stripeSecret != "" {
		// As serve wires it: the same echo, the store as Ingester, the API's
		// kind of logger.
		wo := webhooks.Options{
			Store:   r.store,
			Stripe:  []webhooks.StripeEndpoint{{Name: webhookEndpoint, Tenant: tenant, Secrets: []string{o.stripeSecret}}},
			Logger:  apiLogger,
			Now:     o.now,
			Applied: srv.Signal,
		}
		wh, err := webhooks.New(wo)
		if err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		wh.Register(srv.Echo())
		if err := registerVerifyOnly(srv.Echo(), wo); err != nil {
			return nil, err
		}
	}
	if r.http, err = serve(srv.Handler(), log); err != nil {
		return nil, err
	}
	return r, nil
}

// stats is the bolt committer's counters (zero on PostgreSQL).
func (r *realTarget) stats() bolt.Stats {
	if r.bolt == nil {
		return bolt.Stats{}
	}
	return r.bolt.Stats()
}

// startRelay runs the relay on the store's outbox until close.
func (r *realTarget) startRelay(ctx context.Context) {
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stopRelay, r.relayDone = stop, make(chan error, 1)
	go func() { r.relayDone <- r.relay.Run(rctx) }() // owner: realTarget; exits on stopRelay
}

// outboxDepth counts the outbox's records: waiting for the relay, or
// published and held until the server has synced them. It walks the
// outbox's pages: meant for the end of a run and its drain, not a hot loop.
func (r *realTarget) outboxDepth(ctx context.Context) (int, error) {
	n, err := r.store.CountEvents(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox depth: %w", err)
	}
	return n, nil
}

// close shuts down in the service's order: HTTP intake, the relay (which
// finishes its publish in flight), NATS, the store; then removes the
// directory. It returns the first error.
func (r *realTarget) close(ctx context.Context) error {
	var errs []error
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r.http != nil {
		errs = append(errs, r.http.close(sctx))
	}
	if r.stopRelay != nil {
		r.stopRelay()
		errs = append(errs, <-r.relayDone)
	}
	if r.nc != nil {
		r.nc.Close()
	}
	if r.ns != nil {
		errs = append(errs, r.ns.Shutdown(sctx))
	}
	if r.store != nil {
		errs = append(errs, r.store.Close())
	}
	if r.pgdb != nil {
		errs = append(errs, r.pgdb.drop(sctx))
	}
	if err := os.RemoveAll(r.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", r.dir, err))
	}
	return errors.Join(errs...)
}
