package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/agentledger/reconciler/events"
)

func userKey(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// TestAccountLayoutServerConfig: the same layout is the same text; each
// tenant's account imports its own subjects only, and the service's
// account exports each of them to that one account.
func TestAccountLayoutServerConfig(t *testing.T) {
	svc, acme, globex := userKey(t), userKey(t), userKey(t)
	l := events.AccountLayout{Service: svc, Tenants: map[string][]string{"globex": {globex}, "acme": {acme}, "nokey": nil}}
	conf, err := l.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := l.ServerConfig()
	if conf != again {
		t.Error("the same layout rendered two texts")
	}
	var accounts map[string]struct {
		JetStream bool `json:"jetstream"`
		Users     []struct {
			NKey string `json:"nkey"`
		} `json:"users"`
		Exports []struct {
			Stream, Service string
			Accounts        []string `json:"accounts"`
		} `json:"exports"`
		Imports []struct {
			Stream, Service *struct{ Account, Subject string }
			To              string `json:"to"`
		} `json:"imports"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(conf, "accounts: ")), &accounts); err != nil {
		t.Fatalf("not JSON after the key: %v\n%s", err, conf)
	}
	if len(accounts) != 3 {
		t.Fatalf("accounts %v, want RECONCILER, TENANT_acme, TENANT_globex (no account for a tenant without keys)", accounts)
	}
	s := accounts[events.ServiceAccount]
	if !s.JetStream || len(s.Users) != 1 || s.Users[0].NKey != svc {
		t.Errorf("service account: %+v", s)
	}
	for _, e := range s.Exports {
		subj := e.Stream + e.Service
		if len(e.Accounts) != 1 {
			t.Fatalf("export %s to %v, want one account", subj, e.Accounts)
		}
		tenant := strings.TrimPrefix(e.Accounts[0], "TENANT_")
		if !strings.Contains(subj, "."+tenant+".") && !strings.HasSuffix(subj, "worker-"+tenant) && !strings.Contains(subj, "worker-"+tenant+".") {
			t.Errorf("export %s goes to %s, whose subjects it is not", subj, e.Accounts[0])
		}
	}
	for tenant, key := range map[string]string{"acme": acme, "globex": globex} {
		a := accounts[events.TenantAccount(tenant)]
		if a.JetStream || len(a.Users) != 1 || a.Users[0].NKey != key {
			t.Errorf("%s's account: %+v", tenant, a)
		}
		var got []string
		for _, im := range a.Imports {
			switch {
			case im.Stream != nil:
				got = append(got, "stream "+im.Stream.Subject)
			case im.Service != nil:
				got = append(got, "service "+im.Service.Subject+" as "+im.To)
			}
		}
		want := []string{
			"stream recon." + tenant + ".>",
			"service $JS.API.CONSUMER.INFO.RECON_WORK.worker-" + tenant + " as $RECON.JS.API.CONSUMER.INFO.RECON_WORK.worker-" + tenant,
			"service $JS.API.CONSUMER.MSG.NEXT.RECON_WORK.worker-" + tenant + " as $RECON.JS.API.CONSUMER.MSG.NEXT.RECON_WORK.worker-" + tenant,
			"service $JS.ACK.RECON_WORK.worker-" + tenant + ".> as ",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s imports:\n%s\nwant:\n%s", tenant, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	for name, bad := range map[string]events.AccountLayout{
		"no tenant key":         {Service: svc, Tenants: map[string][]string{"acme": nil}},
		"a seed as the service": {Service: "SUABC", Tenants: map[string][]string{"acme": {acme}}},
		"a tenant's key twice":  {Service: svc, Tenants: map[string][]string{"acme": {acme}, "globex": {acme}}},
		"the service's key":     {Service: svc, Tenants: map[string][]string{"acme": {svc}}},
		"a tenant with a dot":   {Service: svc, Tenants: map[string][]string{"a.b": {acme}}},
	} {
		if _, err := bad.ServerConfig(); err == nil {
			t.Errorf("%s: rendered", name)
		} else if name == "no tenant key" && !errors.Is(err, events.ErrNoTenantKeys) {
			t.Errorf("%s: %v, want ErrNoTenantKeys", name, err)
		}
	}
}
