package meta

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
)

// The write path's checks (migration 0021) take every value the protocol
// writes (lease's vocabulary) and refuse any other, on insert and on update.
func TestWritePathChecksTakeTheVocabularyAndRefuseTheRest(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	b := testenv.RandomHex(6)
	ops := []lease.Kind{lease.KindPut, lease.KindCopy, lease.KindComplete, lease.KindDelete, lease.KindMultipart}
	states := []string{lease.StateLeased, lease.StateOpen, lease.StateCommitted, lease.StateAdopted,
		lease.StateUnknown, lease.StateFailed, lease.StateAborted}
	origins := []string{lease.OriginFencegate, lease.OriginAdopted, lease.OriginExternal}

	insertAttempt := func(op, state string) (string, error) {
		id := lease.NewID()
		_, err := c.Pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway)
			VALUES ($1, $2, $3, $4, $5, 'gw')`, id, b, id, op, state)
		return id, err
	}
	setState := func(id, state string) error {
		tag, err := c.Pool.Exec(ctx, `UPDATE attempts SET state = $2 WHERE attempt_id = $1`, id, state)
		if err == nil && tag.RowsAffected() != 1 {
			t.Fatalf("no attempt %q to move to %q", id, state)
		}
		return err
	}
	insertGeneration := func(origin string) error {
		_, err := c.Pool.Exec(ctx, `INSERT INTO generations (bucket, key, generation, origin, committed_at)
			VALUES ($1, $2, nextval('generation_seq'), $3, clock_timestamp())`, b, lease.NewID(), origin)
		return err
	}
	upsertCatalog := func(key, origin string) error {
		_, err := c.Pool.Exec(ctx, `INSERT INTO catalog (bucket, key, generation, origin, committed_at)
			VALUES ($1, $2, nextval('generation_seq'), $3, clock_timestamp())
			ON CONFLICT (bucket, key) DO UPDATE SET origin = EXCLUDED.origin`, b, key, origin)
		return err
	}

	var id string
	for _, op := range ops {
		var err error
		if id, err = insertAttempt(string(op), lease.StateLeased); err != nil {
			t.Errorf("an attempt of op %q: %v", op, err)
		}
	}
	for _, s := range states {
		if err := setState(id, s); err != nil {
			t.Errorf("an attempt moved to %q: %v", s, err)
		}
	}
	for _, o := range origins {
		if err := insertGeneration(o); err != nil {
			t.Errorf("a generation of origin %q: %v", o, err)
		}
		if err := upsertCatalog("k", o); err != nil {
			t.Errorf("the catalog row set to origin %q: %v", o, err)
		}
	}

	for _, bad := range []string{"bogus", "", "Put", "leased "} {
		if _, err := insertAttempt(bad, lease.StateLeased); err == nil {
			t.Errorf("an attempt of op %q was taken", bad)
		}
		if _, err := insertAttempt(string(lease.KindPut), bad); err == nil {
			t.Errorf("an attempt in state %q was taken", bad)
		}
		if err := setState(id, bad); err == nil {
			t.Errorf("an attempt moved to state %q", bad)
		}
		if err := insertGeneration(bad); err == nil {
			t.Errorf("a generation of origin %q was taken", bad)
		}
		if err := upsertCatalog("k", bad); err == nil {
			t.Errorf("the catalog row was set to origin %q", bad)
		}
		if err := upsertCatalog("new-"+bad, bad); err == nil {
			t.Errorf("a catalog row of origin %q was taken", bad)
		}
	}
}

// Migration 0021 changes constraints only: on a database with rows in the
// tables it touches, no table and no index gets a new file (none is
// rewritten or rebuilt), and the rows are all still there.
func TestWritePathChecksByEnumRewriteNothing(t *testing.T) {
	ctx := context.Background()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	step := slices.IndexFunc(ms, func(m Migration) bool { return m.Name == "0021_write_path_checks_by_enum" })
	if step < 0 {
		t.Fatal("no migration 0021_write_path_checks_by_enum")
	}
	url, err := stack.CreateDatabase(ctx, testenv.DatabaseURL(t), "checks_by_enum")
	if err != nil {
		t.Fatal(err)
	}
	legacyMigrate(t, url, ms[:step])
	pool, err := Open(ctx, url, PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
		INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway)
			SELECT gen_random_uuid(), 'b', 'k' || i, 'put', CASE WHEN i % 2 = 0 THEN 'committed' ELSE 'unknown' END, 'gw'
			FROM generate_series(1, 500) i;
		INSERT INTO generations (bucket, key, generation, origin, committed_at)
			SELECT 'b', 'k' || i, i, 'fencegate', clock_timestamp() FROM generate_series(1, 500) i;
		INSERT INTO catalog (bucket, key, generation, origin, committed_at)
			SELECT 'b', 'k' || i, i, 'external', clock_timestamp() FROM generate_series(1, 500) i`); err != nil {
		t.Fatal(err)
	}
	files := func() map[string]uint32 {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT c.relname, c.relfilenode::int8 FROM pg_class c
			WHERE c.oid IN ('attempts'::regclass, 'generations'::regclass, 'catalog'::regclass)
			   OR c.oid IN (SELECT indexrelid FROM pg_index
			                WHERE indrelid IN ('attempts'::regclass, 'generations'::regclass, 'catalog'::regclass))`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		for rows.Next() {
			var name string
			var node int64
			if err := rows.Scan(&name, &node); err != nil {
				t.Fatal(err)
			}
			out[name] = uint32(node)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := files()
	if len(before) < 8 {
		t.Fatalf("found only %v", slices.Sorted(maps.Keys(before)))
	}
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	after := files()
	for name, node := range before {
		if after[name] != node {
			t.Errorf("%s was rewritten by migration 0021 (file %d, now %d)", name, node, after[name])
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM attempts) + (SELECT count(*) FROM generations)
		+ (SELECT count(*) FROM catalog)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1500 {
		t.Errorf("%d rows after the migration, want 1500", n)
	}
}
