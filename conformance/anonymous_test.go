package conformance

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Anonymous requests (issue 12): reads of what the store makes public are
// forwarded to it unsigned, so the store's own ACLs decide; anonymous writes
// are refused unless the operator enables them for a bucket.

// anonymousCLI is aws cli v1 (botocore, as boto3) sending unsigned requests.
func anonymousCLI(t *testing.T, ep stack.Endpoint) *tool {
	t.Helper()
	c := awsCLI(t, &clientFixture{ep: ep}, 1)
	c.prefix = append(c.prefix, "--no-sign-request")
	return c
}

// unsigned sends a request with no credentials at all.
func unsigned(t *testing.T, ep stack.Endpoint, method, path string, body []byte, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequest(method, ep.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func wantS3Error(t *testing.T, what string, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d %s\n%s", what, resp.StatusCode, status, code, body)
		return
	}
	if code != "" && xmlText(body, "Code") != code {
		t.Errorf("%s: code %q, want %q\n%s", what, xmlText(body, "Code"), code, body)
	}
	if id := xmlText(body, "RequestId"); code != "" && id != resp.Header.Get("x-amz-request-id") {
		t.Errorf("%s: error body's RequestId %q differs from the header %q", what, id, resp.Header.Get("x-amz-request-id"))
	}
}

// A public-read bucket and object, a private bucket holding a private and a
// public-read object, read without credentials: the store's ACLs decide,
// through fencegate as straight at the store (test_bucket_list_objects_anonymous,
// test_bucket_listv2_objects_anonymous, test_object_raw_get,
// test_object_raw_get_bucket_acl, test_object_raw_get_object_gone). Anonymous
// writes are refused.
func TestAnonymousReads(t *testing.T) {
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			pub, priv := testenv.Bucket(t), testenv.Bucket(t)
			public := map[string]string{"x-amz-acl": "public-read"}
			wantWireStatus(t, "create public bucket", wireExchange(t, ep, "PUT", "/"+pub, nil, public), 200)
			wantWireStatus(t, "create private bucket", wireExchange(t, ep, "PUT", "/"+priv, nil, nil), 200)
			wantWireStatus(t, "put public object", wireExchange(t, ep, "PUT", "/"+pub+"/foo", []byte("public bytes"), public), 200)
			wantWireStatus(t, "put private object", wireExchange(t, ep, "PUT", "/"+priv+"/secret", []byte("secret bytes"), nil), 200)
			wantWireStatus(t, "put public object in a private bucket", wireExchange(t, ep, "PUT", "/"+priv+"/open", []byte("open bytes"), public), 200)

			// A real client, unsigned.
			cli := anonymousCLI(t, ep)
			out := filepath.Join(t.TempDir(), "foo")
			cli.run("s3api", "get-object", "--bucket", pub, "--key", "foo", out)
			sameFile(t, "anonymous get-object", out, []byte("public bytes"))
			cli.run("s3api", "head-object", "--bucket", pub, "--key", "foo")
			for _, list := range []string{"list-objects", "list-objects-v2"} {
				var l awsList
				decodeJSON(t, cli.run("s3api", list, "--bucket", pub), &l)
				sameKeys(t, "anonymous "+list, awsKeys(l), []string{"foo"})
				cli.fail([]string{"AccessDenied"}, "s3api", list, "--bucket", priv)
			}
			cli.fail([]string{"NoSuchKey"}, "s3api", "get-object", "--bucket", pub, "--key", "missing", out)
			cli.fail([]string{"AccessDenied"}, "s3api", "get-object", "--bucket", priv, "--key", "secret", out)
			cli.run("s3api", "get-object", "--bucket", priv, "--key", "open", out)
			sameFile(t, "anonymous get-object of a public object in a private bucket", out, []byte("open bytes"))

			// On the wire: fencegate's attribution stays hidden, errors are S3's.
			resp, body := unsigned(t, ep, "GET", "/"+pub+"/foo", nil, nil)
			if resp.StatusCode != 200 || string(body) != "public bytes" {
				t.Fatalf("unsigned GET of a public object: %d %q", resp.StatusCode, body)
			}
			for k := range resp.Header {
				if strings.Contains(strings.ToLower(k), "fencegate-attempt") {
					t.Errorf("unsigned GET shows %s: %q", k, resp.Header.Get(k))
				}
			}
			resp, _ = unsigned(t, ep, "HEAD", "/"+pub+"/foo", nil, nil)
			if resp.StatusCode != 200 || resp.Header.Get("x-amz-meta-fencegate-attempt") != "" {
				t.Errorf("unsigned HEAD of a public object: %d, attempt header %q", resp.StatusCode, resp.Header.Get("x-amz-meta-fencegate-attempt"))
			}
			resp, body = unsigned(t, ep, "GET", "/"+pub+"/missing", nil, nil)
			wantS3Error(t, "unsigned GET of a missing key in a public bucket", resp, body, 404, "NoSuchKey")
			resp, body = unsigned(t, ep, "GET", "/"+priv+"/secret", nil, nil)
			wantS3Error(t, "unsigned GET of a private object", resp, body, 403, "AccessDenied")
			resp, _ = unsigned(t, ep, "HEAD", "/"+priv+"/secret", nil, nil)
			if resp.StatusCode != 403 {
				t.Errorf("unsigned HEAD of a private object: %d, want 403", resp.StatusCode)
			}

			// Writes without credentials are refused, and change nothing.
			resp, body = unsigned(t, ep, "PUT", "/"+pub+"/anon", []byte("anonymous bytes"), nil)
			wantS3Error(t, "unsigned PUT into a public-read bucket", resp, body, 403, "AccessDenied")
			resp, body = unsigned(t, ep, "DELETE", "/"+pub+"/foo", nil, nil)
			wantS3Error(t, "unsigned DELETE in a public-read bucket", resp, body, 403, "AccessDenied")
			resp, body = unsigned(t, ep, "PUT", "/"+priv+"?acl", nil, public)
			wantS3Error(t, "unsigned PutBucketAcl", resp, body, 403, "AccessDenied")
			if got := getBody(t, ep, pub, "foo"); string(got) != "public bytes" {
				t.Errorf("after refused anonymous writes foo holds %q", got)
			}
			cli.fail([]string{"AccessDenied"}, "s3api", "put-object", "--bucket", pub, "--key", "cli-anon", "--body", out)
			resp, _ = unsigned(t, ep, "HEAD", "/"+priv+"/open", nil, nil)
			if resp.StatusCode != 200 {
				t.Errorf("unsigned HEAD of a public object in a private bucket: %d, want 200", resp.StatusCode)
			}
		})
	}
}

