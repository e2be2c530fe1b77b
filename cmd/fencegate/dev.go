package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

const devUsage = `usage: fencegate dev <run|cluster|exec|stores>

  run [--dir D]       PostgreSQL + SeaweedFS + the gateway, data kept in D (default ./.fencegate);
                      prints the endpoint and a key pair, writes D/env; Ctrl-C stops everything
  cluster [--dir D]   the production-shaped stack (docs/SCALING.md): PostgreSQL primary and
                      synchronous standby, SeaweedFS master, 3 volume servers, filer and S3,
                      3 gateways behind HAProxy; data in D/cluster, writes D/env like run
  exec -- CMD ARGS    start a throwaway PostgreSQL cluster and SeaweedFS, run CMD with
                      DATABASE_URL and FENCEGATE_TEST_* set, stop them when CMD ends
  stores              build the pinned SeaweedFS and versitygw into the cache (once per machine)
`

const devRunUsage = `usage: fencegate dev run [flags]

PostgreSQL, SeaweedFS and the gateway on this machine (behind make run). The
env file it writes sets what every fencegate command needs for this stack:
source it, and audit, status, keys, catalog import and migrate need no flag.
The gateway takes every setting of fencegate serve, as a flag or a FENCEGATE_*
variable, but the database, the server key and the store: the stack's own.
`

func cmdDev(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, devUsage)
		return errors.New("missing subcommand")
	}
	if isHelp(args[0]) {
		// dev run and dev cluster are the ones with flags.
		fmt.Fprint(os.Stderr, devUsage+"\n")
		if err := devCluster(ctx, args[:1]); !errors.Is(err, flag.ErrHelp) {
			return err
		}
		return devRun(ctx, args[:1])
	}
	switch args[0] {
	case "run":
		return devRun(ctx, args[1:])
	case "cluster":
		return devCluster(ctx, args[1:])
	case "exec":
		return devExec(ctx, args[1:])
	case "stores":
		if _, err := stack.EnsureWeed(ctx, os.Stderr); err != nil {
			return err
		}
		_, err := stack.EnsureVersitygw(ctx, os.Stderr)
		return err
	}
	fmt.Fprint(os.Stderr, devUsage)
	return fmt.Errorf("unknown subcommand %q", args[0])
}

// devState is what must survive restarts of `make run`: keys and ports.
type devState struct {
	ServerKey    string             `json:"server_key"`
	StoreAccess  string             `json:"store_access_key"`
	StoreSecret  string             `json:"store_secret_key"`
	AccessKey    string             `json:"access_key"`
	SecretKey    string             `json:"secret_key"`
	GatewayPort  int                `json:"gateway_port"`
	AdminPort    int                `json:"admin_port"`
	PostgresPort int                `json:"postgres_port"`
	SeaweedPorts stack.SeaweedPorts `json:"seaweed_ports"`
}

func loadDevState(path string) (*devState, error) {
	st := &devState{}
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, st); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	if st.ServerKey == "" {
		st.ServerKey = meta.NewServerKey()
		st.StoreAccess, st.StoreSecret = meta.NewKeyPair("FGSTORE")
		st.AccessKey, st.SecretKey = meta.NewKeyPair("FGDEV")
	}
	st.GatewayPort = portOr(st.GatewayPort, 9000)
	st.AdminPort = portOr(st.AdminPort, 9001)
	st.PostgresPort = portOr(st.PostgresPort, 0)
	// weed's ports are only remembered; StartSeaweed fills in any left at zero.
	p := &st.SeaweedPorts
	for _, f := range []*int{&p.S3, &p.Master, &p.MasterGRPC, &p.Filer, &p.FilerGRPC, &p.Volume, &p.VolumeGRPC, &p.S3GRPC, &p.Admin, &p.AdminGRPC} {
		if *f != 0 && !stack.PortFree(*f) {
			*f = 0
		}
	}
	return st, nil
}

// portOr keeps a remembered port while it is free, else tries preferred, else
// takes any free one.
func portOr(remembered, preferred int) int {
	for _, p := range []int{remembered, preferred} {
		if p != 0 && stack.PortFree(p) {
			return p
		}
	}
	p, err := stack.FreePort()
	if err != nil {
		return 0
	}
	return p
}

// dieWithParent asks the kernel to send this process SIGTERM when its parent
// dies, so `make run` killed by SIGTERM (which make does not pass on) still
// stops the whole stack.
func dieWithParent() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0)
	if os.Getppid() == 1 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}

