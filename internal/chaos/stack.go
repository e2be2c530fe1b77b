package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
)

// campaignStack is everything a campaign runs: its own PostgreSQL and
// SeaweedFS (restartable, which the shared test ones are not), a TCP proxy
// in front of the store (connection resets) behind an HTTP proxy (stalls,
// held requests, dropped answers, injected failures), one TCP proxy per
// gateway in front of PostgreSQL (a gateway cut off from its database: its
// lease renewals and session heartbeats blackholed), and the gateways; on
// the cluster stack (clusterstack.go) a standby, SeaweedFS in its parts and
// HAProxy in front of the gateways.
type campaignStack struct {
	dir       string
	bin       string
	weedBin   string
	serverKey string

	pgMu    sync.Mutex
	pg      *stack.Postgres // the primary
	pgDir   string
	pgPort  int
	adminDB string // the campaign database, straight (not through a gateway's proxy)

	// The cluster stack's standby (cluster only): pg and standby trade
	// places at every failover, their folders and ports staying.
	cluster     bool
	standby     *stack.Postgres
	standbyDir  string
	standbyPort int

	swMu    sync.Mutex
	sw      *stack.Seaweed        // weed mini (single stack)
	swc     *stack.SeaweedCluster // master, volume servers, filer, S3 (cluster only)
	swDir   string
	swPorts stack.SeaweedPorts
	store   stack.Endpoint // the store itself, with its root key (writes around the gateways)

	storeTCP *faultproxy.TCP // in front of the store, behind every gateway's HTTP proxy

	client   stack.Endpoint // the campaign's access key at the gateways (URL unset)
	gateways []*gatewayProc
	balancer *stack.HAProxy // in front of the gateways (cluster only)
	extraEnv []string
}

// gatewayProc is one gateway slot: its own proxies to the database and to the
// store (so a fault there is known to hit this gateway's requests) and its
// current process (nil while it is down).
type gatewayProc struct {
	index     int
	pgProxy   *faultproxy.TCP
	pgProxyB  *faultproxy.TCP // to the second server (cluster only)
	storeHTTP *faultproxy.HTTP
	logPath   string
	// The S3 and admin ports every process of the slot listens on (cluster
	// only, where HAProxy names them; 0: free ones at every start).
	port, adminPort int

	mu    sync.Mutex
	proc  *stack.Fencegate
	url   string
	armed string // the failpoint the running process was started with
}

// URL is the gateway's S3 endpoint, "" while it is down.
func (g *gatewayProc) URL() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.url
}

// noListenerGateway runs without the release listener, as a gateway behind
// a transaction-mode pooler does: its writers poll for released keys, and the
// others' hot keys must still reach them (lease.YieldFor; issue 27).
const noListenerGateway = 2

// campaignEnv is how every campaign gateway runs: a reconciler pass every 2 s
// and multipart Creates of unknown outcome looked for after 5 s, so that what
// the faults leave is settled within the campaign; writers wait 5 s for a
// leased key before 503 SlowDown; notifications delivered with short
// timeouts and back-offs (notifyEnv); a store silent for storeAnswerTimeout
// is given up on.
var campaignEnv = append([]string{
	"FENCEGATE_RECONCILE_INTERVAL=2s",
	"FENCEGATE_STORE_ANSWER_TIMEOUT=" + storeAnswerTimeout.String(),
	"FENCEGATE_UPLOAD_CREATE_SETTLE=5s",
	"FENCEGATE_LEASE_WAIT=5s",
}, notifyEnv...)

