package conformance

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

// gatewayProcess is `fencegate serve` as its own process, for what an
// in-process gateway cannot show: its memory, a SIGKILL, several gateways with
// their own connection pools. Endpoint carries a client key of its own.
type gatewayProcess struct {
	stack.Endpoint
	Admin string
	proc  *stack.Fencegate
}

var (
	binOnce sync.Once
	binPath string
)

// fencegateBinary builds the binary once per package run, with the failpoints
// (stack.FailpointTag) that the kill tests and the campaign arm, into a folder that
// lasts until the package's tests end (not a test's TempDir).
func fencegateBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencegate-bin-")
		if err != nil {
			t.Fatal(err)
		}
		testenv.AtExit(func() { os.RemoveAll(dir) })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bin := filepath.Join(dir, "fencegate")
		if err := stack.BuildFencegate(ctx, bin, stack.FailpointTag); err != nil {
			t.Fatal(err)
		}
		binPath = bin
	})
	if binPath == "" {
		t.Fatal("fencegate binary was not built")
	}
	return binPath
}

func startGatewayProcess(t *testing.T, store stack.Endpoint, extraEnv ...string) *gatewayProcess {
	t.Helper()
	keys := packageKeys(t)
	k, err := keys.Create(context.Background(), "process "+t.Name(), []meta.Grant{{Bucket: "*", Permission: meta.PermAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := stack.StartFencegate(context.Background(), stack.ServeConfig{
		Bin: fencegateBinary(t), DatabaseURL: testenv.DatabaseURL(t), ServerKey: serverKey, Store: store,
		LogLevel: "warn", LogPath: filepath.Join(t.TempDir(), "gateway.log"), Env: extraEnv,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &gatewayProcess{
		Endpoint: stack.Endpoint{URL: p.URL, AccessKey: k.ID, SecretKey: k.Secret, Region: "us-east-1"},
		Admin:    p.Admin, proc: p,
	}
}

// rssKiB reads a /proc/PID/status field (VmRSS, VmHWM) in KiB.
func (g *gatewayProcess) rssKiB(t *testing.T, field string) int64 {
	t.Helper()
	n, err := stack.ProcStatusKiB(g.proc.Pid(), field)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
