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

Makes a NATS user key pair for the event bus and prints what each side needs.

  --tenant T   a credential for tenant T's agent runtimes: they may read T's
               events (recon.T.>) and nothing else, and publish nothing.
  --service    the service's own credential on an external NATS (nats_url):
               the embedded server makes one at every start and needs none.
  --out FILE   write the seed file there (mode 0600; an existing file is not
               overwritten) and the instructions to stdout. Without it the
               seed file goes to stdout and the instructions to stderr:
                 reconciler nats-creds --tenant acme > acme.nk
  --config     the serve configuration (default $RECONCILER_CONFIG): its
               events.stream and events.subject_prefix shape the permissions.

The seed is the runtime's secret: nats.go (nats.NkeyOptionFromSeed), the
nats CLI (--nkey) and client.ConnectNATS read the file as written. The
instructions hold only the public key and the permissions.
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

	user, err := natsServerUser(cfg, *tenant, pub)
	if err != nil {
		return err
	}
	name := *out // the seed file's name in the instructions
	switch {
	case name == "" && *tenant != "":
		name = *tenant + ".nk"
	case name == "":
		name = "service.nk"
	}
	var b strings.Builder
	if *tenant != "" {
		writeTenantInstructions(&b, cfg, *tenant, pub, user, name)
	} else {
		writeServiceInstructions(&b, pub, user, name)
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

func writeTenantInstructions(b *strings.Builder, cfg config.Config, tenant, pub, user, seedFile string) {
	fmt.Fprintf(b, "NATS credential of tenant %s: public key %s\n\n", tenant, pub)
	known := slices.ContainsFunc(cfg.Tenants, func(t config.Tenant) bool { return t.ID == tenant })
	if !known && (len(cfg.Tenants) > 0 || tenant != config.DefaultTenant) {
		fmt.Fprintf(b, "Note: the configuration has no tenant %q yet.\n\n", tenant)
	}
	fmt.Fprintf(b, `1. The service, with its embedded NATS: add the public key to the tenant in
   the config file and restart (keep an old key listed until no runtime uses it):

     tenants:
       - id: %s
         nats_nkeys: [%q]

   With an external NATS (nats_url), its admin grants the user instead, in the
   server's configuration, inside authorization { users = [ ... ] }:

     %s

2. The runtime: keep the seed file (%s) readable by it alone, and connect with
   the tenant's inbox prefix, which its permissions require:

     Go SDK:    client.ConnectNATS(url, %q, client.NATSCredentials{NKeyFile: %q})
     nats.go:   nats.NkeyOptionFromSeed(%q) and nats.CustomInboxPrefix(%q)
     nats CLI:  nats --server URL --nkey %s --inbox-prefix %s ...

   It may read %s.%s.> only, through consumers with one filter subject (which
   nats.go then sends in the create request's subject), and publish nothing.
`, tenant, pub, user, seedFile, tenant, seedFile, seedFile, events.InboxPrefix(tenant), seedFile, events.InboxPrefix(tenant),
		cfg.Events.SubjectPrefix, tenant)
}

func writeServiceInstructions(b *strings.Builder, pub, user, seedFile string) {
	fmt.Fprintf(b, `NATS credential of the service: public key %s

1. The external NATS's admin grants the user, in the server's configuration,
   inside authorization { users = [ ... ] }:

     %s

2. The service: give it the seed file, readable by its user alone:

     nats_url: nats://nats.internal:4222
     nats_nkey: %s
`, pub, user, seedFile)
}
