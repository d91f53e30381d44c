package postgres

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestListenURL: with Options.ListenURL the LISTEN connection is that
// URL's (the pool may go through a transaction-mode pooler, which keeps no
// session), it listens on the channel of the pool's schema though its own
// URL selects none, so another replica's commit wakes it; a URL that
// cannot be parsed fails Open without quoting it.
func TestListenURL(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	q.Del("search_path") // its current schema is public, not the pool's
	app := "recon_listen_" + randHex(4)
	q.Set("application_name", app)
	p.RawQuery = q.Encode()
	listen := p.String()

	s := openStore(t, u, Options{Policy: ledger.DefaultPolicy(), MaxConns: 2, ListenURL: listen})
	other := openStore(t, u, Options{Policy: ledger.DefaultPolicy(), MaxConns: 2})
	ctx := t.Context()

	// The LISTEN went out on the listen URL's connection, and only there.
	var listening int
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&listening)
	if err != nil || listening != 1 {
		t.Fatalf("backends named %s that ran LISTEN: %d %v; want 1", app, listening, err)
	}

	row := claimOne(t, other, "acme", `{"n":1}`)
	drain(s.Notify())
	res, err := other.Ingest(ctx, ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_listen", LocalID: row.MetadataLocalID,
		Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", At: t0.Add(time.Second)},
		At:       t0.Add(time.Second)})
	if err != nil || res.Outcome != ledger.IngestAccepted || res.Change.Event == nil {
		t.Fatalf("ingest on the other replica: %s %v; want accepted with an event", res.Outcome, err)
	}
	select {
	case <-s.Notify():
	case <-time.After(10 * time.Second):
		t.Fatal("the store listening on its own URL was not woken by the other replica's commit")
	}

	t.Run("an unparsable listen URL", func(t *testing.T) {
		_, err := Open(ctx, u, Options{ListenURL: "postgres://u:SeKrEt@[db/x"})
		if err == nil || strings.Contains(err.Error(), "SeKrEt") || !strings.Contains(err.Error(), "listen URL") {
			t.Fatalf("Open: %v; want a parse error naming the listen URL, not quoting it", err)
		}
	})
	t.Run("an unreachable listen URL", func(t *testing.T) {
		bad, err := url.Parse(listen)
		if err != nil {
			t.Fatal(err)
		}
		bad.Host = "127.0.0.1:1" // nothing listens there
		q := bad.Query()
		q.Set("connect_timeout", "2")
		bad.RawQuery = q.Encode()
		_, err = Open(ctx, u, Options{ListenURL: bad.String(), MaxConns: 1})
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Open: %v; want ErrUnavailable", err)
		}
	})
}
