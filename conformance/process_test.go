package conformance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

// gatewayProcess is `fencegate serve` as its own process, for what an
// in-process gateway cannot show: its memory, a SIGKILL, several gateways with
// their own connection pools.
type gatewayProcess struct {
	stack.Endpoint
	Admin string
	cmd   *exec.Cmd
	done  chan error
	log   string
}

var (
	binOnce sync.Once
	binPath string
)

// fencegateBinary builds the binary once per package run, into a folder that
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
		if err := stack.BuildFencegate(ctx, bin); err != nil {
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
	port, _ := stack.FreePort()
	adminPort, _ := stack.FreePort()
	logPath := filepath.Join(t.TempDir(), "gateway.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fencegateBinary(t), "serve")
	cmd.Env = append(os.Environ(),
		"FENCEGATE_LISTEN=127.0.0.1:"+strconv.Itoa(port),
		"FENCEGATE_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(adminPort),
		"FENCEGATE_DATABASE_URL="+testenv.DatabaseURL(t),
		"FENCEGATE_SERVER_KEY="+serverKey,
		"FENCEGATE_BACKEND_ENDPOINT="+store.URL,
		"FENCEGATE_BACKEND_ACCESS_KEY_ID="+store.AccessKey,
		"FENCEGATE_BACKEND_SECRET_ACCESS_KEY="+store.SecretKey,
		"FENCEGATE_LOG_LEVEL=warn",
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProcess{
		Endpoint: stack.Endpoint{URL: fmt.Sprintf("http://127.0.0.1:%d", port), AccessKey: k.ID, SecretKey: k.Secret, Region: "us-east-1"},
		Admin:    fmt.Sprintf("http://127.0.0.1:%d", adminPort), cmd: cmd, done: make(chan error, 1), log: logPath,
	}
	go func() { g.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(g.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(g.Admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g
			}
		}
		select {
		case err := <-g.done:
			g.done <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("fencegate serve exited (%v):\n%s", err, b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("fencegate serve not healthy after 30 s")
		}
	}
}

func (g *gatewayProcess) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.done:
		g.done <- err
	case <-time.After(20 * time.Second):
		_ = g.cmd.Process.Kill()
	}
}

// rssKiB reads a /proc/PID/status field (VmRSS, VmHWM) in KiB.
func (g *gatewayProcess) rssKiB(t *testing.T, field string) int64 {
	t.Helper()
	n, err := stack.ProcStatusKiB(g.cmd.Process.Pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
