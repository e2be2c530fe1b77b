package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The cluster stack (docs/SCALING.md): fencegate in the shape it is run in
// production, on one machine. A PostgreSQL primary with a streaming standby
// (synchronous unless AsyncStandby), SeaweedFS as separate master, volume
// servers, filer and S3 gateway, several `fencegate serve` processes on the
// primary and standby through one multi-host URL, and HAProxy in front of
// them, health-checking each on /readyz, as the S3 endpoint.

// StandbyName is the standby's application_name, which the primary's
// synchronous_standby_names names.
const StandbyName = "fencegate_standby"

// ClusterConfig describes a cluster stack.
type ClusterConfig struct {
	Dir           string // data: Dir/postgres-a, postgres-b, seaweedfs, gateway-N.log, haproxy.cfg
	FencegateBin  string
	WeedBin       string
	Gateways      int // `fencegate serve` processes (default 3)
	VolumeServers int // SeaweedFS volume servers (default 3)
	// AsyncStandby replicates asynchronously: the primary acknowledges a
	// commit before the standby has it (what that can lose: docs/SCALING.md).
	AsyncStandby bool
	// Durable keeps fsync on (a developer's stack); tests turn it off.
	// Commits wait for the standby either way.
	Durable       bool
	ServerKey     string
	StoreAccess   string // the store's root key pair
	StoreSecret   string
	Port          int    // HAProxy's S3 port (0: a free one)
	PostgresPorts [2]int // primary's and standby's ports (0: free ones)
	LogLevel      string
	// Prepare runs once both servers are up, before any gateway starts,
	// with the database's multi-host URL: it migrates and stores keys
	// (this package knows no schema).
	Prepare func(ctx context.Context, databaseURL string) error
	// GatewayEnv is added to every gateway's environment.
	GatewayEnv []string
	// ExternalStore, when set, is the store the gateways use instead of a
	// SeaweedFS cluster of their own (tests of the database's failover).
	ExternalStore *Endpoint
}

// Cluster is a running cluster stack.
type Cluster struct {
	Primary     *Postgres // the server accepting writes
	Standby     *Postgres // nil from a failover until RebuildStandby
	Store       *SeaweedCluster
	Gateways    []*Fencegate
	Balancer    *HAProxy
	DatabaseURL string // database "fencegate" on both servers, target_session_attrs=read-write
	cfg         ClusterConfig
	store       Endpoint  // the gateways' store
	lost        *Postgres // the primary a failover left dead, for RebuildStandby
}

// Endpoint is the S3 endpoint (the balancer) with key pair k.
func (c *Cluster) Endpoint(accessKey, secretKey string) Endpoint {
	return Endpoint{URL: c.Balancer.URL, AccessKey: accessKey, SecretKey: secretKey, Region: "us-east-1"}
}

// StartCluster starts every part, in dependency order, and stops what it
// started if a later part fails.
func StartCluster(ctx context.Context, cfg ClusterConfig) (c *Cluster, err error) {
	if cfg.Gateways == 0 {
		cfg.Gateways = 3
	}
	if cfg.VolumeServers == 0 {
		cfg.VolumeServers = 3
	}
	if err := MakePrivateDir(cfg.Dir); err != nil {
		return nil, err
	}
	c = &Cluster{cfg: cfg}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	syncName := StandbyName
	if cfg.AsyncStandby {
		syncName = ""
	}
	primaryDir, standbyDir := c.serverDirs()
	if c.Primary, err = StartPostgres(ctx, primaryDir, cfg.PostgresPorts[0], cfg.Durable, PrimarySettings(syncName)...); err != nil {
		return c, err
	}
	// The standby is rebuilt from the primary at every start: after a
	// failover the old primary's folder holds a timeline the promoted one
	// left, and a fresh base backup of a small database takes a second.
	if err = os.RemoveAll(standbyDir); err != nil {
		return c, err
	}
	if c.Standby, err = StartStandby(ctx, c.Primary, standbyDir, cfg.PostgresPorts[1], StandbyName, cfg.Durable); err != nil {
		return c, err
	}
	if err = c.Primary.WaitStreaming(ctx, StandbyName, 60*time.Second); err != nil {
		return c, err
	}
	if err = ensureDatabase(ctx, c.Primary, "fencegate"); err != nil {
		return c, err
	}
	c.DatabaseURL = MultiHostURL("fencegate", c.Primary, c.Standby)
	if cfg.Prepare != nil {
		if err = cfg.Prepare(ctx, c.DatabaseURL); err != nil {
			return c, err
		}
	}
	store := cfg.ExternalStore
	if store == nil {
		if c.Store, err = StartSeaweedCluster(ctx, cfg.WeedBin, filepath.Join(cfg.Dir, "seaweedfs"), cfg.VolumeServers, cfg.StoreAccess, cfg.StoreSecret); err != nil {
			return c, err
		}
		store = &c.Store.Endpoint
	}
	c.store = *store
	backends := make([]HAProxyBackend, cfg.Gateways)
	for i := range backends {
		g, err := StartFencegate(ctx, c.serveConfig(i))
		if err != nil {
			return c, fmt.Errorf("gateway %d: %w", i+1, err)
		}
		c.Gateways = append(c.Gateways, g)
		backends[i] = HAProxyBackend{Name: "gw" + strconv.Itoa(i+1), S3: g.URL, Admin: g.Admin}
	}
	if c.Balancer, err = StartHAProxy(ctx, cfg.Dir, cfg.Port, backends); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) serveConfig(i int) ServeConfig {
	return ServeConfig{
		Bin: c.cfg.FencegateBin, DatabaseURL: c.DatabaseURL, ServerKey: c.cfg.ServerKey,
		Store:    c.store,
		LogLevel: c.cfg.LogLevel, LogPath: filepath.Join(c.cfg.Dir, "gateway-"+strconv.Itoa(i+1)+".log"),
		Env: c.cfg.GatewayEnv, Ready: "/readyz",
	}
}

