package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/agentledger/reconciler/ledger"
)

// ServiceAccount is the NATS account that holds the service's streams
// (RECON, RECON_WORK) and its own user; nothing but the service's user
// lives in it.
const ServiceAccount = "RECONCILER"

// TenantAPIPrefix is where a tenant's account imports its work consumer's
// JetStream API: $JS.API.CONSUMER.INFO.<work stream>.worker-<tenant> of
// ServiceAccount is <TenantAPIPrefix>.CONSUMER.INFO.… in the tenant's
// account. Not under $JS.API: the server answers that in every account
// (a tenant's with "JetStream not enabled for account"), and two answers
// to one request would race. A runtime uses it as its JetStream API
// prefix (nats.go jetstream.NewWithAPIPrefix; nats-py
// nc.jetstream(prefix=…)); TenantJetStream picks it.
const TenantAPIPrefix = "$RECON.JS.API"

// TenantAccount is the NATS account of one tenant's runtimes:
// TENANT_<tenant>. It has no JetStream of its own and imports only that
// tenant's subjects from ServiceAccount (AccountLayout).
func TenantAccount(tenant string) string { return "TENANT_" + tenant }

// AccountLayout is the account boundary of the event bus (issue #25): the
// service's streams live in ServiceAccount, and each tenant's runtimes are
// users of the tenant's own account, which imports only
//
//   - its events, <prefix>.<tenant>.>, as a stream import: core NATS
//     messages, delivered live (Await subscribes to them);
//   - its work consumer's API, $JS.API.CONSUMER.INFO and
//     $JS.API.CONSUMER.MSG.NEXT of <work stream>.worker-<tenant>, as
//     service imports under TenantAPIPrefix (the pull's deliveries are
//     the service's streamed responses), and the acknowledgements of that
//     consumer, $JS.ACK.<work stream>.worker-<tenant>.>.
//
// A reply subject a tenant names on an imported request is the tenant's
// own account's subject: the server answers the service import through a
// _R_ subject of ServiceAccount and delivers the answer back in the
// tenant's account, where no stream captures anything. So neither a
// consumer-info reply nor a pull delivery can be stored in the service's
// streams, and a tenant cannot create, delete or name any consumer there:
// the service makes the work consumers (WorkConsumerConfig). Permissions
// (TenantPermissions, ServicePermissions) still bound each user inside
// its account.
type AccountLayout struct {
	Scope PermissionScope
	// Service is the public nkey (U…) of the service's user.
	Service string
	// Tenants maps each tenant to its runtimes' public nkeys. A tenant
	// with no key gets no account.
	Tenants map[string][]string
}

// ErrNoTenantKeys means an AccountLayout with no tenant key at all: there
// is nobody to separate, and a server without users is the open single node.
var ErrNoTenantKeys = errors.New("no tenant has a NATS key")

