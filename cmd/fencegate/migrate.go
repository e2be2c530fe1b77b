package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/meta"
)

func cmdMigrate(ctx context.Context, args []string) error {
	f := newFlags("migrate")
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
