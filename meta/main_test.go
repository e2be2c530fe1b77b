package meta

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// migratedPool is a pool on this package's database with every migration applied.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := Open(ctx, testenv.DatabaseURL(t), PoolConfig{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
