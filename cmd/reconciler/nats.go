package main

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/approvals"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/resolver"
)

// connectNATS starts the embedded server (no --nats-url) or dials the
// external one, and returns a connection with JetStream.
//
// The embedded server requires credentials as soon as a tenant has a NATS
// key: each key gets that tenant's permissions (events.TenantPermissions),
// and the service connects in-process under a key made at start. With no
// keys it is open, which config allows on loopback only, and says so in the
// log. An external server is the operator's: the service brings the
// credentials of nats_creds or nats_nkey, and the server's own
// configuration grants the tenants (`reconciler nats-creds` prints it).
func (m *Main) connectNATS(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	cfg := m.Config
	log := m.Logger.With("component", "nats")
	url, public := cfg.NATSURL, cfg.NATSURL
	var opts []nats.Option
	if cfg.EmbeddedNATS() {
		nopts := natsserver.DefaultOptions(cfg.NATSDir(), log)
		nopts.Listen = cfg.NATSListen
		nopts.CertFile, nopts.KeyFile = cfg.NATSListenCert, cfg.NATSListenKey
		users, service, err := natsUsers(cfg)
		if err != nil {
			return nil, nil, err
		}
		nopts.Users, nopts.ServicePermissions = users, service
		ns, err := natsserver.Start(ctx, nopts)
		if err != nil {
			return nil, nil, err
		}
		m.onClose(stageNATS, "nats-server", ns.Shutdown)
		if len(users) == 0 {
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
			log.Info("tenants' nats_nkeys are for the embedded server: the external NATS's own configuration must grant them (reconciler nats-creds prints the entries)")
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

// natsScope is what the NATS permissions are about: serve's stream, its
// subject prefix and the service's durable consumers on it (the page
// resolver's and the approval notifier's: a tenant who knew a durable's name
// could otherwise pull the service's own deliveries).
func natsScope(cfg config.Config) events.PermissionScope {
	return events.PermissionScope{Stream: cfg.Events.Stream, SubjectPrefix: cfg.Events.SubjectPrefix, WorkStream: cfg.Events.WorkStream,
		ServiceConsumers: []string{resolver.DefaultPageConsumer, approvals.DefaultNotifierConsumer}}
}

// natsUsers are the embedded server's users: every NATS key of every
// tenant, with that tenant's permissions, and the bounds of the service's
// own user. None when no tenant has a key.
func natsUsers(cfg config.Config) ([]natsserver.User, *natsserver.Permissions, error) {
	if !cfg.NATSAuth() {
		return nil, nil, nil
	}
	scope := natsScope(cfg)
	var users []natsserver.User
	for _, t := range cfg.Tenants {
		if len(t.NATSNKeys) == 0 {
			continue
		}
		p, err := events.TenantPermissions(scope, t.ID)
		if err != nil {
			return nil, nil, err
		}
		perms := natsserver.Permissions(p)
		for _, k := range t.NATSNKeys {
			users = append(users, natsserver.User{NKey: k, Permissions: &perms, Name: "tenant " + t.ID})
		}
	}
	sp, err := events.ServicePermissions(scope)
	if err != nil {
		return nil, nil, err
	}
	service := natsserver.Permissions(sp)
	return users, &service, nil
}

// natsServerUser is the entry of a nats-server configuration that grants
// nkey the permissions of tenant ("" for the service's).
func natsServerUser(cfg config.Config, tenant, nkey string) (string, error) {
	var p events.Permissions
	var err error
	if tenant == "" {
		p, err = events.ServicePermissions(natsScope(cfg))
	} else {
		p, err = events.TenantPermissions(natsScope(cfg), tenant)
	}
	if err != nil {
		return "", fmt.Errorf("nats permissions: %w", err)
	}
	return p.ServerUser(nkey)
}
