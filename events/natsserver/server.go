package natsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// DefaultListen is where the embedded server listens when Options.Listen
// is empty: loopback only, so a single node never exposes its bus.
const DefaultListen = "127.0.0.1:4222"

// DefaultSyncInterval is how often the embedded server fsyncs JetStream's
// writes (DefaultOptions). The relay keeps every record it published until
// the server has synced it, so this bounds what it holds: doc.go.
const DefaultSyncInterval = time.Second

// SyncedAfter is how long after its PubAck a server started with
// DefaultOptions has certainly synced a message: DefaultSyncInterval, plus
// a margin for the sync rounds' own time (the server restarts its timer
// after a round, and a message written just after a block was flushed
// waits for the next round to finish). It is the relay's
// events.RelayOptions.SyncedAfter for the embedded server.
const SyncedAfter = DefaultSyncInterval + 2*time.Second

// defaultReadyTimeout bounds how long Start waits for the listener and
// JetStream; a server that is not ready by then is a start-up error, not a hang.
const defaultReadyTimeout = 10 * time.Second

// Options configures the embedded NATS server.
type Options struct {
	// Listen is host:port for client connections; empty means DefaultListen.
	// Port 0 or -1 picks a free port (tests); ClientURL reports it.
	Listen string
	// StoreDir is where JetStream keeps its file store. Required.
	StoreDir string
	// Logger receives the server's log lines; nil discards them.
	Logger *slog.Logger
	// SyncAlways fsyncs every JetStream write before the PubAck is sent.
	// The zero value syncs every SyncInterval instead, which the service
	// uses (doc.go has the measured cost of both).
	SyncAlways bool
	// SyncInterval is how often JetStream fsyncs when SyncAlways is false;
	// 0 keeps the server default (2 min). DefaultOptions sets
	// DefaultSyncInterval.
	SyncInterval time.Duration
	// ReadyTimeout bounds the wait for the listener and JetStream; 0 means 10 s.
	ReadyTimeout time.Duration

	// Accounts, when set, switch authentication on: it renders the
	// server's `accounts { … }` configuration (events.AccountLayout's
	// ServerConfig) around the public key of the service's own user, whose
	// key pair Start makes and keeps in memory, so the service's streams
	// live in the service's account and each tenant's users in their own.
	// Without it the server lets anyone in, which Start allows on a
	// loopback address only (ErrOpenListener).
	Accounts func(serviceKey string) (string, error)
	// CertFile and KeyFile (PEM), when set, make the listener TLS only.
	// The service's own connection is in-process and needs neither.
	CertFile, KeyFile string
}

// ErrOpenListener means a listen address other hosts can reach on a
// server without users: anyone who reached it could publish and read every
// event.
var ErrOpenListener = errors.New("not a loopback address, and the server has no users: anyone who reaches it could publish and read every event")

// DefaultOptions are the options the service runs the embedded server
// with: loopback on the default port, JetStream in storeDir, and a sync
// every DefaultSyncInterval, which the relay waits out (with a margin)
// before it deletes a published record from the outbox. doc.go has why.
func DefaultOptions(storeDir string, log *slog.Logger) Options {
	return Options{Listen: DefaultListen, StoreDir: storeDir, Logger: log, SyncInterval: DefaultSyncInterval}
}

// Server is an embedded NATS server with JetStream enabled.
type Server struct {
	ns  *server.Server
	log *slog.Logger

	// service signs the service's own connection when auth is on; nil
	// when the server is open.
	service nkeys.KeyPair

	shutdownOnce sync.Once
	done         chan struct{}
}

// Start starts an embedded NATS server with JetStream storing in
// opts.StoreDir and waits until it accepts clients. A port that is already
// taken is reported at once as "nats listen HOST:PORT: address already in use".
// Only the client port is opened: no cluster, leaf node, gateway or
// monitoring listener, and no signal handlers (the process owns its signals).
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("nats: store dir is required")
	}
	listen := opts.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("nats listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("nats listen %q: bad port", listen)
	}
	if port == 0 {
		// nats-server reads 0 as "the default port 4222"; we mean "any port".
		port = server.RANDOM_PORT
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if opts.Accounts == nil && !IsLoopback(host) {
		return nil, fmt.Errorf("nats listen %s: %w", net.JoinHostPort(host, portStr), ErrOpenListener)
	}
	sopts, service, err := accountOptions(opts)
	if err != nil {
		return nil, err
	}
	var tlsConfig *tls.Config
	if opts.CertFile != "" || opts.KeyFile != "" {
		if opts.CertFile == "" || opts.KeyFile == "" {
			return nil, errors.New("nats tls: the listener needs both a certificate and a key file")
		}
		if tlsConfig, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: opts.CertFile, KeyFile: opts.KeyFile}); err != nil {
			return nil, fmt.Errorf("nats tls: %w", err)
		}
	}
	if port != server.RANDOM_PORT {
		// nats-server reports a bind failure through Fatalf from its accept
		// goroutine; probing first turns the common case into a plain error.
		if err := probeListen(net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
			return nil, err
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	readyTimeout := opts.ReadyTimeout
	if readyTimeout <= 0 {
		readyTimeout = defaultReadyTimeout
	}

	sopts.ServerName = "reconciler-embedded"
	sopts.Host, sopts.Port = host, port
	sopts.JetStream, sopts.StoreDir = true, opts.StoreDir
	sopts.NoSigs = true
	sopts.SyncAlways, sopts.SyncInterval = opts.SyncAlways, opts.SyncInterval
	sopts.TLSConfig, sopts.TLS = tlsConfig, tlsConfig != nil
	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	adapter := &natsLogger{log: logger.With("component", "nats")}
	ns.SetLoggerV2(adapter, false, false, false)
	ns.Start()

	s := &Server{ns: ns, log: logger, service: service, done: make(chan struct{})}
	if err := s.waitReady(ctx, adapter, readyTimeout); err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			// Taken between the probe and the server's own bind.
			err = fmt.Errorf("nats listen %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), syscall.EADDRINUSE)
		}
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(shutCtx)
		return nil, err
	}
	auth := "none"
	if service != nil {
		auth = "nkey, an account per tenant"
	}
	logger.Info("embedded nats started", "url", s.ClientURL(), "sync_always", opts.SyncAlways, "sync_interval", opts.SyncInterval,
		"auth", auth, "users", len(sopts.Nkeys), "tls", tlsConfig != nil)
	return s, nil
}

