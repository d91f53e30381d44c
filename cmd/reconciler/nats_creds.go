package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
)

// natsCredsUsage is the help of `reconciler nats-creds`.
const natsCredsUsage = `Usage:
  reconciler nats-creds --tenant T [--out FILE] [--config FILE]
  reconciler nats-creds --service  [--out FILE] [--config FILE]
  reconciler nats-creds --server-config [--config FILE]

Makes a NATS user key pair for the event bus and prints what each side
needs, or writes an external nats-server's accounts configuration.

  --tenant T   a credential for tenant T's agent runtimes: a user of T's own
               NATS account, which imports T's events (recon.T.>) and T's
               work consumer, and nothing else.
  --service    the service's own credential on an external NATS (nats_url):
               the embedded server makes one at every start and needs none.
  --out FILE   write the seed file there (mode 0600; an existing file is not
               overwritten) and the instructions to stdout. Without it the
               seed file goes to stdout and the instructions to stderr:
                 reconciler nats-creds --tenant acme > acme.nk
  --server-config
               print the accounts block of an external nats-server's
               configuration for the config's tenants (their nats_nkeys)
               and the service (the public key of its nats_nkey seed file):
               the service's account holds the streams, each tenant's
               account imports only its own subjects. The embedded server
               runs the same layout.
  --config     the serve configuration (default $RECONCILER_CONFIG): its
               tenants, events.stream and events.subject_prefix shape the
               accounts and permissions.

The seed is the runtime's secret: nats.go (nats.NkeyOptionFromSeed), the
nats CLI (--nkey) and client.ConnectNATS read the file as written. The
instructions hold only the public key.
`

