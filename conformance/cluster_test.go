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
// HAProxy) comes up, takes writes through the balancer, survives one
// PostgreSQL failover without a gateway restart, and the audit of what was
// written finds the catalog and the store agreeing.
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
