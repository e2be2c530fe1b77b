package meta

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockKey is the advisory lock that serializes migrations across
// processes ("fencegate" in ASCII, truncated to fit a bigint).
const migrationLockKey int64 = 0x66656e6365676174

// Migration is one embedded schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must be NNNN_description.sql", name)
		}
		body, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations numbered %d", out[i].Version)
		}
	}
	return out, nil
}

// Migrate applies the migrations the database lacks and returns the versions it
// applied. Each step runs in its own transaction under a transaction-scoped
// advisory lock, so concurrent gateways starting at once apply each step exactly
// once and a crash leaves no half-applied step.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	// CREATE TABLE IF NOT EXISTS is not safe against itself: two sessions can
	// both find the table missing and one then fails on the catalog's unique
	// indexes (as a duplicate type or relation). Under the migration lock only
	// one session creates it.
	if err := underMigrationLock(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
		return err
	}); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	var applied []int
	for _, m := range ms {
		did, err := applyMigration(ctx, pool, m)
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if did {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// underMigrationLock runs fn in a transaction that holds the migration lock
// until it ends.
func underMigrationLock(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return err
		}
		return fn(tx)
	})
}

func applyMigration(ctx context.Context, pool *pgxpool.Pool, m Migration) (bool, error) {
	did := false
	err := underMigrationLock(ctx, pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		did = true
		_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
		return err
	})
	return did, err
}

// SchemaVersion is the highest applied migration, 0 for an empty database.
func SchemaVersion(ctx context.Context, q Querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}