// tenants returns the tenants that have keys, sorted, so the
// configuration is the same text for the same layout.
func (l AccountLayout) tenants() []string {
	var out []string
	for t, keys := range l.Tenants {
		if len(keys) > 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// confUser, confExport and confImport are nats-server's configuration
// shapes, written as JSON (which its configuration syntax accepts).
type confUser struct {
	NKey        string            `json:"nkey"`
	Permissions serverPermissions `json:"permissions"`
}

type confExport struct {
	Stream       string   `json:"stream,omitempty"`
	Service      string   `json:"service,omitempty"`
	ResponseType string   `json:"response_type,omitempty"`
	Accounts     []string `json:"accounts"`
}

type confRef struct {
	Account string `json:"account"`
	Subject string `json:"subject"`
}

type confImport struct {
	Stream  *confRef `json:"stream,omitempty"`
	Service *confRef `json:"service,omitempty"`
	To      string   `json:"to,omitempty"`
}

type confAccount struct {
	JetStream bool         `json:"jetstream,omitempty"`
	Users     []confUser   `json:"users"`
	Exports   []confExport `json:"exports,omitempty"`
	Imports   []confImport `json:"imports,omitempty"`
}

// TenantImports are the subjects tenant's account imports from
// ServiceAccount: its events (a stream import), and the info, pull and
// acknowledgement subjects of its work consumer (service imports; the
// pull's answers are streamed).
func (s PermissionScope) tenantImports(tenant string) (stream string, services []confExport) {
	ws, wc := s.WorkStream, WorkConsumer(tenant)
	return s.SubjectPrefix + "." + tenant + ".>", []confExport{
		{Service: "$JS.API.CONSUMER.INFO." + ws + "." + wc},
		{Service: "$JS.API.CONSUMER.MSG.NEXT." + ws + "." + wc, ResponseType: "stream"},
		{Service: "$JS.ACK." + ws + "." + wc + ".>"},
	}
}

// ServerConfig is the `accounts { … }` block of a nats-server
// configuration for l: ServiceAccount with JetStream, the service's user
// and the exports, and one account per tenant with its users and imports.
// The embedded server is configured from it (natsserver.Options.Accounts)
// and `reconciler nats-creds --server-config` prints it for an external
// server, whose configuration also needs a jetstream { store_dir } block.
func (l AccountLayout) ServerConfig() (string, error) {
	scope, err := l.Scope.withDefaults()
	if err != nil {
		return "", fmt.Errorf("nats accounts: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(l.Service) {
		return "", errors.New("nats accounts: the service's key is not a public user nkey (U…)")
	}
	tenants := l.tenants()
	if len(tenants) == 0 {
		return "", fmt.Errorf("nats accounts: %w", ErrNoTenantKeys)
	}
	sp, err := ServicePermissions(scope)
	if err != nil {
		return "", err
	}
	svc := confAccount{JetStream: true, Users: []confUser{{NKey: l.Service, Permissions: sp.conf()}}}
	accounts := map[string]confAccount{}
	seen := map[string]string{l.Service: "the service"}
	for _, t := range tenants {
		if ledger.ValidateTenant(t) != nil {
			return "", fmt.Errorf("nats accounts: tenant %q: %w", t, ErrInvalidTenant)
		}
		perms, err := TenantPermissions(scope, t)
		if err != nil {
			return "", err
		}
		acc := confAccount{}
		for _, k := range l.Tenants[t] {
			switch {
			case !nkeys.IsValidPublicUserKey(k):
				return "", fmt.Errorf("nats accounts: tenant %s: %q is not a public user nkey (U…)", t, k)
			case seen[k] != "":
				return "", fmt.Errorf("nats accounts: tenant %s: nkey %s is also %s's", t, k, seen[k])
			}
			seen[k] = "tenant " + t
			acc.Users = append(acc.Users, confUser{NKey: k, Permissions: perms.conf()})
		}
		name := TenantAccount(t)
		stream, services := scope.tenantImports(t)
		svc.Exports = append(svc.Exports, confExport{Stream: stream, Accounts: []string{name}})
		acc.Imports = append(acc.Imports, confImport{Stream: &confRef{Account: ServiceAccount, Subject: stream}})
		for _, e := range services {
			e.Accounts = []string{name}
			svc.Exports = append(svc.Exports, e)
			acc.Imports = append(acc.Imports, confImport{Service: &confRef{Account: ServiceAccount, Subject: e.Service}, To: tenantAPI(e.Service)})
		}
		accounts[name] = acc
	}
	accounts[ServiceAccount] = svc
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // nats-server rejects \u escapes; > and * stay as they are
	enc.SetIndent("", "  ")
	if err := enc.Encode(accounts); err != nil {
		return "", fmt.Errorf("nats accounts: %w", err)
	}
	return "accounts: " + strings.TrimSpace(b.String()) + "\n", nil
}

// tenantAPI is the subject a tenant's account imports a $JS.API subject
// of ServiceAccount as (TenantAPIPrefix); other subjects keep their name.
func tenantAPI(subject string) string {
	if rest, ok := strings.CutPrefix(subject, "$JS.API."); ok {
		return TenantAPIPrefix + "." + rest
	}
	return ""
}

func (p Permissions) conf() serverPermissions {
	var perms serverPermissions
	if len(p.PublishAllow)+len(p.PublishDeny) > 0 {
		perms.Publish = &serverSubjects{Allow: p.PublishAllow, Deny: p.PublishDeny}
	}
	if len(p.SubscribeAllow)+len(p.SubscribeDeny) > 0 {
		perms.Subscribe = &serverSubjects{Allow: p.SubscribeAllow, Deny: p.SubscribeDeny}
	}
	return perms
}

// TenantJetStream is the JetStream context a tenant's runtime uses on nc:
// in the account layout (its account has no JetStream: $JS.API.INFO
// answers "not enabled for account") the one under TenantAPIPrefix, where
// the account imports its work consumer; elsewhere (the open single node,
// one account for all) the plain one. opts are jetstream.New's.
func TenantJetStream(ctx context.Context, nc *nats.Conn, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	_, err = js.AccountInfo(ctx)
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		if js, err = jetstream.NewWithAPIPrefix(nc, TenantAPIPrefix, opts...); err != nil {
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		return js, nil
	case err != nil:
		return nil, fmt.Errorf("jetstream account info: %w", err)
	}
	return js, nil
}
