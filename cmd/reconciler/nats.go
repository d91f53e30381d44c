package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
)

// connectNATS starts the embedded server (no --nats-url) or dials the
// external one, and returns a connection with JetStream.
//
// The embedded server requires credentials as soon as a tenant has a NATS
// key: it runs the account layout (events.AccountLayout: the service's
// streams in its own account, each tenant's keys in the tenant's account,
// which imports only its events and its work consumer), and the service
// connects in-process under a key made at start. With no keys it is open,
// which config allows on loopback only, and says so in the log. An
// external server is the operator's: the service brings the credentials of
// nats_creds or nats_nkey, and the server's own configuration holds the
// accounts (`reconciler nats-creds --server-config` writes them).
func (m *Main) connectNATS(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	cfg := m.Config
	log := m.Logger.With("component", "nats")
	url, public := cfg.NATSURL, cfg.NATSURL
	var opts []nats.Option
	if cfg.EmbeddedNATS() {
		nopts := natsserver.DefaultOptions(cfg.NATSDir(), log)
		nopts.Listen = cfg.NATSListen
		nopts.CertFile, nopts.KeyFile = cfg.NATSListenCert, cfg.NATSListenKey
		if cfg.NATSAuth() {
			nopts.Accounts = func(service string) (string, error) { return natsLayout(cfg, service).ServerConfig() }
		}
		ns, err := natsserver.Start(ctx, nopts)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, fmt.Errorf("%w: another NATS server may run there; give the embedded one another address with --nats-listen or RECONCILER_NATS_LISTEN (127.0.0.1:4223, say), or use that server with --nats-url", err)
		}
		if err != nil {
			return nil, nil, err
		}
		m.onClose(stageNATS, "nats-server", ns.Shutdown)
		if !cfg.NATSAuth() {
			log.Warn("embedded nats has no users: any process on this machine can publish events and read every tenant's; give tenants nats_nkeys (reconciler nats-creds --tenant T) to require credentials",
				"url", ns.ClientURL())
		}
		url, public, opts = natsserver.ServiceURL, ns.ClientURL(), ns.ServiceOptions()
	} else {
		var err error
		if opts, err = cfg.NATSCredentials().Options(); err != nil {
			return nil, nil, err
		}
		if cfg.NATSAuth() {
			log.Info("tenants' nats_nkeys are for the embedded server: the external NATS's own configuration must hold their accounts (reconciler nats-creds --server-config writes it)")
		}
	}
	nc, js, err := events.Connect(url, log, opts...)
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	m.natsURL = public
	m.mu.Unlock()
	// Registered after the server, so it closes first (closers in a stage run
	// in reverse order).
	m.onClose(stageNATS, "nats-conn", func(context.Context) error { nc.Close(); return nil })
	return nc, js, nil
}

// natsScope is what the NATS permissions are about: serve's streams and
// their subject prefix.
func natsScope(cfg config.Config) events.PermissionScope {
	return events.PermissionScope{Stream: cfg.Events.Stream, SubjectPrefix: cfg.Events.SubjectPrefix, WorkStream: cfg.Events.WorkStream}
}

// natsLayout is the account layout of cfg's tenants' NATS keys around the
// service's public key.
func natsLayout(cfg config.Config, service string) events.AccountLayout {
	tenants := map[string][]string{}
	for _, t := range cfg.Tenants {
		tenants[t.ID] = append(tenants[t.ID], t.NATSNKeys...)
	}
	return events.AccountLayout{Scope: natsScope(cfg), Service: service, Tenants: tenants}
}

// natsTenants are the tenants whose work consumers the service makes: all
// of cfg's (the default tenant when there are none).
func natsTenants(cfg config.Config) []string {
	if len(cfg.Tenants) == 0 {
		return []string{config.DefaultTenant}
	}
	out := make([]string, 0, len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		out = append(out, t.ID)
	}
	return out
}
