package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
)

// The cluster stack's parts (Config.Cluster, `make chaos CHAOS_STACK=cluster`):
// PostgreSQL as a primary with a synchronous standby, SeaweedFS as its
// operators run it (a master, three volume servers with replication 001, a
// filer and the S3 gateway, each its own process), and HAProxy in front of
// the gateways, which a share of the clients send through.

// clusterVolumes is how many volume servers the cluster's SeaweedFS runs:
// with replication 001 every object has a second copy on another one.
const clusterVolumes = 3

// startPrimary (re)starts the cluster's primary, synchronous to the
// standby, and on first start the standby too.
func (s *campaignStack) startPrimary(ctx context.Context) error {
	s.pgMu.Lock()
	dir, port := s.pgDir, s.pgPort
	if s.pg != nil {
		dir, port = s.pg.Dir, s.pg.Port
	}
	s.pgMu.Unlock()
	pg, err := stack.StartPostgres(ctx, dir, port, true, stack.PrimarySettings(stack.StandbyName)...)
	if err != nil {
		return err
	}
	s.pgMu.Lock()
	s.pg = pg
	first := s.standby == nil
	s.pgMu.Unlock()
	if !first {
		return nil
	}
	sb, err := stack.StartStandby(ctx, pg, s.standbyDir, s.standbyPort, stack.StandbyName, true)
	if err != nil {
		return err
	}
	s.pgMu.Lock()
	s.standby = sb
	s.pgMu.Unlock()
	return pg.WaitStreaming(ctx, stack.StandbyName, time.Minute)
}

// failover kills the primary, promotes the standby after pause (a failover
// manager's decision), and rebuilds the dead primary as the new synchronous
// standby (a fresh base backup on its folder and port). The gateways follow
// through their multi-host URL.
func (s *campaignStack) failover(ctx context.Context, pause time.Duration) (string, error) {
	s.pgMu.Lock()
	old, sb := s.pg, s.standby
	s.pgMu.Unlock()
	if sb == nil {
		return "", errors.New("no standby")
	}
	old.Crash()
	died := time.Now()
	sleep(ctx, pause)
	if err := sb.Promote(context.Background()); err != nil {
		return "", err
	}
	promoted := time.Since(died)
	s.pgMu.Lock()
	s.pg, s.standby = sb, nil
	s.pgMu.Unlock()
	if err := os.RemoveAll(old.Dir); err != nil {
		return "", err
	}
	nsb, err := stack.StartStandby(context.Background(), sb, old.Dir, old.Port, stack.StandbyName, true)
	if err != nil {
		return "", err
	}
	s.pgMu.Lock()
	s.standby = nsb
	s.pgMu.Unlock()
	if err := sb.WaitStreaming(context.Background(), stack.StandbyName, time.Minute); err != nil {
		return "", err
	}
	if err := sb.SetSyncStandby(context.Background(), stack.StandbyName); err != nil {
		return "", err
	}
	return fmt.Sprintf("port %d promoted %s after the primary's death; port %d rebuilt as its standby", sb.Port, promoted.Round(time.Millisecond), old.Port), nil
}

// withHosts is url u with its host list replaced by hosts and
// target_session_attrs=read-write: a multi-host URL.
func withHosts(u string, hosts ...string) string {
	pu, _ := url.Parse(u)
	pu.Host = strings.Join(hosts, ",")
	q := pu.Query()
	q.Set("target_session_attrs", "read-write")
	pu.RawQuery = q.Encode()
	return pu.String()
}

// startSeaweedCluster starts the cluster's SeaweedFS: master, volume
// servers, filer and S3 gateway.
func (s *campaignStack) startSeaweedCluster(ctx context.Context) error {
	sw, err := stack.StartSeaweedCluster(ctx, s.weedBin, s.swDir, clusterVolumes, s.store.AccessKey, s.store.SecretKey)
	if err != nil {
		return err
	}
	s.swMu.Lock()
	s.swc = sw
	s.store.URL = sw.URL
	s.swMu.Unlock()
	return nil
}

// restartS3 is store-restart on the cluster: the S3 gateway process stopped
// (SIGTERM, or a crash) and started again on its port after pause; the
// master, the volume servers and the filer, where the data is, stay up (the
// other cluster faults take those down).
func (s *campaignStack) restartS3(ctx context.Context, crash bool, pause time.Duration) error {
	s.swMu.Lock()
	defer s.swMu.Unlock()
	s.swc.StopS3(crash)
	sleep(ctx, pause)
	return s.swc.StartS3(context.Background())
}

// killVolume SIGKILLs volume server i and starts it again on its folder and
// ports after pause.
func (s *campaignStack) killVolume(ctx context.Context, i int, pause time.Duration) error {
	s.swMu.Lock()
	defer s.swMu.Unlock()
	s.swc.KillVolume(i)
	sleep(ctx, pause)
	return s.swc.StartVolume(i)
}

// restartFiler stops the filer (SIGTERM, or SIGKILL if crash) and starts it
// again on its store after pause.
func (s *campaignStack) restartFiler(ctx context.Context, crash bool, pause time.Duration) error {
	s.swMu.Lock()
	defer s.swMu.Unlock()
	if crash {
		s.swc.KillFiler()
	} else {
		s.swc.StopFiler()
	}
	sleep(ctx, pause)
	return s.swc.StartFiler()
}

