package stack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FailpointTag is the build tag of the tests' fencegate: with it the gateway
// carries the failpoints (FENCEGATE_FAILPOINT, internal/failpoint); without it,
// the product's build, they compile to nothing.
const FailpointTag = "failpoint"

// BuildFencegate builds the fencegate binary of the module the current folder
// is in, into out, with the given build tags (none for the real binary).
func BuildFencegate(ctx context.Context, out string, tags ...string) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return err
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return errors.New("not inside the fencegate module")
	}
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/fencegate")...)
	cmd.Dir = filepath.Dir(mod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/fencegate: %v\n%s", err, b)
	}
	return nil
}

// ProcStatusKiB reads a /proc/PID/status field in KiB (VmRSS, VmHWM).
func ProcStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if fs := strings.Fields(v); len(fs) > 0 {
				return strconv.ParseInt(fs[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// ServeConfig describes a `fencegate serve` child process. Anything else it
// should read comes as FENCEGATE_* lines in Env.
type ServeConfig struct {
	Bin         string   // the fencegate binary (BuildFencegate)
	DatabaseURL string   // FENCEGATE_DATABASE_URL
	ServerKey   string   // FENCEGATE_SERVER_KEY
	Store       Endpoint // the backend store and fencegate's own key at it
	LogLevel    string   // FENCEGATE_LOG_LEVEL ("" leaves fencegate's default)
	LogPath     string   // the child's stdout and stderr
	// Env is added after the settings above (and so overrides them).
	Env []string
	// Ready is the admin path polled until it answers 200: "/healthz" (the
	// default: the gateway serves) or "/readyz" (PostgreSQL and the store
	// reachable too).
	Ready string
	// Port and AdminPort are the S3 and admin listeners' ports, 0 for free
	// ones: a gateway restarted behind a balancer keeps its address.
	Port, AdminPort int
}

// Environ is the environment the child runs with, without its listen
// addresses: also right for `fencegate migrate` and `fencegate keys`.
func (c ServeConfig) Environ() []string {
	env := append(os.Environ(),
		"FENCEGATE_DATABASE_URL="+c.DatabaseURL,
		"FENCEGATE_SERVER_KEY="+c.ServerKey,
		"FENCEGATE_STORE_ENDPOINT="+c.Store.URL,
		"FENCEGATE_STORE_ACCESS_KEY_ID="+c.Store.AccessKey,
		"FENCEGATE_STORE_SECRET_ACCESS_KEY="+c.Store.SecretKey,
	)
	if c.Store.Region != "" {
		env = append(env, "FENCEGATE_STORE_REGION="+c.Store.Region)
	}
	if c.LogLevel != "" {
		env = append(env, "FENCEGATE_LOG_LEVEL="+c.LogLevel)
	}
	return append(env, c.Env...)
}

// Fencegate is `fencegate serve` as a child process: the one way the
// benchmark and the tests run it. Like every process this package starts, it
// dies with its parent and runs in its own process group.
type Fencegate struct {
	*proc
	URL   string // the S3 API, http://127.0.0.1:PORT
	Admin string // the admin listener
}

// StartFencegate starts `fencegate serve` on cfg's ports (free ones unless
// set) and waits up to
// 30 s for cfg.Ready to answer 200. A child that exits first is reported with
// its log.
func StartFencegate(ctx context.Context, cfg ServeConfig) (*Fencegate, error) {
	port, adminPort := cfg.Port, cfg.AdminPort
	var err error
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if adminPort == 0 {
		if adminPort, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if cfg.Ready == "" {
		cfg.Ready = "/healthz"
	}
	env := append(cfg.Environ(),
		"FENCEGATE_LISTEN=127.0.0.1:"+strconv.Itoa(port),
		"FENCEGATE_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(adminPort),
	)
	p, err := startProc("fencegate", cfg.LogPath, nil, env, cfg.Bin, "serve")
	if err != nil {
		return nil, err
	}
	f := &Fencegate{proc: p, URL: fmt.Sprintf("http://127.0.0.1:%d", port), Admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(f.Admin + cfg.Ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return f, nil
			}
		}
		select {
		case <-p.done:
			p.logFile.Close()
			b, _ := os.ReadFile(cfg.LogPath)
			return nil, fmt.Errorf("fencegate serve exited (%v):\n%s", p.err, b)
		case <-ctx.Done():
			f.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			f.Stop()
			return nil, fmt.Errorf("fencegate serve: %s not ready after 30 s", cfg.Ready)
		}
	}
}

// Stop sends SIGTERM (a graceful shutdown) and kills the process group if it
// has not exited within 20 s. Stopping twice is harmless.
func (f *Fencegate) Stop() { f.stop(syscall.SIGTERM, 20*time.Second) }

// Exited waits up to d for the process to exit and reports how it ended;
// exited is false if it is still running.
func (f *Fencegate) Exited(d time.Duration) (exited bool, err error) {
	select {
	case <-f.done:
		return true, f.err
	case <-time.After(d):
		return false, nil
	}
}

// Signal sends sig to the process itself.
func (f *Fencegate) Signal(sig syscall.Signal) error { return f.cmd.Process.Signal(sig) }

// LogPath is the file the child writes its log to.
func (f *Fencegate) LogPath() string { return f.logPath }

// LogTail is the last 20 lines of the child's log.
func (f *Fencegate) LogTail() string { return f.logTail() }
