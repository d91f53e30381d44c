package client

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
)

// NATSCredentials are a runtime's credentials on the event bus, named after
// the nats CLI's flags: NKeyFile is the seed file `reconciler nats-creds
// --tenant T` writes (--nkey), CredsFile a JWT credentials file (--creds),
// CAFile the roots that verify a TLS server (--tlsca), CertFile and KeyFile
// a client certificate (--tlscert, --tlskey). The zero value connects
// without credentials, as the open single node on loopback allows.
type NATSCredentials = events.Credentials

// ConnectNATS connects an agent runtime of tenant to the event bus for
// WithNATS: with cred, with the tenant's inbox prefix (events.InboxPrefix:
// the bus delivers a tenant's replies and events nowhere else, so a
// connection without it cannot wait), and reconnecting for as long as the
// connection is open. opts are applied last. Close the connection when done.
func ConnectNATS(url, tenant string, cred NATSCredentials, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if ledger.ValidateTenant(tenant) != nil {
		return nil, nil, fmt.Errorf("nats connect: tenant %q: %w", tenant, events.ErrInvalidTenant)
	}
	copts, err := cred.Options()
	if err != nil {
		return nil, nil, fmt.Errorf("nats connect: %w", err)
	}
	base := []nats.Option{nats.Name("reconciler runtime " + tenant), nats.CustomInboxPrefix(events.InboxPrefix(tenant))}
	nc, _, err := events.Connect(url, nil, append(append(base, copts...), opts...)...)
	if err != nil {
		return nil, nil, err
	}
	// In the account layout the work consumer is imported under
	// events.TenantAPIPrefix; TenantJetStream finds out which.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := events.TenantJetStream(ctx, nc, jetstream.WithPublishAsyncTimeout(events.DefaultPublishTimeout))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("nats connect: %w", err)
	}
	return nc, js, nil
}