// backendName is gateway g's server name in HAProxy's configuration.
func backendName(g *gatewayProc) string { return "gw" + strconv.Itoa(g.index) }

// startBalancer starts HAProxy in front of every gateway, on their fixed
// ports (a gateway restarted comes back at its address, and HAProxy's
// /readyz check takes it in again).
func (s *campaignStack) startBalancer(ctx context.Context) error {
	var backends []stack.HAProxyBackend
	for _, g := range s.gateways {
		backends = append(backends, stack.HAProxyBackend{Name: backendName(g),
			S3: "http://127.0.0.1:" + strconv.Itoa(g.port), Admin: "http://127.0.0.1:" + strconv.Itoa(g.adminPort)})
	}
	h, err := stack.StartHAProxy(ctx, s.dir, 0, backends)
	if err != nil {
		return err
	}
	s.balancer = h
	return nil
}

// restartBalancer stops HAProxy (SIGTERM, its hard stop: every connection
// through it cut; or SIGKILL if crash) and starts it again on its port
// after pause.
func (s *campaignStack) restartBalancer(ctx context.Context, crash bool, pause time.Duration) error {
	if crash {
		s.balancer.Crash()
	} else {
		s.balancer.Stop()
	}
	sleep(ctx, pause)
	return s.balancer.Start(context.Background())
}

// gatewayLeases is the keys gateway process pid holds a live lease on,
// read from the catalog: its session names it ("host/PID/id", as
// wiring.GatewayID makes it) and the lease is live by fencegate's own rule.
func (c *catalog) gatewayLeases(ctx context.Context, pid int) ([]string, error) {
	rows, err := c.pool.Query(ctx, `SELECT l.bucket || '/' || l.key FROM leases l JOIN sessions s ON s.session_id = l.session
		WHERE s.gateway LIKE '%/' || $1::text || '/%' AND fencegate_lease_live(l.holder, l.expires_at, l.session)
		ORDER BY 1`, strconv.Itoa(pid))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// drain is gateway-drain: once gateway g holds at least one lease (looked
// for in the catalog for up to 15 s), it is taken out of the balancer
// (HAProxy's runtime API: state maint; requests under way finish, no new
// ones come) and put back after pause. Clients that talk to g directly keep
// doing so: the balancer's clients' writes to its keys meet its leases from
// the other gateways.
func (s *campaignStack) drain(ctx context.Context, g *gatewayProc, pause time.Duration) (string, error) {
	g.mu.Lock()
	p := g.proc
	g.mu.Unlock()
	if p == nil {
		return "gateway down: not drained", nil
	}
	db, err := openCatalog(ctx, s.adminDB)
	if err != nil {
		return "", err
	}
	defer db.close()
	var keys []string
	looked := time.Now()
	for time.Since(looked) < 15*time.Second && ctx.Err() == nil {
		if keys, err = db.gatewayLeases(ctx, p.Pid()); err == nil && len(keys) > 0 {
			break
		}
		sleep(ctx, 5*time.Millisecond)
	}
	seen := time.Now()
	if err := s.balancer.SetServerState(context.Background(), backendName(g), "maint"); err != nil {
		return "", err
	}
	held := fmt.Sprintf("holding %d leases (%s) %s before", len(keys), strings.Join(keys, " "), time.Since(seen).Round(time.Microsecond))
	if len(keys) == 0 {
		held = fmt.Sprintf("holding no lease seen in %s (last look: %v)", time.Since(looked).Round(time.Millisecond), err)
	}
	sleep(ctx, pause)
	if err := s.balancer.SetServerState(context.Background(), backendName(g), "ready"); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s out of the balancer %s, back after %s", backendName(g), held, pause), nil
}

// restoreCluster starts whatever cluster part a fault left down (one whose
// restart failed) and puts every gateway back in the balancer.
func (s *campaignStack) restoreCluster(ctx context.Context) error {
	var errs []error
	s.swMu.Lock()
	for _, part := range s.swc.NotRunning() {
		switch {
		case strings.HasPrefix(part, "volume"):
			i, _ := strconv.Atoi(strings.TrimPrefix(part, "volume"))
			errs = append(errs, s.swc.StartVolume(i-1))
		case part == "filer":
			errs = append(errs, s.swc.StartFiler())
		case part == "s3":
			errs = append(errs, s.swc.StartS3(ctx))
		default:
			errs = append(errs, fmt.Errorf("SeaweedFS %s is down", part))
		}
	}
	s.swMu.Unlock()
	if !s.balancer.Running() {
		errs = append(errs, s.balancer.Start(ctx))
	}
	for _, g := range s.gateways {
		errs = append(errs, s.balancer.SetServerState(ctx, backendName(g), "ready"))
	}
	return errors.Join(errs...)
}

// clusterHealthy is nil once every SeaweedFS part runs and HAProxy sees
// every gateway up.
func (s *campaignStack) clusterHealthy() error {
	s.swMu.Lock()
	down := s.swc.NotRunning()
	s.swMu.Unlock()
	if len(down) > 0 {
		return fmt.Errorf("SeaweedFS parts down: %s", strings.Join(down, ", "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.balancer.ServerStatus(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range s.gateways {
		if v := st[backendName(g)]; !strings.HasPrefix(v, "UP") {
			errs = append(errs, fmt.Errorf("HAProxy sees %s %q", backendName(g), v))
		}
	}
	return errors.Join(errs...)
}
