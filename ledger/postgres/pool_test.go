package postgres

import (
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

// TestPoolSize: the pool is DefaultMaxConns unless Options.MaxConns or
// the URL's pool_max_conns says otherwise.
func TestPoolSize(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	cases := []struct {
		name string
		url  string
		opt  int
		want int32
	}{
		{"default", u, 0, DefaultMaxConns},
		{"the URL's pool_max_conns", u + "&pool_max_conns=7", 0, 7},
		{"Options.MaxConns", u + "&pool_max_conns=7", 5, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, tc.url, Options{Policy: ledger.DefaultPolicy(), MaxConns: tc.opt})
			if got := s.pool.Config().MaxConns; got != tc.want {
				t.Fatalf("pool size %d, want %d", got, tc.want)
			}
		})
	}
}