func startStack(ctx context.Context, dir, bin string, gateways int, extraEnv []string, cluster bool) (*campaignStack, error) {
	s := &campaignStack{dir: dir, bin: bin, extraEnv: extraEnv, cluster: cluster}
	var err error
	if s.weedBin, err = stack.EnsureWeed(ctx, os.Stderr); err != nil {
		return nil, err
	}
	s.storeKey()
	s.pgDir, s.swDir = filepath.Join(dir, "postgres"), filepath.Join(dir, "seaweedfs")
	if s.pgPort, err = stack.FreePort(); err != nil {
		return nil, err
	}
	if cluster {
		s.pgDir, s.standbyDir = filepath.Join(dir, "postgres-a"), filepath.Join(dir, "postgres-b")
		if s.standbyPort, err = stack.FreePort(); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	var pgErr, swErr error
	wg.Add(2)
	go func() { defer wg.Done(); pgErr = s.startPostgres(ctx) }()
	go func() { defer wg.Done(); swErr = s.startSeaweed(ctx) }()
	wg.Wait()
	if err := errors.Join(pgErr, swErr); err != nil {
		s.stop()
		return nil, err
	}
	if s.storeTCP, err = faultproxy.NewTCP(strings.TrimPrefix(s.store.URL, "http://")); err != nil {
		s.stop()
		return nil, err
	}
	if s.adminDB, err = stack.CreateDatabase(ctx, s.pg.URL("postgres"), "chaos"); err != nil {
		s.stop()
		return nil, err
	}
	if cluster {
		s.adminDB = withHosts(s.adminDB, "127.0.0.1:"+strconv.Itoa(s.pgPort), "127.0.0.1:"+strconv.Itoa(s.standbyPort))
	}
	s.serverKey = randomKey(64)
	env := s.serveConfig("", s.adminDB, s.store.URL).Environ()
	if out, err := stack.RunTool(ctx, bin, env, "migrate"); err != nil {
		s.stop()
		return nil, fmt.Errorf("fencegate migrate: %v\n%s", err, out)
	}
	if s.client, err = stack.CreateAccessKey(ctx, bin, env, "chaos campaign", "admin:*"); err != nil {
		s.stop()
		return nil, err
	}
	for i := range gateways {
		p, err := faultproxy.NewTCP("127.0.0.1:" + strconv.Itoa(s.pgPort))
		if err != nil {
			s.stop()
			return nil, err
		}
		sp, err := faultproxy.NewHTTP("http://" + s.storeTCP.Addr())
		if err != nil {
			p.Close()
			s.stop()
			return nil, err
		}
		g := &gatewayProc{index: i, pgProxy: p, storeHTTP: sp, logPath: filepath.Join(dir, fmt.Sprintf("gateway-%d.log", i))}
		if cluster {
			if g.pgProxyB, err = faultproxy.NewTCP("127.0.0.1:" + strconv.Itoa(s.standbyPort)); err != nil {
				p.Close()
				sp.Close()
				s.stop()
				return nil, err
			}
			g.port, _ = stack.FreePort()
			g.adminPort, _ = stack.FreePort()
		}
		s.gateways = append(s.gateways, g)
		if err := s.startGateway(ctx, g, ""); err != nil {
			s.stop()
			return nil, err
		}
	}
	if cluster {
		if err := s.startBalancer(ctx); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *campaignStack) storeKey() {
	s.store = stack.Endpoint{AccessKey: "CHAOS" + strings.ToUpper(randomKey(15)), SecretKey: randomKey(40), Region: "us-east-1"}
}

func (s *campaignStack) startPostgres(ctx context.Context) error {
	if s.cluster {
		return s.startPrimary(ctx)
	}
	pg, err := stack.StartPostgres(ctx, s.pgDir, s.pgPort, true)
	if err != nil {
		return err
	}
	s.pgMu.Lock()
	s.pg = pg
	s.pgMu.Unlock()
	return nil
}

// blackholeDB cuts gateway g off from PostgreSQL (every server) or lets it back.
func (g *gatewayProc) blackholeDB(on bool) {
	g.pgProxy.Blackhole(on)
	if g.pgProxyB != nil {
		g.pgProxyB.Blackhole(on)
	}
}

func (s *campaignStack) startSeaweed(ctx context.Context) error {
	if s.cluster {
		return s.startSeaweedCluster(ctx)
	}
	sw, err := stack.StartSeaweed(ctx, s.weedBin, s.swDir, s.swPorts, s.store.AccessKey, s.store.SecretKey)
	if err != nil {
		return err
	}
	s.swMu.Lock()
	s.sw, s.swPorts = sw, sw.Ports
	s.store.URL = sw.URL
	s.swMu.Unlock()
	return nil
}

// restartPostgres stops PostgreSQL (a fast shutdown, or a crash) and starts it
// again on the same folder and port after pause.
func (s *campaignStack) restartPostgres(ctx context.Context, crash bool, pause time.Duration) error {
	s.pgMu.Lock()
	pg := s.pg
	s.pgMu.Unlock()
	if crash {
		pg.Crash()
	} else {
		pg.Stop()
	}
	sleep(ctx, pause)
	return s.startPostgres(context.Background())
}

// restartSeaweed stops SeaweedFS (SIGTERM, or a crash) and starts it again on
// its data and ports after pause; on the cluster, its S3 gateway (restartS3).
func (s *campaignStack) restartSeaweed(ctx context.Context, crash bool, pause time.Duration) error {
	if s.cluster {
		return s.restartS3(ctx, crash, pause)
	}
	s.swMu.Lock()
	sw := s.sw
	s.swMu.Unlock()
	if crash {
		sw.Crash()
	} else {
		sw.Stop()
	}
	sleep(ctx, pause)
	return s.startSeaweed(context.Background())
}

func (s *campaignStack) serveConfig(logPath, dbURL, storeURL string) stack.ServeConfig {
	return stack.ServeConfig{
		Bin: s.bin, DatabaseURL: dbURL, ServerKey: s.serverKey,
		Store:    stack.Endpoint{URL: storeURL, AccessKey: s.store.AccessKey, SecretKey: s.store.SecretKey, Region: "us-east-1"},
		LogLevel: "warn", LogPath: logPath,
		Env: append(append([]string{}, campaignEnv...), s.extraEnv...),
	}
}

// gatewayDB is the campaign database reached through gateway g's own proxy.
func (s *campaignStack) gatewayDB(g *gatewayProc) string {
	if g.pgProxyB != nil {
		return withHosts(s.adminDB, g.pgProxy.Addr(), g.pgProxyB.Addr())
	}
	u, _ := url.Parse(s.adminDB)
	u.Host = g.pgProxy.Addr()
	return u.String()
}

// startGateway starts gateway g's process, armed with a failpoint if one is
// named (the process then dies at that step of its first write there).
func (s *campaignStack) startGateway(ctx context.Context, g *gatewayProc, failpoint string) error {
	cfg := s.serveConfig(g.logPath, s.gatewayDB(g), g.storeHTTP.URL())
	if failpoint != "" {
		cfg.Env = append(cfg.Env, "FENCEGATE_FAILPOINT="+failpoint)
	}
	if g.index == noListenerGateway {
		cfg.Env = append(cfg.Env, "FENCEGATE_LEASE_LISTEN=false")
	}
	cfg.Port, cfg.AdminPort = g.port, g.adminPort
	var (
		p   *stack.Fencegate
		err error
	)
	// The database or the store may be restarting: a gateway that cannot
	// reach them exits, and is started again.
	for try := 0; try < 10; try++ {
		if p, err = stack.StartFencegate(ctx, cfg); err == nil {
			break
		}
		sleep(ctx, time.Second)
	}
	if err != nil {
		return fmt.Errorf("gateway %d: %w", g.index, err)
	}
	g.mu.Lock()
	g.proc, g.url, g.armed = p, p.URL, failpoint
	g.mu.Unlock()
	return nil
}

// killGateway SIGKILLs gateway g's process, if it runs.
func (s *campaignStack) killGateway(g *gatewayProc) {
	g.mu.Lock()
	p := g.proc
	g.proc, g.url = nil, ""
	g.mu.Unlock()
	if p != nil {
		_ = p.Signal(syscall.SIGKILL)
		p.Exited(10 * time.Second)
		p.Stop() // reaps what is left of its process group, closes its log
	}
}

// healthy reports whether every gateway answers /readyz 200 (serving, with
// its database and store reachable) and, on the cluster, every SeaweedFS
// part runs and HAProxy sees every gateway up.
func (s *campaignStack) healthy() error {
	var errs []error
	if s.cluster {
		errs = append(errs, s.clusterHealthy())
	}
	for _, g := range s.gateways {
		g.mu.Lock()
		p := g.proc
		g.mu.Unlock()
		if p == nil {
			errs = append(errs, fmt.Errorf("gateway %d is down", g.index))
			continue
		}
		resp, err := http.Get(p.Admin + "/readyz")
		if err != nil {
			errs = append(errs, fmt.Errorf("gateway %d: %v", g.index, err))
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Errorf("gateway %d: /readyz %d", g.index, resp.StatusCode))
		}
	}
	return errors.Join(errs...)
}

func (s *campaignStack) stop() {
	s.balancer.Stop()
	for _, g := range s.gateways {
		g.mu.Lock()
		p := g.proc
		g.mu.Unlock()
		if p != nil {
			p.Stop()
		}
		g.pgProxy.Close()
		if g.pgProxyB != nil {
			g.pgProxyB.Close()
		}
		g.storeHTTP.Close()
	}
	if s.storeTCP != nil {
		s.storeTCP.Close()
	}
	s.swMu.Lock()
	s.sw.Stop()
	s.swc.Stop()
	s.swMu.Unlock()
	s.pgMu.Lock()
	s.pg.Stop()
	s.standby.Stop()
	s.pgMu.Unlock()
}

// tool runs a `fencegate` subcommand against the campaign's database and store.
func (s *campaignStack) tool(ctx context.Context, args ...string) (string, error) {
	// The audit reads the store itself, not through a fault proxy.
	env := s.serveConfig("", s.adminDB, s.store.URL).Environ()
	return stack.RunTool(ctx, s.bin, env, args...)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
