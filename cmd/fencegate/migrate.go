package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/meta"
)

const migrateUsage = `usage: fencegate migrate [flags]

Applies the database migrations the binary carries that the database lacks,
and prints the schema version. Run it before starting gateways of a new
version (docs/OPERATING.md, "Upgrades and migrations").
`

func cmdMigrate(ctx context.Context, args []string) error {
	f := newFlags("migrate", migrateUsage)
	var dbURL string
	f.database(&dbURL)
	if err := f.Parse(args); err != nil {
		return err
	}
	pool, err := meta.Open(ctx, dbURL, meta.PoolConfig{MaxConns: 2, ConnectTimeout: 10 * time.Second, ApplicationName: "fencegate migrate"})
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := meta.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	v, err := meta.SchemaVersion(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Printf("applied %d migration(s) %v; schema version %d\n", len(applied), applied, v)
	return nil
}
