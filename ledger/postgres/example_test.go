package postgres_test

import (
	"context"
	"log"
	"log/slog"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/postgres"
)

// Open a store shared by several replicas, and take a share of the
// resolver's due rows for one minute.
func ExampleOpen() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, "postgres://reconciler@db:5432/reconciler?sslmode=require", postgres.Options{
		Policy:   ledger.DefaultPolicy(),
		Logger:   slog.Default(),
		MaxConns: 16,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	rows, err := s.ClaimDue(ctx, time.Now(), 100, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rows {
		_ = r // look the row up at its vendor, then settle or Reschedule it
	}
}
