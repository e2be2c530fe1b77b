package wiring

import (
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// GatewayID names this process on the attempts it records.
func GatewayID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), lease.NewID()[:8])
}

// Protocol builds the write protocol's lease manager and the catalog it runs on, on pool.
func Protocol(pool *pgxpool.Pool, cfg lease.Config) (*lease.Manager, *meta.Catalog) {
	if cfg.Gateway == "" {
		cfg.Gateway = GatewayID()
	}
	catalog := &meta.Catalog{Pool: pool}
	m := lease.NewManager(cfg, catalog, nil)
	// The catalog's group commit waits for the commits of writes holding
	// leases when there are many (meta/batch.go).
	catalog.WritesInFlight = m.HeldLeases
	return m, catalog
}
