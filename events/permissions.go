package events

import (
	"errors"
	"fmt"

	"github.com/agentledger/reconciler/ledger"
)

// Permissions are one NATS user's subject permissions, in the shape of
// nats-server's: a subject must match an Allow entry (when Allow is not
// empty) and no Deny entry. AccountLayout writes them into a nats-server
// configuration's accounts.
type Permissions struct {
	PublishAllow, PublishDeny     []string
	SubscribeAllow, SubscribeDeny []string
}

// InboxPrefix is the reply-subject prefix a tenant's runtime must connect
// with (nats.CustomInboxPrefix; the nats CLI's --inbox-prefix):
// _INBOX_<tenant>. The tenant may subscribe there and nowhere else but its
// own events, so no tenant can read the replies (and the JetStream
// deliveries, which arrive on the inbox) of another one or of the service,
// whose inbox stays the default _INBOX.
func InboxPrefix(tenant string) string { return "_INBOX_" + tenant }

// ServiceInbox is the inbox the service subscribes under (nats.go's default).
const ServiceInbox = "_INBOX"

// PermissionScope names what a credential's permissions are about: the
// event stream and its subject prefix (the service's events.stream and
// events.subject_prefix) and the work stream.
type PermissionScope struct {
	Stream, SubjectPrefix string
	// WorkStream is the work stream (events.work_stream; empty:
	// DefaultWorkStream), whose subjects are WorkSubjectPrefix of
	// SubjectPrefix.
	WorkStream string
}

func (s PermissionScope) withDefaults() (PermissionScope, error) {
	if s.Stream == "" {
		s.Stream = DefaultStream
	}
	if s.SubjectPrefix == "" {
		s.SubjectPrefix = DefaultSubjectPrefix
	}
	if s.WorkStream == "" {
		s.WorkStream = DefaultWorkStream
	}
	for _, st := range []string{s.Stream, s.WorkStream} {
		if ledger.ValidateTenant(st) != nil {
			return s, fmt.Errorf("stream name %q: want 1-128 of [A-Za-z0-9_-]", st)
		}
	}
	if err := ValidSubjectPrefix(s.SubjectPrefix); err != nil {
		return s, err
	}
	return s, nil
}

// WorkConsumer is the name of the durable pull consumer through which a
// tenant's outbox workers take its work items: worker-<tenant>, on the
// work stream, filtered to <prefix>_work.<tenant>.>. Every worker process
// of the tenant shares it (a work-queue stream allows one consumer per
// subject, and the shared consumer hands each item to one worker at a
// time); TenantPermissions grant that one name and that filter.
func WorkConsumer(tenant string) string { return "worker-" + tenant }

// ErrInvalidTenant means a tenant id that is not a subject token.
var ErrInvalidTenant = errors.New("tenant is not a subject token")

// TenantPermissions bound a tenant runtime's user inside the tenant's own
// account (AccountLayout): the account boundary is what keeps tenants
// apart, these are the second fence. This is the one place the set is
// written; the embedded server grants it and `reconciler nats-creds
// --server-config` writes it for an external server.
//
// A tenant's account has no JetStream of its own (the server answers its
// $JS.API.INFO, allowed here, with "not enabled for account", which is how
// Await knows to subscribe to the live events), and imports from
// ServiceAccount only what AccountLayout lists:
//
//   - subscribe: its events, <prefix>.<tenant>.> (the stream import), and
//     its inbox (InboxPrefix), through which every reply arrives;
//   - publish: $JS.API.INFO (and <TenantAPIPrefix>.INFO, which has no
//     responder, so Await on that JetStream context learns the same at
//     once); its work consumer's
//     CONSUMER.INFO.<work stream>.worker-<tenant> and
//     CONSUMER.MSG.NEXT.<work stream>.worker-<tenant> under
//     TenantAPIPrefix; the
//     acknowledgements $JS.ACK.<work stream>.worker-<tenant>.> (and the
//     form with a JetStream domain and account hash before the stream);
//     and the create subject of that one consumer under TenantAPIPrefix,
//     which the account does not import, so a worker's attempt to make it
//     is answered "no responders" at once and the worker uses the consumer the service
//     made (the service makes worker-<tenant> for every configured
//     tenant, WorkConsumerConfig);
//   - nothing under <prefix>.> or <prefix>_work.>.
//
// Why not permissions alone (as before issue #25): nats-server does not
// check a requester's right to publish on the reply subject it names, so in
// one shared account a tenant could have a consumer-info answer (holding its
// own consumer's description and metadata) or a pull delivery published on
// another tenant's event or work subject, where the service's streams
// stored it. In the account layout that reply subject is the tenant's own
// account's, which no stream captures.
func TenantPermissions(scope PermissionScope, tenant string) (Permissions, error) {
	scope, err := scope.withDefaults()
	if err != nil {
		return Permissions{}, fmt.Errorf("permissions of %s: %w", tenant, err)
	}
	if ledger.ValidateTenant(tenant) != nil {
		return Permissions{}, fmt.Errorf("permissions of %q: %w", tenant, ErrInvalidTenant)
	}
	api := TenantAPIPrefix + ".CONSUMER."
	ws, wc := scope.WorkStream, WorkConsumer(tenant)
	own := scope.SubjectPrefix + "." + tenant
	return Permissions{
		PublishAllow: []string{
			"$JS.API.INFO", TenantAPIPrefix + ".INFO",
			api + "CREATE." + ws + "." + wc + "." + WorkSubjectPrefix(scope.SubjectPrefix) + "." + tenant + ".>",
			api + "MSG.NEXT." + ws + "." + wc,
			api + "INFO." + ws + "." + wc,
			"$JS.ACK." + ws + "." + wc + ".>",
			"$JS.ACK.*.*." + ws + "." + wc + ".>",
		},
		PublishDeny:    []string{scope.SubjectPrefix + ".>", WorkSubjectPrefix(scope.SubjectPrefix) + ".>"},
		SubscribeAllow: []string{InboxPrefix(tenant) + ".>", own + ".>"},
	}, nil
}

// ServicePermissions are what the service's own NATS user needs, inside
// ServiceAccount: the whole JetStream API (it creates and updates the
// streams, its durable consumers and the tenants' work consumers),
// publishing events under the prefix and work items under <prefix>_work
// (the relay), acknowledging its durable consumers' messages, and its
// inbox for every reply.
func ServicePermissions(scope PermissionScope) (Permissions, error) {
	scope, err := scope.withDefaults()
	if err != nil {
		return Permissions{}, fmt.Errorf("service permissions: %w", err)
	}
	return Permissions{
		PublishAllow: []string{"$JS.API.>", scope.SubjectPrefix + ".>", WorkSubjectPrefix(scope.SubjectPrefix) + ".>",
			"$JS.ACK." + scope.Stream + ".>"},
		SubscribeAllow: []string{ServiceInbox + ".>"},
	}, nil
}

// serverPermissions is nats-server's configuration shape of Permissions.
type serverPermissions struct {
	Publish   *serverSubjects `json:"publish,omitempty"`
	Subscribe *serverSubjects `json:"subscribe,omitempty"`
}

type serverSubjects struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}
