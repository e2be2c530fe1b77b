package meta

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Gateways that start together all run Migrate at once: every step must be
// applied exactly once, and every caller must come back with the full schema.
// The race lies in a window of a few milliseconds (CREATE TABLE IF NOT EXISTS
// is not safe against itself), so several fresh databases are raced on.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	admin := testenv.DatabaseURL(t) // make sure a server exists, then use databases of our own
	for round := range 8 {
		migrateRace(t, admin, fmt.Sprintf("migrate_race_%d", round))
	}
}

func migrateRace(t *testing.T, admin, name string) {
	ctx := context.Background()
	url, err := stack.CreateDatabase(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
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
	if total != len(ms) {
		t.Fatalf("steps applied across %d processes = %d, want each of the %d exactly once: %v", procs, total, len(ms), applied)
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