// serverDirs are the primary's and the standby's folders: postgres-a,
// unless postgres-b was promoted since (a failover, by Failover or by hand
// with pg_ctl promote): then it is no standby and is on a later timeline.
func (c *Cluster) serverDirs() (primary, standby string) {
	a, b := filepath.Join(c.cfg.Dir, "postgres-a"), filepath.Join(c.cfg.Dir, "postgres-b")
	if _, err := os.Stat(filepath.Join(b, "standby.signal")); errors.Is(err, os.ErrNotExist) && timeline(b) > timeline(a) {
		return b, a
	}
	return a, b
}

// timeline is the cluster in dir's timeline (pg_controldata; 0 if none):
// every promotion starts a new one.
func timeline(dir string) int {
	bin, err := postgresBin("pg_controldata")
	if err != nil {
		return 0
	}
	out, err := exec.Command(bin, "-D", dir).Output()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "Latest checkpoint's TimeLineID:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// Failover kills the primary (SIGKILL, a power cut) and promotes the
// standby, which becomes Primary; Standby is nil afterwards. It returns when
// the promoted server accepts writes.
func (c *Cluster) Failover(ctx context.Context) error { return c.FailoverAfter(ctx, 0) }

// FailoverAfter is Failover with the promotion delay after the primary's
// death: the time a failover manager takes to decide, during which no
// server accepts writes.
func (c *Cluster) FailoverAfter(ctx context.Context, delay time.Duration) error {
	c.Primary.Crash()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(delay):
	}
	if err := c.Standby.Promote(ctx); err != nil {
		return err
	}
	c.Primary, c.Standby, c.lost = c.Standby, nil, c.Primary
	return nil
}

// RebuildStandby makes the primary a failover left dead the new standby:
// a fresh base backup of the promoted primary into its folder, started on
// its old port (so the gateways' multi-host URL names it still), and, unless
// the cluster is asynchronous, the promoted primary's commits then wait for
// it. A later Failover fails back.
func (c *Cluster) RebuildStandby(ctx context.Context) error {
	if c.lost == nil || c.Standby != nil {
		return fmt.Errorf("no failed primary to rebuild")
	}
	dir, port := c.lost.Dir, c.lost.Port
	c.lost.Stop()
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	sb, err := StartStandby(ctx, c.Primary, dir, port, StandbyName, c.cfg.Durable)
	if err != nil {
		return err
	}
	c.Standby, c.lost = sb, nil
	if err := c.Primary.WaitStreaming(ctx, StandbyName, 60*time.Second); err != nil {
		return err
	}
	if c.cfg.AsyncStandby {
		return nil
	}
	return c.Primary.SetSyncStandby(ctx, StandbyName)
}

// Stop stops everything, the balancer first and PostgreSQL last.
func (c *Cluster) Stop() {
	if c == nil {
		return
	}
	c.Balancer.Stop()
	stopAll(c.Gateways, (*Fencegate).Stop)
	c.Store.Stop()
	c.Standby.Stop()
	c.Primary.Stop()
	c.lost.Stop()
}

// stopAll runs stop on every part at once and waits for all.
func stopAll[T any](parts []T, stop func(T)) {
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop(p)
		}()
	}
	wg.Wait()
}

// WaitStreaming waits until the standby named name streams from this
// server (pg_stat_replication); a synchronous one's commits are then
// acknowledged.
func (pg *Postgres) WaitStreaming(ctx context.Context, name string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var n int
		c, err := pgx.Connect(ctx, pg.URL("postgres"))
		if err == nil {
			err = c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, name).Scan(&n)
			c.Close(ctx)
		}
		if err == nil && n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("standby %s not streaming from port %d after %s (err %v)", name, pg.Port, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ensureDatabase creates database name on pg unless it exists.
func ensureDatabase(ctx context.Context, pg *Postgres, name string) error {
	c, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	}
	return err
}
