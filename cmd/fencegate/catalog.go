package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/internal/wiring"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
	"github.com/fencegate/fencegate/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

const catalogUsage = `usage: fencegate catalog import [flags] BUCKET

Records in the catalog every object BUCKET already holds (each key is settled
under its lease, as a writer would: a HEAD attributes its bytes), then marks
the bucket complete, so later first writes to new keys need no HEAD.
`

func cmdCatalog(ctx context.Context, args []string) error {
	// `catalog -h` is `catalog import -h`: import is its one subcommand.
	if len(args) > 0 && isHelp(args[0]) {
		args = append([]string{"import"}, args...)
	}
	if len(args) == 0 || args[0] != "import" {
		fmt.Fprint(os.Stderr, catalogUsage)
		return errors.New("missing subcommand: fencegate catalog import BUCKET")
	}
	var cfg serveConfig
	f := newFlags("catalog import", catalogUsage)
	workers := 16
	f.IntVar(&workers, "workers", 16, "keys settled at once")
	f.database(&cfg.DatabaseURL)
	f.store(&cfg.Store)
	cfg.defineLease(f)
	if err := f.Parse(args[1:]); err != nil {
		return err
	}
	if f.NArg() != 1 {
		return errors.New("name one bucket: fencegate catalog import [flags] BUCKET (-h lists the flags)")
	}
	bucket := f.Arg(0)
	if err := cfg.validateLease(); err != nil {
		return err
	}
	tool, err := openTool(ctx, cfg, int32(workers+2), "fencegate catalog import")
	if err != nil {
		return err
	}
	defer tool.close()
	st, leases, catalog := tool.store, tool.leases, tool.catalog
	// Its leases belong to a session of its own, like a gateway's: if the
	// import dies, its keys are free once the session expires.
	if err := leases.StartSession(ctx); err != nil {
		return fmt.Errorf("open a session: %w", err)
	}
	defer func() { _ = leases.EndSession(context.Background()) }()
	settler := st
	var settled, failed atomic.Int64
	start := time.Now()
	err = st.ListKeys(ctx, bucket, func(keys []string) error {
		// A failed key does not stop the others: the batch is settled whole and
		// the first failure returned, so no context is derived from the group.
		var g errgroup.Group
		g.SetLimit(workers)
		for _, k := range keys {
			g.Go(func() error {
				if err := leases.SettleKey(ctx, bucket, k, settler, true); err != nil {
					failed.Add(1)
					return fmt.Errorf("%s: %w", shown(k), err)
				}
				settled.Add(1)
				return nil
			})
		}
		return g.Wait()
	})
	if err != nil {
		return fmt.Errorf("import stopped after %d keys (%d failed): %w", settled.Load(), failed.Load(), err)
	}
	if err := catalog.MarkBucket(ctx, bucket, true); err != nil {
		return err
	}
	fmt.Printf("imported %d keys of %s in %s; the bucket is marked complete\n", settled.Load(), bucket, time.Since(start).Round(time.Millisecond))
	return nil
}

// tool is what the one-shot commands that settle keys (catalog import, audit)
// open: the migrated database, the store client and the write protocol on them.
type tool struct {
	pool    *pgxpool.Pool
	store   *store.Client
	leases  *lease.Manager
	catalog *meta.Catalog
}

func openTool(ctx context.Context, cfg serveConfig, maxConns int32, name string) (*tool, error) {
	pool, err := meta.Open(ctx, cfg.DatabaseURL, meta.PoolConfig{MaxConns: maxConns, ApplicationName: name})
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	st, err := store.New(cfg.store())
	if err != nil {
		pool.Close()
		return nil, err
	}
	leases, catalog := wiring.Protocol(pool, cfg.Lease)
	return &tool{pool: pool, store: st, leases: leases, catalog: catalog}, nil
}

func (t *tool) close() { t.pool.Close() }
