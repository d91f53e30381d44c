package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// freshDB is a database the load program made for one run of the real
// target on PostgreSQL (Config.Store), so no run sees another's rows or
// bloat.
type freshDB struct {
	admin string // the URL the run was given
	name  string
	url   string // admin with the database replaced by name
}

// createFreshDB creates a database named httpload_<random> on the server
// of u (a postgres:// URL; its query parameters, pool_max_conns among
// them, carry over to the new database's URL).
func createFreshDB(ctx context.Context, u string) (*freshDB, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return nil, errors.New("store: want a postgres:// URL")
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	d := &freshDB{admin: u, name: "httpload_" + hex.EncodeToString(b)}
	if err := d.exec(ctx, "CREATE DATABASE "+pgx.Identifier{d.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("store: create database: %w", err)
	}
	p.Path = "/" + d.name
	d.url = p.String()
	return d, nil
}

// drop removes the database, closing any connection still on it.
func (d *freshDB) drop(ctx context.Context) error {
	if err := d.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("store: drop database %s: %w", d.name, err)
	}
	return nil
}

func (d *freshDB) exec(ctx context.Context, stmt string) error {
	// pgxpool's parser takes the pool's parameters (pool_max_conns…)
	// out of what goes to the server.
	cfg, err := pgxpool.ParseConfig(d.admin)
	if err != nil {
		// pgx's parse errors quote the URL, password included.
		return errors.New("cannot parse the connection URL")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, stmt)
	return err
}
