package conformance

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Through HAProxy (Debian's package) terminating TLS in front of fencegate
// (issue 30): HAProxy reaches the gateway under an internal Host, from
// 127.0.0.2, and says the client's Host in X-Forwarded-Host; the gateway
// trusts 127.0.0.2 only. aws cli and presigned URLs work through it; the
// same forwarding headers sent straight to the gateway from 127.0.0.1 are
// ignored.

const haproxySource = "127.0.0.2"

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startHAProxy runs haproxy terminating TLS on a free port in front of
// backend (host:port), and returns its https URL.
func startHAProxy(t *testing.T, backend string) string {
	t.Helper()
	bin := requireBinary(t, "haproxy", "apt-get install -y haproxy (scripts/ensure-deps.sh --clients)")
	certFile, keyFile := selfSignedCert(t)
	dir := t.TempDir()
	pemFile := filepath.Join(dir, "haproxy.pem")
	cert, _ := os.ReadFile(certFile)
	key, _ := os.ReadFile(keyFile)
	if err := os.WriteFile(pemFile, append(cert, key...), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cfg := fmt.Sprintf(`defaults
  mode http
  timeout connect 5s
  timeout client 2m
  timeout server 2m
frontend s3
  bind 127.0.0.1:%d ssl crt %s
  http-request set-header X-Forwarded-Host %%[req.hdr(host)]
  http-request set-header X-Forwarded-Proto https
  http-request set-header Host fencegate.internal:9000
  option forwardfor
  default_backend fencegate
backend fencegate
  server gw %s source %s
`, port, pemFile, backend, haproxySource)
	cfgFile := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-db", "-f", cfgFile)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy:\n%s", logs.String())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitFor(t, "haproxy listening", 10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "https://" + addr
}

var insecureClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func insecureGet(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := insecureClient.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, b
}

func TestBehindHAProxy(t *testing.T) {
	g := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) {
		c.TrustedProxies = []string{haproxySource}
	}})
	front := startHAProxy(t, strings.TrimPrefix(g.Endpoint.URL, "http://"))
	ep := g.Endpoint
	ep.URL = front
	bucket := testenv.Bucket(t)
	createBucket(t, g.Endpoint, bucket)

	fx := &clientFixture{ep: ep, insecure: true}
	cli := awsCLI(t, fx, 1)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("through haproxy"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli.run("s3", "cp", src, "s3://"+bucket+"/k")
	out := filepath.Join(t.TempDir(), "out")
	cli.run("s3", "cp", "s3://"+bucket+"/k", out)
	sameFile(t, "aws s3 cp through haproxy", out, []byte("through haproxy"))

	// Presigned URLs: V4 (this config signs s3v4) and aws cli v1's default V2.
	for name, c := range map[string]*tool{"SigV4": cli, "SigV2": awsCLIv1Fixture(t, fx, "")} {
		u := strings.TrimSpace(c.run("s3", "presign", "s3://"+bucket+"/k"))
		if status, body := insecureGet(t, u); status != 200 || string(body) != "through haproxy" {
			t.Errorf("%s presigned GET through haproxy: %d %q", name, status, body)
		}
	}

	// Straight to the gateway from 127.0.0.1, not a trusted proxy: the
	// forwarding headers are ignored, so a request signed for HAProxy's host
	// is refused.
	hostOnly := strings.TrimPrefix(front, "https://")
	direct := stack.Endpoint{URL: g.Endpoint.URL, AccessKey: ep.AccessKey, SecretKey: ep.SecretKey, Region: ep.Region}
	resp, body := signedFor(t, direct, hostOnly, "fencegate.internal:9000", "GET", "/"+bucket+"/k", nil,
		map[string]string{"X-Forwarded-Host": hostOnly, "X-Forwarded-Proto": "https"})
	wantS3Error(t, "forged X-Forwarded-Host straight from an untrusted address", resp, body, 403, "SignatureDoesNotMatch")
}
