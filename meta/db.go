// Package meta owns fencegate's PostgreSQL schema, its migrations and every query.
// Nothing here knows about HTTP: callers pass plain values and get plain values.
package meta

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Querier is what both a pool and a transaction offer.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PoolConfig tunes the connection pool.
type PoolConfig struct {
	MaxConns       int32
	ConnectTimeout time.Duration
	// StatementTimeout bounds every statement server-side, so a stuck query
	// cannot hold a lease row lock forever even if the client side is gone.
	StatementTimeout time.Duration
	ApplicationName  string
}

// Open connects a pool and checks that the server answers.
func Open(ctx context.Context, url string, pc PoolConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	if pc.MaxConns > 0 {
		cfg.MaxConns = pc.MaxConns
	}
	if pc.ConnectTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = pc.ConnectTimeout
	}
	rp := cfg.ConnConfig.RuntimeParams
	if pc.ApplicationName != "" {
		rp["application_name"] = pc.ApplicationName
	}
	if pc.StatementTimeout > 0 {
		rp["statement_timeout"] = fmt.Sprint(pc.StatementTimeout.Milliseconds())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", wrapPoolerError(err))
	}
	return pool, nil
}
