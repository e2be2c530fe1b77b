package conformance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Behind a reverse proxy (issue 30): the client signs the proxy's public
// host; the proxy reaches fencegate under another name and says the public
// one in X-Forwarded-Host or Forwarded. fencegate believes that only from
// --trusted-proxies; from anyone else the headers are ignored.

const publicHost = "s3.public.example:8443"

// signedFor signs a request for host and sends it to ep with the given
// Host header and extra headers, as a proxy would pass it on.
func signedFor(t *testing.T, ep stack.Endpoint, signedHost, sentHost, method, path string, body []byte, extra map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ep.URL+path, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = signedHost
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", payload)
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, payload, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if sentHost == "" {
		u, _ := url.Parse(ep.URL)
		sentHost = u.Host
	}
	req.Host = sentHost
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func TestTrustedProxies(t *testing.T) {
	bucket := testenv.Bucket(t)
	trusted := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) {
		c.TrustedProxies = []string{"127.0.0.0/8"}
		c.Domains = []string{"s3.public.example"}
	}})
	untrusted := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) {
		c.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.1"}
	}})
	createBucket(t, trusted.Endpoint, bucket)
	ep := trusted.Endpoint
	path := "/" + bucket + "/behind-proxy"

	// From a trusted proxy: the forwarded host is the one checked.
	resp, body := signedFor(t, ep, publicHost, "fencegate.internal:9000", "PUT", path, []byte("via proxy"),
		map[string]string{"X-Forwarded-Host": publicHost, "X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"})
	if resp.StatusCode != 200 {
		t.Fatalf("PUT through a trusted proxy with X-Forwarded-Host: %d\n%s", resp.StatusCode, body)
	}
	// RFC 7239's Forwarded, and a client's own forged value before the proxy's.
	resp, body = signedFor(t, ep, publicHost, "fencegate.internal:9000", "GET", path, nil,
		map[string]string{"Forwarded": `for=198.51.100.7;host=forged.example, for="[2001:db8::1]:4711";proto=https;host="` + publicHost + `"`})
	if resp.StatusCode != 200 || string(body) != "via proxy" {
		t.Fatalf("GET through a trusted proxy with Forwarded: %d %q", resp.StatusCode, body)
	}
	resp, body = signedFor(t, ep, publicHost, "fencegate.internal:9000", "GET", path, nil,
		map[string]string{"X-Forwarded-Host": "forged.example, " + publicHost})
	if resp.StatusCode != 200 {
		t.Fatalf("GET with the proxy's X-Forwarded-Host after a forged one: %d\n%s", resp.StatusCode, body)
	}
	// Virtual-hosted addressing by the forwarded host.
	vhost := bucket + ".s3.public.example"
	resp, body = signedFor(t, ep, vhost, "fencegate.internal:9000", "GET", "/behind-proxy", nil,
		map[string]string{"X-Forwarded-Host": vhost})
	if resp.StatusCode != 200 || string(body) != "via proxy" {
		t.Fatalf("virtual-hosted GET through a trusted proxy: %d %q", resp.StatusCode, body)
	}
	// The reservation API's presigned URL names the endpoint the client
	// reached: the proxy's scheme and host (before: the scheme was the
	// gateway's own listener's, http behind a proxy that ends TLS).
	resp, body = signedFor(t, ep, publicHost, "fencegate.internal:9000", "POST", reservations.APIPath,
		[]byte(`{"bucket":"`+bucket+`","key":"reserved-behind-proxy","size":5}`),
		map[string]string{"X-Forwarded-Host": publicHost, "X-Forwarded-Proto": "https", "Content-Type": "application/json"})
	var res struct {
		PutURL string `json:"put_url"`
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal(body, &res) != nil || !strings.HasPrefix(res.PutURL, "https://"+publicHost+"/") {
		t.Fatalf("reservation created through a trusted proxy that ends TLS: %d, put_url %q, want https://%s/...\n%s", resp.StatusCode, res.PutURL, publicHost, body)
	}
	// A forged host the client did not sign: refused.
	resp, body = signedFor(t, ep, publicHost, "", "GET", path, nil, map[string]string{"X-Forwarded-Host": "other.example"})
	wantS3Error(t, "X-Forwarded-Host the client did not sign", resp, body, 403, "SignatureDoesNotMatch")

	// From an address that is not a trusted proxy, the headers are ignored:
	// a request signed for the forwarded host fails, one signed for the real
	// Host passes whatever it forges.
	uep := untrusted.Endpoint
	resp, body = signedFor(t, uep, publicHost, "fencegate.internal:9000", "GET", path, nil,
		map[string]string{"X-Forwarded-Host": publicHost})
	wantS3Error(t, "X-Forwarded-Host from an untrusted address", resp, body, 403, "SignatureDoesNotMatch")
	resp, body = signedFor(t, uep, publicHost, "fencegate.internal:9000", "GET", path, nil,
		map[string]string{"Forwarded": "host=" + publicHost})
	wantS3Error(t, "Forwarded from an untrusted address", resp, body, 403, "SignatureDoesNotMatch")
	u, _ := url.Parse(uep.URL)
	resp, body = signedFor(t, uep, u.Host, "", "GET", path, nil,
		map[string]string{"X-Forwarded-Host": "evil.example", "Forwarded": "host=evil.example", "X-Forwarded-For": "1.2.3.4"})
	if resp.StatusCode != 200 || string(body) != "via proxy" {
		t.Fatalf("GET signed for the real host with forged forwarding headers from an untrusted address: %d %q", resp.StatusCode, body)
	}
}
