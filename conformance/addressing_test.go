package conformance

import (
	"bytes"
	"context"
	"encoding/xml"
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
	vhost, _ := virtualHostClient(g)
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

// virtualHostClient is an S3 client of g addressing buckets by host name
// under s3.localhost (g started with that domain), every such name dialling
// g, and the port it gives in those names.
func virtualHostClient(g *testGateway) (*s3.Client, string) {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(g.URL, "http://"))
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+port)
	}
	return s3.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider(g.AccessKey, g.SecretKey, ""),
		HTTPClient:  &http.Client{Transport: &http.Transport{DialContext: dial}},
	}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://s3.localhost:" + port)
		o.UsePathStyle = false
	}), port
}

// The Location a CompleteMultipartUpload answer and a PostObject answer give
// is the object's URL at the gateway, in the client's own addressing style:
// a Complete relayed the store's document, whose Location named the store's
// own address (an internal address, and not one the client's key can use),
// and a form posted to a virtual-host name got a Location with the bucket
// twice (host and path), which addresses another key.
func TestResultLocationsNameTheGateway(t *testing.T) {
	g := startGateway(t, gatewayOptions{Domains: []string{"s3.localhost"}})
	ctx := context.Background()
	vhost, port := virtualHostClient(g)
	bucket := "t-location-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	const key, escaped = "m p+q/r", "m%20p+q/r"
	complete := func(c *s3.Client) *s3.CompleteMultipartUploadOutput {
		t.Helper()
		in := onePartUpload(t, c, bucket, key)
		out, err := c.CompleteMultipartUpload(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		// A repeat (the first answer lost) is answered by fencegate itself.
		again, err := c.CompleteMultipartUpload(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if aws.ToString(again.Location) != aws.ToString(out.Location) {
			t.Errorf("repeated Complete: Location %q, the first %q", aws.ToString(again.Location), aws.ToString(out.Location))
		}
		return out
	}
	for _, c := range []struct {
		name   string
		client *s3.Client
		want   string
	}{
		{"path style", g.S3Client(), g.URL + "/" + bucket + "/" + escaped},
		{"virtual host", vhost, "http://" + bucket + ".s3.localhost:" + port + "/" + escaped},
	} {
		if got := aws.ToString(complete(c.client).Location); got != c.want {
			t.Errorf("%s: CompleteMultipartUpload Location %q, want %q (the store is %s)", c.name, got, c.want, g.Store.URL)
		}
	}

	// A browser form posted to the bucket's host name.
	fields := append([]formField{{"key", key}, {"success_action_status", "201"}},
		postPolicy(g.Endpoint, time.Now().Add(time.Hour), map[string]string{"bucket": bucket}, []any{"eq", "$key", key}, []any{"eq", "$success_action_status", "201"})...)
	body, ctype := formBody(t, fields, "f", []byte("posted"))
	req, err := http.NewRequest(http.MethodPost, g.URL+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = bucket + ".s3.localhost:" + port
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	doc := readAllClose(t, resp.Body)
	want := "http://" + bucket + ".s3.localhost:" + port + "/" + escaped
	var pr struct{ Location, Key string }
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != want || xml.Unmarshal(doc, &pr) != nil || pr.Location != want || pr.Key != key {
		t.Fatalf("form posted to %s: %s, Location header %q, document %s; want %q", req.Host, resp.Status, resp.Header.Get("Location"), doc, want)
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