func devRun(ctx context.Context, args []string) error {
	f := newFlags("dev run", devRunUsage)
	var dir string
	f.String(&dir, "dir", "FENCEGATE_DEV_DIR", ".fencegate", "folder for the stack's data, state and env file")
	var cfg serveConfig
	cfg.defineFlags(f, false)
	for name, def := range devDefaults {
		f.defaults[name] = def // as -h and docs/FLAGS.md show them
	}
	if err := f.Parse(args); err != nil {
		return err
	}
	dieWithParent()
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	// Everything this process and the stores it starts create is the starting
	// user's alone (SeaweedFS would write its files 0644).
	syscall.Umask(0o077)
	if err := stack.MakePrivateDir(dir); err != nil {
		return err
	}
	unlock, err := stack.LockDir(dir, "fencegate dev run", filepath.Join(dir, "env"))
	if err != nil {
		return err
	}
	defer unlock()
	if pid := stack.DirHolder(filepath.Join(dir, "cluster")); pid != 0 {
		fmt.Fprintf(os.Stderr, "note: fencegate dev cluster (pid %d) also serves from %s and goes on serving; %s will name this stack, also after it stops\n",
			pid, dir, filepath.Join(dir, "env"))
	}
	statePath := filepath.Join(dir, "state.json")
	st, err := loadDevState(statePath)
	if err != nil {
		return err
	}
	weed, err := stack.EnsureWeed(ctx, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "starting PostgreSQL ...")
	pg, err := stack.StartPostgres(ctx, filepath.Join(dir, "postgres"), st.PostgresPort, true)
	if err != nil {
		return err
	}
	defer pg.Stop()
	fmt.Fprintln(os.Stderr, "starting SeaweedFS ...")
	sw, err := stack.StartSeaweed(ctx, weed, filepath.Join(dir, "seaweedfs"), st.SeaweedPorts, st.StoreAccess, st.StoreSecret, stack.SeaweedHTTPClosed())
	if err != nil {
		return err
	}
	defer sw.Stop()
	st.SeaweedPorts = sw.Ports
	if err := writeJSON(statePath, st); err != nil {
		return err
	}
	dbURL, err := ensureDevDatabase(ctx, pg, st)
	if err != nil {
		return err
	}
	devStack(&cfg, f, st, dbURL, sw.URL)
	return runServe(ctx, cfg, func(s3Addr, adminAddr string) {
		endpoint := "http://" + s3Addr
		// FENCEGATE_SERVER_KEY lets `fencegate keys` work on this stack's database
		// with nothing but the env file sourced; the store's own key lets an
		// operator write around the gateway on purpose (a backfill, a test of
		// convergence).
		envPath := filepath.Join(dir, "env")
		if err := writeDevEnv(envPath, endpoint, "http://"+adminAddr, sw.URL, dbURL, st); err != nil {
			fmt.Fprintf(os.Stderr, "write %s: %v\n", envPath, err)
		}
		fmt.Printf(`
fencegate is up.
  S3 endpoint:  %s
  access key:   %s
  secret key:   %s
  region:       us-east-1
  health:       http://%s/healthz   metrics: http://%s/metrics
  console:      http://%s/console/
  database:     %s
  data:         %s (private: folders 0700, files 0600)

  source %s
  aws --endpoint-url "$FENCEGATE_ENDPOINT" s3 ls

Ctrl-C stops the gateway, SeaweedFS and PostgreSQL.
`, endpoint, st.AccessKey, st.SecretKey, adminAddr, adminAddr, adminAddr, dbURL, dir, envPath)
	})
}

// writeDevEnv writes the env file `make run` and `make cluster` leave for
// `source`: the same variables from either stack.
func writeDevEnv(path, endpoint, admin, storeURL, dbURL string, st *devState) error {
	env := fmt.Sprintf("export FENCEGATE_ENDPOINT=%s\nexport AWS_ACCESS_KEY_ID=%s\nexport AWS_SECRET_ACCESS_KEY=%s\nexport AWS_DEFAULT_REGION=us-east-1\nexport AWS_REGION=us-east-1\nexport FENCEGATE_ADMIN_ENDPOINT=%s\nexport FENCEGATE_STORE_ENDPOINT=%s\nexport FENCEGATE_STORE_ACCESS_KEY_ID=%s\nexport FENCEGATE_STORE_SECRET_ACCESS_KEY=%s\nexport FENCEGATE_STORE_REGION=us-east-1\nexport DATABASE_URL='%s'\nexport FENCEGATE_SERVER_KEY=%s\n",
		endpoint, st.AccessKey, st.SecretKey, admin, storeURL, st.StoreAccess, st.StoreSecret, dbURL, st.ServerKey)
	return stack.WritePrivateFile(path, []byte(env))
}

// devDefaults are the settings devStack decides unless they are set.
var devDefaults = map[string]string{"listen": "127.0.0.1:9000, or a free port (state.json)",
	"admin-listen": "127.0.0.1:9001, or a free port (state.json)", "domains": "localhost", "shutdown-grace": "10s"}

