package conformance

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Virtual-host and path-style requests, and `+` versus `%2B`, address the same
// key bytes.
func TestVirtualHostAndPathStyleShareKeys(t *testing.T) {
	g := startGateway(t, gatewayOptions{Domains: []string{"s3.localhost"}})
	ctx := context.Background()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(g.URL, "http://"))
	// Every *.s3.localhost name dials the gateway.
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+port)
	}
	vhost := s3.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider(g.AccessKey, g.SecretKey, ""),
		HTTPClient:  &http.Client{Transport: &http.Transport{DialContext: dial}},
	}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://s3.localhost:" + port)
		o.UsePathStyle = false
	})
	path := g.S3Client()
	bucket := "t-vhost-" + randomSuffix()
	if _, err := path.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	if _, err := vhost.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("a+b c"), Body: strings.NewReader("virtual")}); err != nil {
		t.Fatal(err)
	}
	out, err := path.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("a+b c")})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAllClose(t, out.Body); string(got) != "virtual" {
		t.Fatalf("path style read %q", got)
	}
	// The same key spelled a%2Bb%20c on the wire, by hand.
	req := signedRequest(t, g.Endpoint, "GET", "/"+bucket+"/a%2Bb%20c", time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAllClose(t, resp.Body); resp.StatusCode != 200 || !bytes.Equal(got, []byte("virtual")) {
		t.Fatalf("%%2B spelling: %d %q", resp.StatusCode, got)
	}
}

// The store refusing fencegate's own credentials is the operator's problem, not
// the client's: 500, not a 403 the client would take as its own fault.
func TestBackendCredentialErrorsBecome500(t *testing.T) {
	store := testenv.Store(t)
	store.SecretKey = "wrong-backend-secret-000000000000000000"
	g := startGateway(t, gatewayOptions{Store: &store})
	req := signedRequest(t, g.Endpoint, "GET", "/", time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if code := s3ErrorCode(t, resp); resp.StatusCode != 500 || code != "InternalError" {
		t.Fatalf("%d %s, want 500 InternalError", resp.StatusCode, code)
	}
}
