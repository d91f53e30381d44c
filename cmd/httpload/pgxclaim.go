package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
)

// The pgx claim service is the hand-rolled PostgreSQL baseline the ledger's
// durable path is compared with (issue 32): an echo server whose POST
// /v1/claims decodes the same JSON body as the API, builds the same row
// (ledger.NewClaim: validation, key, local id, fingerprint), inserts the
// full row with one INSERT … ON CONFLICT DO NOTHING from a pgxpool
// (synchronous_commit on, checked) into a fresh table with the row's unique
// indexes and its due index, and answers 201 with the row. No auth, no
// rules, no events: the least a durable claim on PostgreSQL costs.

// pgxClaimBody is the claim body the load program sends (api's claimBody
// has more optional fields; the load never sends them).
type pgxClaimBody struct {
	RunID      string           `json:"run_id"`
	Tool       string           `json:"tool"`
	ToolCallID string           `json:"tool_call_id"`
	Vendor     string           `json:"vendor"`
	ToolClass  ledger.ToolClass `json:"tool_class"`
	Intent     json.RawMessage  `json:"intent"`
	Key        string           `json:"key,omitempty"`
}

// pgxTarget is the pgx claim service and its pool and table.
type pgxTarget struct {
	pool  *pgxpool.Pool
	table string
	http  *httpServer
}

// startPgx connects to url with a pool of conns connections (at most 64,
// leaving room under max_connections = 100), opens every connection before
// the load, creates a fresh table and serves the claim route.
func startPgx(ctx context.Context, url string, conns int, now func() time.Time, srv func(http.Handler) (*httpServer, error)) (_ *pgxTarget, err error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgx url: %w", err)
	}
	cfg.MaxConns = int32(min(conns, 64))
	cfg.MinConns = cfg.MaxConns
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgx pool: %w", err)
	}
	t := &pgxTarget{pool: pool, table: fmt.Sprintf("httpload_claims_%d", time.Now().UnixNano())}
	defer func() {
		if err != nil {
			t.pool.Close()
		}
	}()
	held := make([]interface{ Release() }, 0, cfg.MaxConns)
	release := func() {
		for _, c := range held {
			c.Release()
		}
	}
	for range cfg.MaxConns {
		c, err := pool.Acquire(ctx) // a backend start-up costs ms: not part of a claim
		if err != nil {
			release() // pool.Close (deferred) waits for every acquired connection
			return nil, fmt.Errorf("pgx connect: %w", err)
		}
		held = append(held, c)
	}
	release()
	var sc string
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		return nil, fmt.Errorf("pgx: synchronous_commit = %q (%v), want on", sc, err)
	}
	for _, ddl := range []string{
		`CREATE TABLE ` + t.table + ` (tenant text NOT NULL, key text NOT NULL, local_id text NOT NULL UNIQUE,
		  status text NOT NULL, next_check_at timestamptz, first_seen_at timestamptz NOT NULL, row jsonb NOT NULL,
		  PRIMARY KEY (tenant, key))`,
		`CREATE INDEX ` + t.table + `_due ON ` + t.table + ` (next_check_at) WHERE status IN ('pending','unknown')`,
		`CREATE INDEX ` + t.table + `_by_time ON ` + t.table + ` (tenant, first_seen_at)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("pgx: create table: %w", err)
		}
	}
	if t.http, err = srv(t.handler(now)); err != nil {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP TABLE "+t.table)
		return nil, err
	}
	return t, nil
}

func (t *pgxTarget) handler(now func() time.Time) http.Handler {
	insert := `INSERT INTO ` + t.table + ` (tenant, key, local_id, status, next_check_at, first_seen_at, row)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`
	policy := ledger.DefaultPolicy()
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/v1/claims", func(c echo.Context) error {
		data, err := io.ReadAll(io.LimitReader(c.Request().Body, 1<<20))
		if err != nil {
			return fmt.Errorf("read body: %w", err)
		}
		var b pgxClaimBody
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, err.Error())
		}
		cl, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: tenant, RunID: b.RunID, Tool: b.Tool, ToolCallID: b.ToolCallID, Vendor: b.Vendor,
			ToolClass: b.ToolClass, Intent: b.Intent, Key: b.Key,
		}, policy, now())
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, err.Error())
		}
		r := cl.Row
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		tag, err := t.pool.Exec(c.Request().Context(), insert, r.Tenant, r.Key, r.MetadataLocalID, string(r.Status), r.NextCheckAt, r.FirstSeenAt, v)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return echo.NewHTTPError(http.StatusConflict, "exists")
		}
		return c.JSONBlob(http.StatusCreated, append(append([]byte(`{"decision":"proceed","row":`), v...), '}'))
	})
	return e
}

// rows is how many rows the table holds (the check that every 201 inserted).
func (t *pgxTarget) rows(ctx context.Context) (int64, error) {
	var n int64
	err := t.pool.QueryRow(ctx, "SELECT count(*) FROM "+t.table).Scan(&n)
	return n, err
}

func (t *pgxTarget) close(ctx context.Context) error {
	err := t.http.close(ctx)
	if _, derr := t.pool.Exec(ctx, "DROP TABLE "+t.table); derr != nil {
		err = errors.Join(err, fmt.Errorf("drop %s: %w", t.table, derr))
	}
	t.pool.Close()
	return err
}
