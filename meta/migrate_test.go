package meta

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Gateways that start together all run Migrate at once: every step must be
// applied exactly once, and every caller must come back with the full schema.
// The race lies in a window of a few milliseconds (CREATE TABLE IF NOT EXISTS
// is not safe against itself), so several fresh databases are raced on.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	admin := testenv.DatabaseURL(t) // make sure a server exists, then use databases of our own
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 8 {
		// Half the rounds race on a database the runner before tern left at
		// step 2: adopting its history must be as race-free as a fresh start.
		legacy := 0
		if round%2 == 1 {
			legacy = 2
		}
		migrateRace(t, admin, fmt.Sprintf("migrate_race_%d", round), ms, legacy)
	}
}

func migrateRace(t *testing.T, admin, name string, ms []Migration, legacy int) {
	ctx := context.Background()
	url, err := stack.CreateDatabase(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	legacyMigrate(t, url, ms[:legacy])
	const procs = 6
	applied := make([][]int, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := Open(ctx, url, PoolConfig{MaxConns: 2})
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			<-start
			applied[i], errs[i] = Migrate(ctx, pool)
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("%s: process %d: %v", name, i, errs[i])
		}
		total += len(applied[i])
	}
	if total != len(ms)-legacy {
		t.Fatalf("steps applied across %d processes = %d, want each of the %d missing exactly once: %v", procs, total, len(ms)-legacy, applied)
	}

	pool, err := Open(ctx, url, PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	again, err := Migrate(ctx, pool)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate applied %v (err %v), want nothing", again, err)
	}
	v, err := SchemaVersion(ctx, pool)
	if err != nil || v != ms[len(ms)-1].Version {
		t.Fatalf("schema version %d (err %v), want %d", v, err, ms[len(ms)-1].Version)
	}
}

// legacyMigrate applies ms exactly as the runner before tern did: its own
// schema_migrations table, one transaction per step, one row per step.
func legacyMigrate(t *testing.T, url string, ms []Migration) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		}); err != nil {
			t.Fatalf("legacy %s: %v", m.Name, err)
		}
	}
}

// A database migrated by the runner before tern, fully or part way, upgrades
// without any step applied twice and without losing data or history.
func TestMigrateUpgradesLegacyDatabase(t *testing.T) {
	admin := testenv.DatabaseURL(t)
	ctx := context.Background()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, reached := range []int{len(ms), 2} {
		t.Run(fmt.Sprintf("at_%d", reached), func(t *testing.T) {
			url, err := stack.CreateDatabase(ctx, admin, fmt.Sprintf("migrate_legacy_%d", reached))
			if err != nil {
				t.Fatal(err)
			}
			legacyMigrate(t, url, ms[:reached])
			pool, err := Open(ctx, url, PoolConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if v, err := SchemaVersion(ctx, pool); err != nil || v != reached {
				t.Fatalf("before upgrade: schema version %d (err %v), want the legacy %d", v, err, reached)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO access_keys (access_key_id, secret_sealed) VALUES ('AKIAKEPTACROSSUPGRADE', '\x00')`); err != nil {
				t.Fatal(err)
			}
			var firstApplied time.Time
			if err := pool.QueryRow(ctx, `SELECT applied_at FROM schema_migrations WHERE version = 1`).Scan(&firstApplied); err != nil {
				t.Fatal(err)
			}

			applied, err := Migrate(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			var want []int
			for _, m := range ms[reached:] {
				want = append(want, m.Version)
			}
			if fmt.Sprint(applied) != fmt.Sprint(want) {
				t.Fatalf("applied %v, want only the missing %v", applied, want)
			}
			if v, err := SchemaVersion(ctx, pool); err != nil || v != len(ms) {
				t.Fatalf("schema version %d (err %v), want %d", v, err, len(ms))
			}
			var keys int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM access_keys WHERE access_key_id = 'AKIAKEPTACROSSUPGRADE'`).Scan(&keys); err != nil || keys != 1 {
				t.Fatalf("access key rows after upgrade: %d (err %v), want 1", keys, err)
			}
			// The legacy history is kept, its first row untouched, and it
			// lists every step so an older binary would apply nothing.
			var rows, top int
			var stillFirst time.Time
			if err := pool.QueryRow(ctx, `SELECT count(*), max(version), min(applied_at) FILTER (WHERE version = 1) FROM schema_migrations`).Scan(&rows, &top, &stillFirst); err != nil {
				t.Fatal(err)
			}
			if rows != len(ms) || top != len(ms) || !stillFirst.Equal(firstApplied) {
				t.Fatalf("schema_migrations: %d rows up to %d, first applied %v (was %v)", rows, top, stillFirst, firstApplied)
			}
			if again, err := Migrate(ctx, pool); err != nil || len(again) != 0 {
				t.Fatalf("second Migrate applied %v (err %v), want nothing", again, err)
			}
		})
	}
}

// A database a newer binary already migrated further is left alone, as the
// runner before tern left it: an older gateway restarting with --migrate
// during a rolling upgrade must not fail.
func TestMigrateLeavesNewerSchemaAlone(t *testing.T) {
	ctx := context.Background()
	url, err := stack.CreateDatabase(ctx, testenv.DatabaseURL(t), "migrate_newer")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := Open(ctx, url, PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE schema_version SET version = version + 1`); err != nil {
		t.Fatal(err)
	}
	if applied, err := Migrate(ctx, pool); err != nil || len(applied) != 0 {
		t.Fatalf("Migrate on a newer schema applied %v (err %v), want nothing", applied, err)
	}
}
