package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// Permissions are one NATS user's subject permissions, in the shape of
// nats-server's: a subject must match an Allow entry (when Allow is not
// empty) and no Deny entry. ServerUser writes them as a nats-server
// configuration file's user entry.
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
// events.subject_prefix) and the durable consumers the service owns on that
// stream, which no tenant may touch.
type PermissionScope struct {
	Stream, SubjectPrefix string
	// WorkStream is the work stream (events.work_stream; empty:
	// DefaultWorkStream), whose subjects are WorkSubjectPrefix of
	// SubjectPrefix.
	WorkStream string
	// ServiceConsumers are the service's durable consumers on Stream (the
	// page resolver's). Tenants must use consumer names they were not told,
	// and these are well known.
	ServiceConsumers []string
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
	for _, c := range s.ServiceConsumers {
		if ledger.ValidateTenant(c) != nil {
			return s, fmt.Errorf("consumer name %q: want 1-128 of [A-Za-z0-9_-]", c)
		}
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

// TenantPermissions are what the runtime credential of one tenant may do on
// the bus: read that tenant's events, as Await does, take that tenant's
// work items, as the outbox Worker does, and nothing else. This
// is the one place the permission set is written; the embedded server grants
// it and `reconciler nats-creds` prints it for an external server's admin.
//
// Checked against nats-server v2.15.2 (server/jetstream_api.go,
// server/consumer.go) and nats.go v1.55.0 (jetstream/consumer.go,
// jetstream/ordered.go, jetstream/pull.go):
//
//   - Await's ordered consumer has one filter subject, so nats.go creates it
//     on $JS.API.CONSUMER.CREATE.<stream>.<name>.<filter> (upsertConsumer),
//     and the server refuses a request whose body filter differs from the
//     subject's, or that adds FilterSubjects (jsConsumerCreateRequest): the
//     allow entry below, with the tenant's prefix in the filter position, is
//     what scopes every consumer the tenant can make. Consuming it is
//     CONSUMER.MSG.NEXT (pull.go); a reset after missed heartbeats deletes
//     the consumer and creates the next one (ordered.go), and Consumer.Info
//     is CONSUMER.INFO. Those three are per consumer name, which a NATS
//     permission cannot scope to a tenant (names have no dots): an
//     ephemeral consumer's name is 22 random characters its creator alone
//     learns, and the names anyone can know — the service's durables — are
//     denied.
//   - Every other door to the stream's messages is closed by not being
//     allowed: the legacy $JS.API.CONSUMER.CREATE.<stream> (filter in the
//     body), CONSUMER.DURABLE.CREATE, CONSUMER.NAMES/LIST (they would tell
//     the names), STREAM.MSG.GET, DIRECT.GET, STREAM.INFO (with a subject
//     filter it lists every run id), STREAM.PURGE/DELETE/UPDATE, and
//     $JS.ACK (Await acknowledges nothing).
//   - The work items: the tenant's workers share one durable pull consumer
//     on the work stream, WorkConsumer(tenant), filtered to
//     <prefix>_work.<tenant>.>. They create (or update) it on
//     $JS.API.CONSUMER.CREATE.<work stream>.worker-<tenant>.<filter>, the
//     filter again in the subject, so the one allowed name carries a
//     filter inside the tenant's own work subjects (and the server refuses
//     a body filter that differs, or a second one); they pull with
//     CONSUMER.MSG.NEXT and read CONSUMER.INFO of that name only, and
//     acknowledge (ack, nak, in progress) on
//     $JS.ACK.<work stream>.worker-<tenant>.> (and the form with a
//     JetStream domain and account hash before the stream). Consumer
//     names have no dots, so a name of another tenant's is never matched;
//     no ephemeral, no delete, no other name on the work stream.
//   - Publishing under <prefix>.> and <prefix>_work.> is denied outright:
//     only the service publishes events and work items.
//   - Subscriptions: the tenant's own inbox (InboxPrefix), through which
//     every JetStream reply and delivery arrives, and core NATS on its own
//     events.
//
// What permissions cannot close (nats-server issue #8274): the server does
// not check the creator's rights on a push consumer's deliver subject or on
// a pull request's reply subject, so a tenant can have its own events
// delivered to a subject of its choosing. The server refuses a deliver
// subject inside the stream's own subjects (deliveryFormsCycle); a pull
// reply there stores another copy of the tenant's own event (the original
// Nats-Msg-Id makes it a duplicate within the stream's 1 h window). Neither
// carries anything but that tenant's own, genuine events; readers must still
// check an event's tenant and key (Await does).
func TenantPermissions(scope PermissionScope, tenant string) (Permissions, error) {
	scope, err := scope.withDefaults()
	if err != nil {
		return Permissions{}, fmt.Errorf("permissions of %s: %w", tenant, err)
	}
	if ledger.ValidateTenant(tenant) != nil {
		return Permissions{}, fmt.Errorf("permissions of %q: %w", tenant, ErrInvalidTenant)
	}
	api := "$JS.API.CONSUMER."
	st := scope.Stream
	own := scope.SubjectPrefix + "." + tenant
	p := Permissions{
		PublishAllow: []string{
			api + "CREATE." + st + ".*." + own + ".>",
			api + "MSG.NEXT." + st + ".*",
			api + "INFO." + st + ".*",
			api + "DELETE." + st + ".*",
		},
		PublishDeny:    []string{scope.SubjectPrefix + ".>", WorkSubjectPrefix(scope.SubjectPrefix) + ".>"},
		SubscribeAllow: []string{InboxPrefix(tenant) + ".>", own + ".>"},
	}
	ws, wc := scope.WorkStream, WorkConsumer(tenant)
	p.PublishAllow = append(p.PublishAllow,
		api+"CREATE."+ws+"."+wc+"."+WorkSubjectPrefix(scope.SubjectPrefix)+"."+tenant+".>",
		api+"MSG.NEXT."+ws+"."+wc,
		api+"INFO."+ws+"."+wc,
		"$JS.ACK."+ws+"."+wc+".>",
		"$JS.ACK.*.*."+ws+"."+wc+".>",
	)
	for _, c := range scope.ServiceConsumers {
		p.PublishDeny = append(p.PublishDeny,
			api+"CREATE."+st+"."+c+".>",
			api+"MSG.NEXT."+st+"."+c,
			api+"INFO."+st+"."+c,
			api+"DELETE."+st+"."+c,
		)
	}
	return p, nil
}

// ServicePermissions are what the service's own NATS user needs: the whole
// JetStream API (it creates and updates the streams and its durable
// consumers), publishing events under the prefix and work items under
// <prefix>_work (the relay), acknowledging its durable consumers'
// messages, and its inbox for every reply.
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

// ServerUser is the entry of a nats-server configuration file's
// `authorization { users = [ … ] }` list that grants p to the user with
// public key nkey. It is JSON, which nats-server's configuration syntax
// accepts, with > and * left as they are (nats-server rejects \u escapes).
func (p Permissions) ServerUser(nkey string) (string, error) {
	var perms serverPermissions
	if len(p.PublishAllow)+len(p.PublishDeny) > 0 {
		perms.Publish = &serverSubjects{Allow: p.PublishAllow, Deny: p.PublishDeny}
	}
	if len(p.SubscribeAllow)+len(p.SubscribeDeny) > 0 {
		perms.Subscribe = &serverSubjects{Allow: p.SubscribeAllow, Deny: p.SubscribeDeny}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		NKey        string            `json:"nkey"`
		Permissions serverPermissions `json:"permissions"`
	}{nkey, perms}); err != nil {
		return "", fmt.Errorf("nats user %s: %w", nkey, err)
	}
	return strings.TrimSpace(b.String()), nil
}
