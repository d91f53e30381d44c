package events

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// redactURLs drops the user information of every URL in a comma-separated
// list: a nats:// URL may carry a token as its user name, which nats.go's
// own redaction (passwords only) keeps.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(unparsable url)"
			continue
		}
		u.User = nil
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// Connect dials NATS for the relay and Await with reconnection that never
// gives up (the outbox holds events through any outage; the relay's Healthy
// reports it) and returns the connection and its JetStream context. extra
// options are applied last (credentials, TLS). Close the connection when done.
func Connect(url string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := []nats.Option{
		nats.Name("reconciler"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			// After a disconnect the connection has no current server; the
			// configured list names them all.
			log.Warn("nats disconnected", "servers", redactURLs(url), "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", redactURLs(nc.ConnectedUrl()))
		}),
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("nats connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// Credentials say how a connection authenticates to NATS and checks the
// server's certificate. The fields are files, named after the nats CLI's
// flags, so an operator configures reconciler and the CLI alike.
type Credentials struct {
	// CredsFile is a user JWT and seed (.creds), for a server run with
	// decentralized auth: --creds.
	CredsFile string
	// NKeyFile is an nkey seed file (`reconciler nats-creds` writes one): --nkey.
	NKeyFile string
	// CAFile holds the roots that verify the server's certificate: --tlsca.
	CAFile string
	// CertFile and KeyFile are a TLS client certificate: --tlscert, --tlskey.
	CertFile, KeyFile string
}

// Options are the nats.go options for c: none for the zero value. A seed
// file is read here, so a missing or malformed one fails before dialling.
func (c Credentials) Options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case c.CredsFile != "" && c.NKeyFile != "":
		return nil, errors.New("nats credentials: a creds file and an nkey seed file are exclusive")
	case c.CredsFile != "":
		if _, err := os.Stat(c.CredsFile); err != nil {
			return nil, fmt.Errorf("nats creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	case c.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed file %s: %w", c.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	if c.CAFile != "" {
		opts = append(opts, nats.RootCAs(c.CAFile))
	}
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return nil, errors.New("nats credentials: a client certificate needs both its certificate and its key file")
	case c.CertFile != "":
		opts = append(opts, nats.ClientCert(c.CertFile, c.KeyFile))
	}
	return opts, nil
}
