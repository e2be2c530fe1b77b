package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

// target is one way of reaching the store: straight, through fencegate,
// through versitygw's s3 proxy, or through a bare TCP relay (relay.go).
type target struct {
	name string
	stack.Endpoint
	pgid int // process group whose CPU counts as "the gateway" for this target
}

// benchStack is everything the benchmark starts; stop ends all of it.
type benchStack struct {
	tmp       string
	pg        *stack.Postgres
	sw        *stack.Seaweed
	vgw       *stack.Versitygw
	fg        *stack.Fencegate
	relay     *relay
	fgClient  stack.Endpoint // fencegate's S3 API and the benchmark's key
	fgEnv     []string       // fencegate's configuration, for its subcommands (`targets add`)
	fgBin     string
	pgPgid    int
	vgwPgid   int
	targets   []target
	masterURL string
	dbURL     string
	db        *pgx.Conn // counts write transactions
	floorDB   *pgx.Conn // times the two-transaction floor (floor.go), once opened
	// statements: PostgreSQL tracks every statement (-pg-statements,
	// statements.go); set before startStack.
	statements bool
}

func (s *benchStack) stop() {
	if s.db != nil {
		s.db.Close(context.Background())
	}
	if s.floorDB != nil {
		s.floorDB.Close(context.Background())
	}
	if s.fg != nil {
		s.fg.Stop()
	}
	s.relay.stop()
	s.vgw.Stop()
	s.sw.Stop()
	s.pg.Stop()
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// startStack starts PostgreSQL (durable), SeaweedFS, versitygw's s3 proxy and a
// freshly built `fencegate serve`. Partial starts are stopped by the caller via
// stop, which tolerates nil parts.
func startStack(ctx context.Context, s *benchStack, prebuilt, logLevel string) error {
	weedBin, err := stack.EnsureWeed(ctx, os.Stderr)
	if err != nil {
		return err
	}
	vgwBin, err := stack.EnsureVersitygw(ctx, os.Stderr)
	if err != nil {
		return err
	}
	if s.tmp, err = os.MkdirTemp("", "fencebench-"); err != nil {
		return err
	}
	_ = os.Chmod(s.tmp, 0o755) // PostgreSQL may run as another user
	storeKey, storeSecret := "FGBENCH"+strings.ToUpper(meta.NewServerKey()[:13]), meta.NewServerKey()[:40]

	// The gateway build, PostgreSQL and SeaweedFS start side by side.
	var wg sync.WaitGroup
	var buildErr, pgErr, swErr error
	fgBin := filepath.Join(s.tmp, "fencegate")
	wg.Add(3)
	go func() {
		defer wg.Done()
		if prebuilt != "" {
			fgBin = prebuilt
		} else {
			buildErr = stack.BuildFencegate(ctx, fgBin)
		}
	}()
	go func() {
		defer wg.Done()
		var settings []string
		if s.statements {
			settings = statementSettings
		}
		s.pg, pgErr = stack.StartPostgres(ctx, filepath.Join(s.tmp, "postgres"), 0, true, settings...)
	}()
	go func() {
		defer wg.Done()
		s.sw, swErr = stack.StartSeaweed(ctx, weedBin, filepath.Join(s.tmp, "seaweedfs"), stack.SeaweedPorts{}, storeKey, storeSecret)
	}()
	wg.Wait()
	if err := errors.Join(buildErr, pgErr, swErr); err != nil {
		return err
	}
	s.fgBin = fgBin
	s.masterURL = fmt.Sprintf("http://127.0.0.1:%d", s.sw.Ports.Master)
	s.pgPgid = childPid("postgres")

	vgwKey, vgwSecret := "FGVGW"+strings.ToUpper(meta.NewServerKey()[:15]), meta.NewServerKey()[:40]
	if s.vgw, err = stack.StartVersitygwProxy(ctx, vgwBin, s.tmp, s.sw.Endpoint, vgwKey, vgwSecret); err != nil {
		return err
	}
	s.vgwPgid = childPid("versitygw")

	if s.dbURL, err = stack.CreateDatabase(ctx, s.pg.URL("postgres"), "fencebench"); err != nil {
		return err
	}
	if s.fg, s.fgClient, s.fgEnv, err = startFencegate(ctx, fgBin, s.tmp, s.dbURL, s.sw.Endpoint, logLevel); err != nil {
		return err
	}
	if s.db, err = pgx.Connect(ctx, s.dbURL); err != nil {
		return err
	}
	if s.statements {
		if err := s.createStatementsView(ctx); err != nil {
			return err
		}
	}
	var relayEP stack.Endpoint
	if s.relay, relayEP, err = startRelay(ctx, s.sw.Endpoint); err != nil {
		return err
	}
	s.targets = []target{
		{name: "direct", Endpoint: s.sw.Endpoint, pgid: s.sw.Pid()},
		{name: "fencegate", Endpoint: s.fgClient, pgid: s.fg.Pid()},
		{name: "versitygw", Endpoint: s.vgw.Endpoint, pgid: s.vgwPgid},
		{name: relayTarget, Endpoint: relayEP, pgid: s.relay.cmd.Process.Pid},
	}
	return nil
}

// procGroups are the process groups whose CPU every cell records, and a
// counter of PostgreSQL write transactions.
type procGroups struct {
	store, db int
	xids      func() int64
}

func (s *benchStack) groups() procGroups {
	return procGroups{store: s.sw.Pid(), db: s.pgPgid, xids: s.writeTxns}
}

// writeTxns is the next PostgreSQL transaction id: only transactions that
// write (and so flush a commit record) take one.
func (s *benchStack) writeTxns() int64 {
	if s.db == nil {
		return 0
	}
	var n int64
	_ = s.db.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&n)
	return n
}

