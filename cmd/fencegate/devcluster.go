package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fencegate/fencegate/internal/stack"
)

const devClusterUsage = `usage: fencegate dev cluster [flags]

The production-shaped stack on this machine (behind make cluster,
docs/SCALING.md): a PostgreSQL primary and a synchronous standby, SeaweedFS
as master, three volume servers, filer and S3 gateway, the gateways behind
HAProxy. It writes the same env file as dev run.
`

// devCluster runs the cluster stack (internal/stack.StartCluster,
// docs/SCALING.md) until Ctrl-C: the same keys, env file and clean stop as
// `dev run`, its data in DIR/cluster beside `dev run`'s.
func devCluster(ctx context.Context, args []string) error {
	f := newFlags("dev cluster", devClusterUsage)
	var dir string
	f.String(&dir, "dir", "FENCEGATE_DEV_DIR", ".fencegate", "folder for the env file; the stack's data and state go in its cluster/")
	var logLevel string
	f.String(&logLevel, "log-level", "FENCEGATE_LOG_LEVEL", "info", "gateway log level")
	var gateways int
	f.Int(&gateways, "gateways", "FENCEGATE_CLUSTER_GATEWAYS", 3, "fencegate serve processes behind HAProxy")
	if err := f.Parse(args); err != nil {
		return err
	}
	dieWithParent()
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	syscall.Umask(0o077)
	data := filepath.Join(dir, "cluster")
	if err := stack.MakePrivateDir(dir); err != nil {
		return err
	}
	if err := stack.MakePrivateDir(data); err != nil {
		return err
	}
	unlock, err := stack.LockDir(data, "fencegate dev cluster", filepath.Join(dir, "env"))
	if err != nil {
		return err
	}
	defer unlock()
	if pid := stack.DirHolder(dir); pid != 0 {
		fmt.Fprintf(os.Stderr, "note: fencegate dev run (pid %d) also serves from %s and goes on serving; %s will name this cluster, also after it stops (`make run` again writes its own)\n",
			pid, dir, filepath.Join(dir, "env"))
	}
	statePath := filepath.Join(data, "state.json")
	st, err := loadDevState(statePath)
	if err != nil {
		return err
	}
	if err := writeJSON(statePath, st); err != nil {
		return err
	}
	weed, err := stack.EnsureWeed(ctx, os.Stderr)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "starting PostgreSQL primary and standby, SeaweedFS, gateways and HAProxy ...")
	c, err := stack.StartCluster(ctx, stack.ClusterConfig{
		Dir: data, FencegateBin: self, WeedBin: weed, Gateways: gateways, Durable: true,
		ServerKey: st.ServerKey, StoreAccess: st.StoreAccess, StoreSecret: st.StoreSecret,
		Port: st.GatewayPort, PostgresPorts: [2]int{st.PostgresPort, 0}, LogLevel: logLevel,
		Prepare: func(ctx context.Context, url string) error { return prepareDevDatabase(ctx, url, st) },
		// As `dev run`'s gateway: virtual-host addressing under localhost.
		GatewayEnv: []string{"FENCEGATE_DOMAINS=localhost"},
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	admin := c.Gateways[0].Admin
	envPath := filepath.Join(dir, "env")
	if err := writeDevEnv(envPath, c.Balancer.URL, admin, c.Store.URL, c.DatabaseURL, st); err != nil {
		return fmt.Errorf("write %s: %w", envPath, err)
	}
	fmt.Printf(`
fencegate's cluster stack is up.
  S3 endpoint:  %s (HAProxy over %d gateways, health-checked on /readyz)
  access key:   %s
  secret key:   %s
  region:       us-east-1
  gateways:     `, c.Balancer.URL, len(c.Gateways), st.AccessKey, st.SecretKey)
	for i, g := range c.Gateways {
		if i > 0 {
			fmt.Print("                ")
		}
		fmt.Printf("%s (admin %s)\n", g.URL, g.Admin)
	}
	fmt.Printf(`  PostgreSQL:   primary port %d, synchronous standby port %d
  SeaweedFS:    S3 %s (master, %d volume servers, filer)
  data, logs:   %s

  source %s
  aws --endpoint-url "$FENCEGATE_ENDPOINT" s3 ls

Ctrl-C stops everything.
`, c.Primary.Port, c.Standby.Port, c.Store.URL, len(c.Store.Volumes), data, envPath)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "stopping ...")
	return nil
}