// A presigned URL valid for zero seconds has expired: 403, as S3 answers
// (test_object_raw_get_x_amz_expires_out_range_zero).
func TestAnonymousPresignZeroExpiry(t *testing.T) {
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			bucket := testenv.Bucket(t)
			createBucket(t, ep, bucket)
			wantWireStatus(t, "put", wireExchange(t, ep, "PUT", "/"+bucket+"/foo", []byte("x"), nil), 200)
			req, err := http.NewRequest("GET", ep.URL+"/"+bucket+"/foo?X-Amz-Expires=0", nil)
			if err != nil {
				t.Fatal(err)
			}
			creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
			u, _, err := s3Signer().PresignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 403 || xmlText(b, "Code") != "AccessDenied" {
				t.Errorf("GET with X-Amz-Expires=0: %d %s, want 403 AccessDenied", resp.StatusCode, b)
			}
		})
	}
}

// Anonymous writes to a bucket the operator opened for them
// (Config.AnonymousWriteBuckets, --anonymous-write-buckets) go through the
// write protocol with fencegate's own credentials; every other bucket refuses
// them, and setting an ACL still needs an admin key.
func TestAnonymousWrites(t *testing.T) {
	open, closed := testenv.Bucket(t), testenv.Bucket(t)
	g := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) {
		c.AnonymousWriteBuckets = []string{open}
	}})
	ep := g.Endpoint
	createBucket(t, ep, open)
	createBucket(t, ep, closed)

	resp, body := unsigned(t, ep, "PUT", "/"+open+"/k", []byte("anonymous bytes"), nil)
	if resp.StatusCode != 200 || resp.Header.Get("x-fencegate-generation") == "" {
		t.Fatalf("unsigned PUT into an open bucket: %d, generation %q\n%s", resp.StatusCode, resp.Header.Get("x-fencegate-generation"), body)
	}
	if got := getBody(t, ep, open, "k"); string(got) != "anonymous bytes" {
		t.Errorf("after the anonymous PUT k holds %q", got)
	}
	// The bytes carry an attempt id at the store: written by the protocol.
	w := wireExchange(t, testenv.Store(t), "HEAD", "/"+open+"/k", nil, nil)
	if w.Status != 200 || w.get("x-amz-meta-fencegate-attempt") == "" {
		t.Errorf("the store's HEAD of the anonymous write: %d, attempt %q", w.Status, w.get("x-amz-meta-fencegate-attempt"))
	}
	// A real client.
	cli := anonymousCLI(t, ep)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("from the cli"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli.run("s3api", "put-object", "--bucket", open, "--key", "cli", "--body", src)
	if got := getBody(t, ep, open, "cli"); string(got) != "from the cli" {
		t.Errorf("after the anonymous cli put-object: %q", got)
	}
	cli.fail([]string{"AccessDenied"}, "s3api", "put-object", "--bucket", closed, "--key", "cli", "--body", src)

	resp, body = unsigned(t, ep, "PUT", "/"+closed+"/k", []byte("anonymous bytes"), nil)
	wantS3Error(t, "unsigned PUT into a closed bucket", resp, body, 403, "AccessDenied")
	resp, body = unsigned(t, ep, "PUT", "/"+open+"/acl", []byte("x"), map[string]string{"x-amz-acl": "public-read"})
	wantS3Error(t, "unsigned PUT with a canned ACL", resp, body, 403, "AccessDenied")
	resp, body = unsigned(t, ep, "PUT", "/"+open+"?acl", nil, map[string]string{"x-amz-acl": "public-read"})
	wantS3Error(t, "unsigned PutBucketAcl of an open bucket", resp, body, 403, "AccessDenied")
	resp, body = unsigned(t, ep, "DELETE", "/"+open, nil, nil)
	wantS3Error(t, "unsigned DeleteBucket of an open bucket", resp, body, 403, "AccessDenied")

	resp, body = unsigned(t, ep, "DELETE", "/"+open+"/k", nil, nil)
	if resp.StatusCode != 204 || resp.Header.Get("x-fencegate-generation") == "" {
		t.Errorf("unsigned DELETE in an open bucket: %d, generation %q\n%s", resp.StatusCode, resp.Header.Get("x-fencegate-generation"), body)
	}
	if w := wireExchange(t, ep, "HEAD", "/"+open+"/k", nil, nil); w.Status != 404 {
		t.Errorf("after the anonymous DELETE: HEAD %d, want 404", w.Status)
	}
}