// busyCPU is the CPU seconds the whole machine has been busy (not idle or
// waiting for I/O) since boot, from /proc/stat.
func busyCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal
	var t int64
	for i, v := range f {
		if i == 0 || i == 4 || i == 5 || i > 8 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		t += n
	}
	return float64(t) / stack.ClockTick
}

// ownCPU is the CPU seconds used by everything the benchmark runs.
func (s *benchStack) ownCPU() float64 {
	t := selfCPU()
	for _, g := range []int{s.sw.Pid(), s.pgPgid, s.vgwPgid} {
		t += groupCPU(g)
	}
	if s.fg != nil {
		t += groupCPU(s.fg.Pid())
	}
	if s.relay != nil {
		t += groupCPU(s.relay.cmd.Process.Pid)
	}
	return t
}

// startFencegate migrates the benchmark's database, creates the client key
// and starts `fencegate serve` (in its own process group, whose CPU counts as
// the gateway's). It returns the process, the endpoint clients use and the
// environment its subcommands run with (`targets add`).
func startFencegate(ctx context.Context, bin, dir, dbURL string, store stack.Endpoint, logLevel string) (*stack.Fencegate, stack.Endpoint, []string, error) {
	cfg := stack.ServeConfig{
		Bin: bin, DatabaseURL: dbURL, ServerKey: meta.NewServerKey(), Store: store, LogLevel: logLevel,
		LogPath: filepath.Join(dir, "fencegate.log"), Env: []string{"FENCEGATE_MIGRATE=true"}, Ready: "/readyz",
	}
	env := cfg.Environ()
	// The client key: `fencegate migrate`, then `fencegate keys create`.
	if out, err := stack.RunTool(ctx, bin, env, "migrate"); err != nil {
		return nil, stack.Endpoint{}, nil, fmt.Errorf("fencegate migrate: %v\n%s", err, out)
	}
	ep, err := stack.CreateAccessKey(ctx, bin, env, "fencebench", "admin:*")
	if err != nil {
		return nil, stack.Endpoint{}, nil, err
	}
	// The reservation cell's quota account (reserve.go), far from its limit.
	if out, err := stack.RunTool(ctx, bin, env, "quota", "set", benchAccount, "--bytes", "1099511627776"); err != nil {
		return nil, stack.Endpoint{}, nil, fmt.Errorf("fencegate quota set: %v\n%s", err, out)
	}
	fg, err := stack.StartFencegate(ctx, cfg)
	if err != nil {
		return nil, stack.Endpoint{}, nil, err
	}
	ep.URL = fg.URL
	return fg, ep, env, nil
}

// childPid finds this process's direct child whose command name is comm (the
// stack helpers do not expose every child's pid).
func childPid(comm string) int {
	me := os.Getpid()
	for _, p := range stack.Processes() {
		if p.PPid == me && p.Comm == comm {
			return p.Pid
		}
	}
	return 0
}

// groupCPU is the CPU seconds used so far by the processes of group pgid
// and their direct children (stack.GroupCPU).
func groupCPU(pgid int) float64 {
	u, sys := stack.GroupCPU(pgid)
	return u + sys
}

// vacuum asks SeaweedFS to compact overwritten objects between rounds, so
// repeated PUTs do not fill the disk. Outside any measurement.
func (s *benchStack) vacuum(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.masterURL+"/vol/vacuum?garbageThreshold=0.05", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "warning: SeaweedFS vacuum: %v\n", err)
		return
	}
	resp.Body.Close()
}
