package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

// The cluster stack's smoke (issue 33, docs/SCALING.md), in `make test`:
// `make cluster`'s stack (primary and synchronous standby, SeaweedFS as
// master, three volume servers, filer and S3, three gateways behind
// HAProxy) comes up, takes writes through the balancer, also with a gateway
// taken out of it (HAProxy's runtime API), survives one PostgreSQL failover
// without a gateway restart, and the audit of what was written finds the
// catalog and the store agreeing.
func TestClusterSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole cluster stack")
	}
	requireBinary(t, "haproxy", "scripts/ensure-deps.sh --cluster")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	storeAccess, storeSecret := meta.NewKeyPair("FGSTORE")
	var key meta.AccessKey
	c, err := stack.StartCluster(ctx, stack.ClusterConfig{
		Dir: filepath.Join(sharedTempDir(t), "cluster"), FencegateBin: fencegateBinary(t), WeedBin: stack.WeedPath(),
		ServerKey: serverKey, StoreAccess: storeAccess, StoreSecret: storeSecret, LogLevel: "warn",
		Prepare: func(ctx context.Context, url string) error {
			pool, err := meta.Open(ctx, url, meta.PoolConfig{MaxConns: 2})
			if err != nil {
				return err
			}
			defer pool.Close()
			if _, err := meta.Migrate(ctx, pool); err != nil {
				return err
			}
			k, _ := meta.ParseServerKey(serverKey)
			sealer, _ := meta.NewSealer(k)
			key, err = (&meta.Keys{Pool: pool, Sealer: sealer}).Create(ctx, "cluster smoke", []meta.Grant{{Bucket: "*", Permission: meta.PermAdmin}})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	t.Logf("cluster stack up in %s", time.Since(start).Round(time.Millisecond))
	ep := c.Endpoint(key.ID, key.Secret)
	cl := ep.S3Client(noRetries)
	bucket := "cluster-smoke"
	createBucket(t, ep, bucket)
	want := map[string]string{}
	put := func(k, body string) {
		putUntilCommitted(t, cl, bucket, k, []byte(body), time.Now(), 60*time.Second)
		want[k] = body
	}
	for i := 0; i < 6; i++ {
		put(fmt.Sprintf("before-%d", i), fmt.Sprintf("before %d", i))
	}
	// A gateway taken out of the balancer through HAProxy's runtime API
	// (the chaos campaign's gateway-drain) and put back.
	if err := c.Balancer.SetServerState(ctx, "gw1", "maint"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Balancer.ServerStatus(ctx); err != nil || st["gw1"] != "MAINT" || !strings.HasPrefix(st["gw2"], "UP") {
		t.Fatalf("after gw1 was taken out, HAProxy's servers: %v, %v", st, err)
	}
	put("drained", "written while gw1 was out of the balancer")
	if err := c.Balancer.SetServerState(ctx, "gw1", "ready"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, err := c.Balancer.ServerStatus(ctx)
		if err == nil && strings.HasPrefix(st["gw1"], "UP") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw1 put back in the balancer: HAProxy's servers %v, %v", st, err)
		}
	}
	died := time.Now()
	if err := c.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	took := putUntilCommitted(t, cl, bucket, "after-0", []byte("after 0"), died, 60*time.Second)
	want["after-0"] = "after 0"
	t.Logf("primary death to first write committed through HAProxy: %s", took.Round(time.Millisecond))
	for i := 1; i < 6; i++ {
		put(fmt.Sprintf("after-%d", i), fmt.Sprintf("after %d", i))
	}
	put("before-0", "overwritten after the failover")
	for k, body := range want {
		if got := getBody(t, ep, bucket, k); string(got) != body {
			t.Errorf("GET %s = %q, want %q", k, got, body)
		}
	}
	cmd := exec.Command(fencegateBinary(t), "audit", bucket)
	cmd.Env = append(os.Environ(), "FENCEGATE_DATABASE_URL="+c.DatabaseURL, "FENCEGATE_SERVER_KEY="+serverKey,
		"FENCEGATE_BACKEND_ENDPOINT="+c.Store.URL, "FENCEGATE_BACKEND_ACCESS_KEY_ID="+storeAccess,
		"FENCEGATE_BACKEND_SECRET_ACCESS_KEY="+storeSecret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fencegate audit %s after the failover: %v\n%s", bucket, err, out)
	}
	t.Logf("audit: %s; whole smoke %s", strings.TrimSpace(string(out)), time.Since(start).Round(time.Millisecond))
}

// The cluster stack's other parts restarted under writes through HAProxy:
// a volume server killed and started again, the filer restarted, HAProxy
// restarted, a gateway killed (HAProxy's /readyz check takes it out). The
// building blocks of `make chaos CHAOS_STACK=cluster`'s faults
// (internal/chaos); run with FENCEGATE_CLUSTER_FAULTS=1 (about 2 minutes).
func TestClusterPartsRestart(t *testing.T) {
	if os.Getenv("FENCEGATE_CLUSTER_FAULTS") == "" {
		t.Skip("FENCEGATE_CLUSTER_FAULTS=1 runs it")
	}
	requireBinary(t, "haproxy", "scripts/ensure-deps.sh --cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	storeAccess, storeSecret := meta.NewKeyPair("FGSTORE")
	var key meta.AccessKey
	c, err := stack.StartCluster(ctx, stack.ClusterConfig{
		Dir: filepath.Join(sharedTempDir(t), "cluster"), FencegateBin: fencegateBinary(t), WeedBin: stack.WeedPath(),
		ServerKey: serverKey, StoreAccess: storeAccess, StoreSecret: storeSecret, LogLevel: "warn",
		Prepare: func(ctx context.Context, url string) error {
			pool, err := meta.Open(ctx, url, meta.PoolConfig{MaxConns: 2})
			if err != nil {
				return err
			}
			defer pool.Close()
			if _, err := meta.Migrate(ctx, pool); err != nil {
				return err
			}
			k, _ := meta.ParseServerKey(serverKey)
			sealer, _ := meta.NewSealer(k)
			key, err = (&meta.Keys{Pool: pool, Sealer: sealer}).Create(ctx, "cluster faults", []meta.Grant{{Bucket: "*", Permission: meta.PermAdmin}})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ep := c.Endpoint(key.ID, key.Secret)
	cl := ep.S3Client(noRetries)
	bucket := "cluster-faults"
	createBucket(t, ep, bucket)
	want := map[string]string{}
	n := 0
	writes := func(what string) {
		start := time.Now()
		for i := 0; i < 3; i++ {
			n++
			k, body := fmt.Sprintf("k%d", n%5), fmt.Sprintf("%s %d", what, n)
			putUntilCommitted(t, cl, bucket, k, []byte(body), time.Now(), 90*time.Second)
			want[k] = body
		}
		for k, body := range want {
			if got := getBody(t, ep, bucket, k); string(got) != body {
				t.Fatalf("after %s: GET %s = %q, want %q", what, k, got, body)
			}
		}
		t.Logf("%s: writes and reads in %s", what, time.Since(start).Round(time.Millisecond))
	}
	writes("start")
	c.Store.KillVolume(1)
	writes("volume server 2 killed")
	if err := c.Store.StartVolume(1); err != nil {
		t.Fatal(err)
	}
	writes("volume server 2 back")
	c.Store.StopFiler()
	if err := c.Store.StartFiler(); err != nil {
		t.Fatal(err)
	}
	writes("filer restarted")
	c.Balancer.Stop()
	if err := c.Balancer.Start(ctx); err != nil {
		t.Fatal(err)
	}
	writes("HAProxy restarted")
	c.Gateways[0].Stop()
	writes("gateway 1 stopped")
	cmd := exec.Command(fencegateBinary(t), "audit", bucket)
	cmd.Env = append(os.Environ(), "FENCEGATE_DATABASE_URL="+c.DatabaseURL, "FENCEGATE_SERVER_KEY="+serverKey,
		"FENCEGATE_BACKEND_ENDPOINT="+c.Store.URL, "FENCEGATE_BACKEND_ACCESS_KEY_ID="+storeAccess,
		"FENCEGATE_BACKEND_SECRET_ACCESS_KEY="+storeSecret)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fencegate audit %s: %v\n%s", bucket, err, out)
	}
}
