package meta

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// versionTable is tern's one-row table holding the schema version.
const versionTable = "schema_version"

// legacyTable is where the runner before tern recorded each applied step
// (version, name, applied_at). It is adopted once and then kept in step, so an
// older gateway sharing the database finds every step it knows applied.
const legacyTable = "schema_migrations"

// migrationLockKey is the advisory lock the runner before tern took around each
// step ("fencegate" in ASCII, truncated to fit a bigint). Holding it for the
// whole run serializes this runner with an older binary's during an upgrade;
// tern takes its own lock inside it.
const migrationLockKey int64 = 0x66656e6365676174

// Migration is one embedded schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations in version order. tern numbers
// steps 1, 2, 3... and refuses gaps and duplicates.
func Migrations() ([]Migration, error) {
	dir, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	names, err := migrate.FindMigrations(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Migration, 0, len(names))
	for i, name := range names {
		body, err := fs.ReadFile(dir, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: i + 1, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	return out, nil
}

// Migrate applies the migrations the database lacks and returns the versions it
// applied. tern runs each step in its own transaction under a session advisory
// lock, so concurrent gateways starting at once apply each step exactly once and
// a crash leaves no half-applied step.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (applied []int, err error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	// Session locks belong to a connection: a dedicated one, closed at the end,
	// releases them even if an unlock fails, and never returns to the pool
	// holding one.
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockKey); err == nil && uerr != nil {
			err = uerr
		}
	}()
	if err := adoptLegacy(ctx, conn); err != nil {
		return nil, fmt.Errorf("adopt %s: %w", legacyTable, err)
	}
	m, err := migrate.NewMigrator(ctx, conn, versionTable)
	if err != nil {
		return nil, err
	}
	for _, step := range ms {
		m.AppendMigration(step.Name, step.SQL, "")
	}
	before, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return nil, err
	}
	// A database already past this binary's steps (a newer gateway migrated
	// it) is left as it is, as the runner before tern did; tern would refuse it.
	if int(before) < len(ms) {
		err = m.Migrate(ctx)
	}
	after, verr := m.GetCurrentVersion(ctx)
	if verr != nil {
		return nil, verr
	}
	for v := before + 1; v <= after; v++ {
		applied = append(applied, int(v))
	}
	if err != nil {
		return applied, err
	}
	if err := mirrorLegacy(ctx, conn, ms[:min(int(after), len(ms))]); err != nil {
		return applied, fmt.Errorf("record in %s: %w", legacyTable, err)
	}
	return applied, nil
}

// adoptLegacy gives a database migrated by the runner before tern a version
// table at the step it reached, so tern applies nothing twice. It runs under the
// migration lock, before tern would create the table at version 0.
func adoptLegacy(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		hasVersion, hasLegacy, err := versionTables(ctx, tx)
		if err != nil || hasVersion || !hasLegacy {
			return err
		}
		var n, top int
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(max(version), 0) FROM `+legacyTable).Scan(&n, &top); err != nil {
			return err
		}
		// The old runner applied steps in order and stopped at the first
		// failure, so its rows are 1..top; anything else is not its work.
		if n != top {
			return fmt.Errorf("%d rows up to version %d: not a contiguous history", n, top)
		}
		_, err = tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (version int4 NOT NULL); INSERT INTO %[1]s (version) VALUES (%d)`, versionTable, top))
		return err
	})
}

// mirrorLegacy records the applied steps ms in the legacy table, when it exists.
func mirrorLegacy(ctx context.Context, conn *pgx.Conn, ms []Migration) error {
	_, hasLegacy, err := versionTables(ctx, conn)
	if err != nil || !hasLegacy {
		return err
	}
	for _, m := range ms {
		if _, err := conn.Exec(ctx, `INSERT INTO `+legacyTable+` (version, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, m.Version, m.Name); err != nil {
			return err
		}
	}
	return nil
}

// versionTables says which of tern's table and the legacy table exist.
func versionTables(ctx context.Context, q Querier) (hasVersion, hasLegacy bool, err error) {
	err = q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, versionTable, legacyTable).Scan(&hasVersion, &hasLegacy)
	return
}

// SchemaVersion is the highest applied migration, 0 for an empty database. A
// database the runner before tern left and nothing has migrated since reports
// that runner's version, so its gateways know it is current.
func SchemaVersion(ctx context.Context, q Querier) (int, error) {
	hasVersion, hasLegacy, err := versionTables(ctx, q)
	if err != nil {
		return 0, err
	}
	var v int
	switch {
	case hasVersion:
		err = q.QueryRow(ctx, `SELECT version FROM `+versionTable).Scan(&v)
	case hasLegacy:
		err = q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+legacyTable).Scan(&v)
	}
	return v, err
}