// devStack fills in what dev run's stack decides: its database, server key
// and store, and, unless set by flag or variable, the stack's own ports, a
// short shutdown grace and virtual-host addressing on localhost. The rest is
// serve's, FENCEGATE_* settings included.
func devStack(c *serveConfig, f envFlags, st *devState, dbURL, storeURL string) {
	c.DatabaseURL, c.ServerKey = dbURL, st.ServerKey
	c.Store = storeConfig{Endpoint: storeURL, AccessKey: st.StoreAccess, SecretKey: st.StoreSecret, Region: "us-east-1"}
	// One server by design: its commits wait for no standby.
	c.AcceptAsyncReplication = true
	for _, d := range []struct {
		flag  string
		value *string
		dev   string
	}{{"listen", &c.Listen, "127.0.0.1:" + strconv.Itoa(st.GatewayPort)}, {"admin-listen", &c.AdminListen, "127.0.0.1:" + strconv.Itoa(st.AdminPort)},
		{"domains", &c.Domains, "localhost"}} {
		if !f.given(d.flag) {
			*d.value = d.dev
		}
	}
	if !f.given("shutdown-grace") {
		c.ShutdownGrace = 10 * time.Second
	}
}

// ensureDevDatabase creates the fencegate database on first start, migrates it,
// and stores the development key with every permission.
func ensureDevDatabase(ctx context.Context, pg *stack.Postgres, st *devState) (string, error) {
	admin, err := meta.Open(ctx, pg.URL("postgres"), meta.PoolConfig{MaxConns: 1})
	if err != nil {
		return "", err
	}
	var exists bool
	err = admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'fencegate')`).Scan(&exists)
	if err == nil && !exists {
		_, err = admin.Exec(ctx, `CREATE DATABASE fencegate`)
	}
	admin.Close()
	if err != nil {
		return "", err
	}
	url := pg.URL("fencegate")
	return url, prepareDevDatabase(ctx, url, st)
}

// prepareDevDatabase migrates the database at url and stores the
// development key with every permission unless it is there.
func prepareDevDatabase(ctx context.Context, url string, st *devState) error {
	pool, err := meta.Open(ctx, url, meta.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := meta.Migrate(ctx, pool); err != nil {
		return err
	}
	key, _ := meta.ParseServerKey(st.ServerKey)
	sealer, err := meta.NewSealer(key)
	if err != nil {
		return err
	}
	keys := &meta.Keys{Pool: pool, Sealer: sealer}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM access_keys WHERE access_key_id = $1`, st.AccessKey).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		all := []meta.Grant{{Bucket: meta.AllBuckets, Permission: meta.PermRead}, {Bucket: meta.AllBuckets, Permission: meta.PermWrite}, {Bucket: meta.AllBuckets, Permission: meta.PermAdmin}}
		if err := keys.Import(ctx, st.AccessKey, st.SecretKey, "make run development key", all); err != nil {
			return err
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return stack.WritePrivateFile(path, b)
}

// devExec runs a command (the test suite) against a throwaway stack.
func devExec(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New("usage: fencegate dev exec -- CMD [ARGS]")
	}
	weed, err := stack.EnsureWeed(ctx, os.Stderr)
	if err != nil {
		return err
	}
	versitygw, err := stack.EnsureVersitygw(ctx, os.Stderr)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "fencegate-run-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Private to this user, yet enterable by the user PostgreSQL runs as.
	if err := stack.MakePrivateDir(tmp); err != nil {
		return err
	}
	pg, err := stack.StartPostgres(ctx, filepath.Join(tmp, "postgres"), 0, false)
	if err != nil {
		return err
	}
	defer pg.Stop()
	access, secret := meta.NewKeyPair("FGTEST")
	sw, err := stack.StartSeaweed(ctx, weed, filepath.Join(tmp, "seaweedfs"), stack.SeaweedPorts{}, access, secret, stack.SeaweedHTTPClosed())
	if err != nil {
		return err
	}
	defer sw.Stop()
	fmt.Fprintf(os.Stderr, "dev exec: PostgreSQL on port %d, SeaweedFS S3 at %s\n", pg.Port, sw.URL)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		stack.EnvDatabaseURL+"="+pg.URL("postgres"),
		stack.EnvS3Endpoint+"="+sw.URL,
		stack.EnvS3AccessKey+"="+access,
		stack.EnvS3SecretKey+"="+secret,
		"FENCEGATE_WEED="+weed,
		"FENCEGATE_VERSITYGW="+versitygw,
	)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitCode(ee.ExitCode())
	}
	return err
}
