package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrNoHAProxy is returned when the machine has no haproxy binary.
var ErrNoHAProxy = errors.New("haproxy not found on PATH: install it, e.g. `apt-get install haproxy` (scripts/ensure-deps.sh --cluster)")

// HAProxyBackend is one gateway behind the balancer: its S3 listener and
// its admin listener (health-checked on /readyz).
type HAProxyBackend struct {
	Name  string
	S3    string // http://host:port
	Admin string // http://host:port
}

// HAProxy is Debian's haproxy as a child process balancing S3 requests
// over gateways, taking a gateway out while its /readyz fails.
type HAProxy struct {
	*proc
	URL    string // http://127.0.0.1:PORT, the S3 endpoint
	cfg    string
	port   int
	socket string // the runtime API's unix socket (admin level, this user's only)
}

// haproxyConfig is the whole configuration: round robin over the
// gateways, each checked every second on its admin port's /readyz (out
// after 2 failures, back after 2 successes), a request that could not
// connect sent once more to another gateway, and the runtime API on a unix
// socket (SetServerState, ServerStatus).
func haproxyConfig(port int, socket string, backends []HAProxyBackend) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by fencegate at every start.
global
  maxconn 4096
  stats socket %s mode 600 level admin
defaults
  mode http
  timeout connect 2s
  timeout client 5m
  timeout server 5m
  retries 1
  option redispatch
frontend s3
  bind 127.0.0.1:%d
  default_backend gateways
backend gateways
  balance roundrobin
  option httpchk GET /readyz
  http-check expect status 200
  default-server inter 1s fall 2 rise 2
`, socket, port)
	for _, be := range backends {
		s3, err := url.Parse(be.S3)
		if err != nil {
			return "", err
		}
		admin, err := url.Parse(be.Admin)
		if err != nil {
			return "", err
		}
		_, adminPort, err := net.SplitHostPort(admin.Host)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "  server %s %s check port %s\n", be.Name, s3.Host, adminPort)
	}
	return b.String(), nil
}

// StartHAProxy writes dir/haproxy.cfg and starts haproxy on port (0: a free
// one) in front of backends; it waits until the port accepts connections.
func StartHAProxy(ctx context.Context, dir string, port int, backends []HAProxyBackend) (*HAProxy, error) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		return nil, ErrNoHAProxy
	}
	var err error
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	// In the temporary folder, as weed's sockets: a unix socket's path is
	// limited to 107 bytes, which dir may pass.
	socket := filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-haproxy-%d.sock", port))
	text, err := haproxyConfig(port, socket, backends)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := WritePrivateFile(cfg, []byte(text)); err != nil {
		return nil, err
	}
	h := &HAProxy{URL: fmt.Sprintf("http://127.0.0.1:%d", port), cfg: cfg, port: port, socket: socket}
	return h, h.Start(ctx)
}

// Start (re)starts haproxy on its configuration (after Stop or Crash).
func (h *HAProxy) Start(ctx context.Context) error {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return ErrNoHAProxy
	}
	p, err := startProc("haproxy", filepath.Join(filepath.Dir(h.cfg), "haproxy.log"), nil, os.Environ(), bin, "-db", "-f", h.cfg)
	if err != nil {
		return err
	}
	h.proc = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", h.port), time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("haproxy exited during start-up (%s): %s", errString(p.err), p.logTail())
		case <-ctx.Done():
			h.Stop()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.Stop()
			return fmt.Errorf("haproxy on port %d not accepting after 10 s", h.port)
		}
	}
}

// Stop ends haproxy (SIGUSR1 is its soft stop; SIGTERM its hard one).
func (h *HAProxy) Stop() {
	if h != nil {
		h.proc.stop(syscall.SIGTERM, 10*time.Second)
		os.Remove(h.socket)
	}
}

// Crash kills haproxy (SIGKILL); Start brings it back.
func (h *HAProxy) Crash() {
	if h != nil {
		h.proc.stop(syscall.SIGKILL, 10*time.Second)
		os.Remove(h.socket)
	}
}

// Running reports whether haproxy's process is running.
func (h *HAProxy) Running() bool { return h != nil && h.proc != nil && !h.proc.hasExited() }

// runtime sends one command to the runtime API and returns its answer.
func (h *HAProxy) runtime(ctx context.Context, command string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", h.socket)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(command + "\n")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// SetServerState sets backend server name's administrative state: "maint"
// takes it out of the balancer (no new requests; those under way finish),
// "drain" sends it none but sticky ones, "ready" puts it back. A restart
// of haproxy forgets it: every server is ready again.
func (h *HAProxy) SetServerState(ctx context.Context, name, state string) error {
	out, err := h.runtime(ctx, fmt.Sprintf("set server gateways/%s state %s", name, state))
	if err != nil {
		return err
	}
	if out = strings.TrimSpace(out); out != "" {
		return fmt.Errorf("haproxy: set server %s state %s: %s", name, state, out)
	}
	return nil
}

// ServerStatus is each backend server's status as haproxy sees it: "UP",
// "DOWN", "MAINT", "UP 1/2" (going down) and the like.
func (h *HAProxy) ServerStatus(ctx context.Context) (map[string]string, error) {
	out, err := h.runtime(ctx, "show stat")
	if err != nil {
		return nil, err
	}
	// CSV: "# pxname,svname,...,status,...", one line per proxy and server.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "# ") {
		return nil, fmt.Errorf("haproxy: show stat: %q", out)
	}
	col := -1
	for i, name := range strings.Split(strings.TrimPrefix(lines[0], "# "), ",") {
		if name == "status" {
			col = i
		}
	}
	if col < 0 {
		return nil, fmt.Errorf("haproxy: show stat has no status column")
	}
	m := map[string]string{}
	for _, line := range lines[1:] {
		f := strings.Split(line, ",")
		if len(f) > col && f[0] == "gateways" && f[1] != "BACKEND" {
			m[f[1]] = f[col]
		}
	}
	return m, nil
}