// runNATSCreds runs `reconciler nats-creds`; it returns the exit status.
func runNATSCreds(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if err := natsCreds(args, stdout, stderr, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = io.WriteString(stdout, natsCredsUsage)
			return 0
		}
		fmt.Fprintln(stderr, "reconciler nats-creds:", oneLine(err))
		var ue *ledgerUsageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

func natsCreds(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("reconciler nats-creds", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tenant := fs.String("tenant", "", "")
	service := fs.Bool("service", false, "")
	serverConfig := fs.Bool("server-config", false, "")
	out := fs.String("out", "", "")
	flags := config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErrorf("%v (run reconciler nats-creds --help)", err)
	}
	switch {
	case fs.NArg() > 0:
		return usageErrorf("unexpected argument %q (run reconciler nats-creds --help)", fs.Arg(0))
	case *serverConfig && (*tenant != "" || *service || *out != ""):
		return usageErrorf("--server-config takes no --tenant, --service or --out (run reconciler nats-creds --help)")
	case *serverConfig:
		cfg, err := flags.Load(getenv)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		return writeServerConfig(stdout, cfg)
	case (*tenant == "") == !*service:
		return usageErrorf("give --tenant T or --service (run reconciler nats-creds --help)")
	case *tenant != "" && ledger.ValidateTenant(*tenant) != nil:
		return usageErrorf("--tenant %q: want 1-128 of [A-Za-z0-9_-]", *tenant)
	}
	cfg, err := flags.Load(getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}

	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("make a key pair: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("make a key pair: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("make a key pair: %w", err)
	}
	defer clear(seed)
	who := "the service"
	if *tenant != "" {
		who = "tenant " + *tenant
	}
	seedFile := fmt.Sprintf("# NATS user seed of %s (public key %s) for reconciler's event bus.\n"+
		"# It is a secret: keep this file readable by its user alone.\n%s\n", who, pub, seed)

	name := *out // the seed file's name in the instructions
	switch {
	case name == "" && *tenant != "":
		name = *tenant + ".nk"
	case name == "":
		name = "service.nk"
	}
	var b strings.Builder
	if *tenant != "" {
		writeTenantInstructions(&b, cfg, *tenant, pub, name, *out == "")
	} else {
		writeServiceInstructions(&b, pub, name, *out == "")
	}

	if *out == "" {
		if _, err := io.WriteString(stdout, seedFile); err != nil {
			return err
		}
		_, err = io.WriteString(stderr, b.String())
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("seed file: %w", err)
	}
	if _, err := io.WriteString(f, seedFile); err != nil {
		_ = f.Close()
		return fmt.Errorf("seed file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("seed file: %w", err)
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

// keepSeed is the instructions' line about the seed: the file --out
// wrote, or stdout, which the operator saves under name.
func keepSeed(name string, onStdout bool) string {
	if onStdout {
		return fmt.Sprintf("the seed went to stdout: save it as %s (reconciler nats-creds ... > %s)\n   and keep it readable by its user alone", name, name)
	}
	return fmt.Sprintf("keep the seed file (%s) readable by its user alone", name)
}

func writeTenantInstructions(b *strings.Builder, cfg config.Config, tenant, pub, seedFile string, onStdout bool) {
	fmt.Fprintf(b, "NATS credential of tenant %s: public key %s\n\n", tenant, pub)
	known := slices.ContainsFunc(cfg.Tenants, func(t config.Tenant) bool { return t.ID == tenant })
	if !known && (len(cfg.Tenants) > 0 || tenant != config.DefaultTenant) {
		fmt.Fprintf(b, "Note: the configuration has no tenant %q yet.\n\n", tenant)
	}
	fmt.Fprintf(b, `1. The service: add the public key to the tenant in the config file and
   restart (keep an old key listed until no runtime uses it):

     tenants:
       - id: %s
         nats_nkeys: [%q]

   The embedded NATS then runs a NATS account per tenant. With an external
   NATS (nats_url), regenerate its accounts and reload it:

     reconciler nats-creds --server-config --config FILE

2. The runtime: %s. It is a user of account %s, which sees %s.%s.> (live)
   and its work consumer %s, and nothing else. Connect with the tenant's
   inbox prefix, which its permissions require:

     Go SDK:    client.ConnectNATS(url, %q, client.NATSCredentials{NKeyFile: %q})
     nats.go:   nats.NkeyOptionFromSeed(%q) and nats.CustomInboxPrefix(%q);
                the worker's JetStream: jetstream.NewWithAPIPrefix(nc, %q)
     nats CLI:  nats --server URL --nkey %s --inbox-prefix %s --js-api-prefix '%s' ...
`, tenant, pub, keepSeed(seedFile, onStdout), events.TenantAccount(tenant), cfg.Events.SubjectPrefix, tenant, events.WorkConsumer(tenant),
		tenant, seedFile, seedFile, events.InboxPrefix(tenant), events.TenantAPIPrefix, seedFile, events.InboxPrefix(tenant), events.TenantAPIPrefix)
}

func writeServiceInstructions(b *strings.Builder, pub, seedFile string, onStdout bool) {
	fmt.Fprintf(b, `NATS credential of the service: public key %s

1. The service: %s, and name it in the config:

     nats_url: nats://nats.internal:4222
     nats_nkey: %s

2. The external NATS's admin: regenerate its accounts from that config (the
   service's user is the public key of the nats_nkey seed file) and reload:

     reconciler nats-creds --server-config --config FILE
`, pub, keepSeed(seedFile, onStdout), seedFile)
}

// writeServerConfig prints the accounts block of an external nats-server
// for cfg: the service's user is the public key of cfg's nats_nkey seed.
func writeServerConfig(w io.Writer, cfg config.Config) error {
	if cfg.NATSNKey == "" {
		return errors.New("--server-config needs the service's seed file (nats_nkey; reconciler nats-creds --service makes one): its public key is the service's user. A server run with decentralized auth (nats_creds) takes its accounts from its operator, not from this file")
	}
	raw, err := os.ReadFile(cfg.NATSNKey)
	if err != nil {
		return fmt.Errorf("nats_nkey: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(raw)
	clear(raw)
	if err != nil {
		return fmt.Errorf("nats_nkey %s: %w", cfg.NATSNKey, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("nats_nkey %s: %w", cfg.NATSNKey, err)
	}
	conf, err := natsLayout(cfg, pub).ServerConfig()
	if errors.Is(err, events.ErrNoTenantKeys) {
		return errors.New("no tenant has nats_nkeys: add each tenant runtime's public key (reconciler nats-creds --tenant T) to the config first")
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, `# reconciler's event bus: nats-server accounts (reconciler nats-creds --server-config).
# The service's account %s holds the streams; each tenant's account imports
# only its own events and work consumer. Add to the server's configuration,
# beside a jetstream block:
#   jetstream { store_dir: "/var/lib/nats" }
%s`, events.ServiceAccount, conf)
	return err
}
