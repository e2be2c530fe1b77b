package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// nodeDir holds the @aws-sdk/client-s3 lifecycle script and its lockfile.
const nodeDir = "clients/node"

// npmCI installs the script's dependencies once per test binary.
var npmCI sync.Mutex

func nodeLifecycle(t *testing.T, fx *clientFixture) {
	node := requireBinary(t, "node", "apt-get install -y nodejs (Node 20 or newer)")
	dir, err := filepath.Abs(nodeDir)
	if err != nil {
		t.Fatal(err)
	}
	ensureNodeModules(t, dir)

	// What the script must find in the shared listing bucket.
	expect, _ := json.Marshal(map[string]any{"keys": fx.listKeys, "prefix": listPrefix, "direct": fx.directKeys(),
		"prefixes": []string{"list/a/", "list/b/"}, "bPrefix": listBPrefix, "bKeys": fx.keysUnder(listBPrefix)})
	expectPath := filepath.Join(t.TempDir(), "listing.json")
	if err := os.WriteFile(expectPath, expect, 0o644); err != nil {
		t.Fatal(err)
	}
	bucket := testenv.Bucket(t)
	t.Cleanup(func() { removeBucket(t, fx.verify, bucket) })
	env := []string{"FG_ENDPOINT=" + fx.ep.URL, "FG_ACCESS_KEY=" + fx.ep.AccessKey, "FG_SECRET_KEY=" + fx.ep.SecretKey,
		"FG_REGION=" + fx.ep.Region, "FG_BUCKET=" + bucket, "FG_LIST_BUCKET=" + fx.listBucket, "FG_LIST_EXPECT=" + expectPath}
	if fx.insecure {
		env = append(env, "NODE_TLS_REJECT_UNAUTHORIZED=0")
	}
	nd := &tool{t: t, bin: node, dir: dir, timeout: 3 * time.Minute, env: childEnv(t.TempDir(), env...)}
	if v := strings.TrimSpace(nd.run("--version")); !strings.HasPrefix(v, "v2") && !strings.HasPrefix(v, "v3") {
		missingClient(t, fmt.Sprintf("%s is node %s; the lifecycle needs Node 20 or newer", node, v))
	}
	out := nd.run("lifecycle.mjs")
	for _, l := range lines(out) {
		t.Log(l)
	}
	fx.expectNoBucket(t, bucket)
}

// ensureNodeModules runs `npm ci` in dir unless its node_modules is there.
func ensureNodeModules(t *testing.T, dir string) {
	t.Helper()
	npmCI.Lock()
	defer npmCI.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@aws-sdk", "client-s3")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missingClient(t, fmt.Sprintf("%s/node_modules is missing and npm is not installed: install npm (`apt-get install -y npm`) and run `npm ci` in %s", dir, dir))
	}
	t.Logf("running npm ci in %s", dir)
	c := &tool{t: t, bin: npm, dir: dir, timeout: 5 * time.Minute, env: os.Environ()}
	c.run("ci", "--no-audit", "--no-fund")
}