// accountOptions are the server options of opts.Accounts' configuration,
// rendered around the service's own user, whose key pair is made here and
// lives only in this process. No Accounts means no authentication.
func accountOptions(opts Options) (*server.Options, nkeys.KeyPair, error) {
	if opts.Accounts == nil {
		return &server.Options{}, nil, nil
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, nil, fmt.Errorf("nats service key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, nil, fmt.Errorf("nats service key: %w", err)
	}
	conf, err := opts.Accounts(pub)
	if err != nil {
		return nil, nil, err
	}
	sopts := &server.Options{}
	if err := sopts.ProcessConfigString(conf); err != nil {
		return nil, nil, fmt.Errorf("nats accounts configuration: %w", err)
	}
	if !slices.ContainsFunc(sopts.Nkeys, func(u *server.NkeyUser) bool { return u.Nkey == pub }) {
		return nil, nil, errors.New("nats accounts configuration: it has no user for the service's key")
	}
	return sopts, kp, nil
}

// IsLoopback reports whether host (a name or an IP literal) can only be
// reached from this machine: localhost or a loopback IP. Any other name
// counts as reachable, whatever it resolves to today.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// ServiceURL is the URL to dial with ServiceOptions. An in-process
// connection dials nothing, but nats.go wants a server URL, and ClientURL's
// tls:// (when the listener has a certificate) would make it insist on a TLS
// handshake the in-process connection does not do.
const ServiceURL = "nats://in-process"

// ServiceOptions are the nats.go options of the service's own connection:
// in-process (no TCP, no TLS, nothing another process could intercept) and,
// when the server has users, signed by the service's key, which exists only
// in this process. Pass them to events.Connect with ServiceURL.
func (s *Server) ServiceOptions() []nats.Option {
	opts := []nats.Option{nats.InProcessServer(s.ns)}
	if s.service != nil {
		pub, _ := s.service.PublicKey() // a pair made by CreateUser always has one
		opts = append(opts, nats.Nkey(pub, s.service.Sign))
	}
	return opts
}

// waitReady polls the server until it listens and JetStream is enabled, a
// fatal error was logged, ctx is done or the timeout passes.
func (s *Server) waitReady(ctx context.Context, adapter *natsLogger, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := adapter.fatal(); err != nil {
			return fmt.Errorf("nats start: %w", err)
		}
		if s.ns.ReadyForConnections(50*time.Millisecond) && s.ns.JetStreamEnabled() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("nats start: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats start: not ready after %s", timeout)
		}
	}
}

// probeListen binds and releases addr so a taken port fails fast and clearly.
func probeListen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("nats listen %s: %w", addr, syscall.EADDRINUSE)
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			return fmt.Errorf("nats listen %s: %w", addr, op.Err)
		}
		return fmt.Errorf("nats listen %s: %w", addr, err)
	}
	return l.Close()
}

// ClientURL is the nats:// URL clients connect to (with the real port when
// a random one was asked for).
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Shutdown stops the server: clients are disconnected and JetStream flushes
// and closes its store. It returns ctx's error if ctx ends first; the server
// then keeps shutting down in the background and Done reports the end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		// Shutdown blocks until the server's goroutines exit; this goroutine
		// is owned by the Server and exits with it (Done).
		go func() {
			defer close(s.done)
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
			s.log.Info("embedded nats stopped")
		}()
	})
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nats shutdown: %w", ctx.Err())
	}
}

// Done is closed once a Shutdown has completed.
func (s *Server) Done() <-chan struct{} { return s.done }

// natsLogger forwards nats-server log lines to slog. Fatalf never exits the
// process: it records the error so Start can return it.
type natsLogger struct {
	log *slog.Logger

	mu  sync.Mutex
	err error
}

func (l *natsLogger) fatal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *natsLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Tracef(string, ...any)           {}

func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	l.mu.Lock()
	if l.err == nil {
		l.err = errors.New(msg)
	}
	l.mu.Unlock()
}
