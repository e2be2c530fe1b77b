package conformance

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// signedRequest builds a header-signed request to the gateway at time at.
func signedRequest(t *testing.T, ep stack.Endpoint, method, path string, at time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, ep.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", emptyHash)
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, emptyHash, "s3", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	return req
}

// s3Signer signs as S3 clients do: the path as sent, not escaped again.
func s3Signer() *v4.Signer {
	return v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
}

func s3ErrorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := string(body)
	i, j := strings.Index(s, "<Code>"), strings.Index(s, "</Code>")
	if i < 0 || j < i {
		t.Fatalf("status %d with no S3 error code in %q", resp.StatusCode, s)
	}
	return s[i+6 : j]
}

// Every refusal is an S3 error with the right code, decided before the store
// is asked anything.
func TestRefusalsNeverReachTheStore(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-refusals-" + randomSuffix()
	if _, err := g.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	other, err := g.Keys.Create(ctx, "other bucket only", []meta.Grant{{Bucket: "someone-elses", Permission: meta.PermAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	readOnly, err := g.Keys.Create(ctx, "read only", []meta.Grant{{Bucket: bucket, Permission: meta.PermRead}})
	if err != nil {
		t.Fatal(err)
	}
	before := g.StoreRequests.Load()
	path := "/" + bucket + "/k"
	now := time.Now()
	wrongSecret := g.Endpoint
	wrongSecret.SecretKey = "not-the-secret-0000000000000000000000000"
	unknown := g.Endpoint
	unknown.AccessKey = "FGNOSUCHKEY000000000"
	otherEP := g.Endpoint
	otherEP.AccessKey, otherEP.SecretKey = other.ID, other.Secret
	readEP := g.Endpoint
	readEP.AccessKey, readEP.SecretKey = readOnly.ID, readOnly.Secret

	tampered := signedRequest(t, g.Endpoint, "GET", path, now)
	tampered.URL.Path = "/" + bucket + "/other-key"

	presignCreds := aws.Credentials{AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}
	expiredReq, _ := http.NewRequest("GET", g.URL+path+"?X-Amz-Expires=60", nil)
	expiredURL, _, err := v4.NewSigner().PresignHTTP(ctx, presignCreds, expiredReq, "UNSIGNED-PAYLOAD", "s3", "us-east-1", now.Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	expired, _ := http.NewRequest("GET", expiredURL, nil)

	putReadOnly := signedRequest(t, readEP, "PUT", path, now)
	for _, c := range []struct {
		name   string
		req    *http.Request
		status int
		code   string
	}{
		// (A read without credentials goes to the store unsigned, whose ACLs
		// decide: anonymous_test.go. A write is refused here.)
		{"no credentials", mustRequest(t, "PUT", g.URL+path), 403, "AccessDenied"},
		{"no credentials, an ACL", mustRequest(t, "GET", g.URL+"/"+bucket+"?acl"), 403, "AccessDenied"},
		{"wrong secret", signedRequest(t, wrongSecret, "GET", path, now), 403, "SignatureDoesNotMatch"},
		{"unknown key", signedRequest(t, unknown, "GET", path, now), 403, "InvalidAccessKeyId"},
		{"tampered path", tampered, 403, "SignatureDoesNotMatch"},
		{"skewed clock", signedRequest(t, g.Endpoint, "GET", path, now.Add(-20*time.Minute)), 403, "RequestTimeTooSkewed"},
		{"expired presigned URL", expired, 403, "AccessDenied"},
		{"no grant on the bucket", signedRequest(t, otherEP, "GET", path, now), 403, "AccessDenied"},
		{"read-only key writes", putReadOnly, 403, "AccessDenied"},
		{"unsupported subresource", signedRequest(t, g.Endpoint, "POST", path+"?restore", now), 501, "NotImplemented"},
	} {
		resp, err := http.DefaultClient.Do(c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if code := s3ErrorCode(t, resp); resp.StatusCode != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, resp.StatusCode, code, c.status, c.code)
		}
	}
	if n := g.StoreRequests.Load() - before; n != 0 {
		t.Fatalf("the store saw %d refused requests", n)
	}
}

func mustRequest(t *testing.T, method, u string) *http.Request {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// A refused `Expect: 100-continue` request gets its S3 error (not a bare 417),
// never a 100 Continue, and its connection closed with the body unread.
func TestExpectContinueRefusedWithS3Error(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bad := g.Endpoint
	bad.SecretKey = "wrong-secret-000000000000000000000000000"
	req := signedRequest(t, bad, "PUT", "/somebucket/k", time.Now())
	u, _ := url.Parse(g.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var head strings.Builder
	head.WriteString("PUT /somebucket/k HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Length: 1048576\r\nExpect: 100-continue\r\n")
	for k, vs := range req.Header {
		head.WriteString(k + ": " + vs[0] + "\r\n")
	}
	head.WriteString("\r\n")
	if _, err := conn.Write([]byte(head.String())); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == 100 || resp.StatusCode == 417 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("got %d before authentication was settled: %v %s", resp.StatusCode, resp.Header, b)
	}
	if code := s3ErrorCode(t, resp); resp.StatusCode != 403 || code != "SignatureDoesNotMatch" {
		t.Fatalf("%d %s, want 403 SignatureDoesNotMatch", resp.StatusCode, code)
	}
	if !resp.Close {
		t.Fatal("connection left open for a body that was never read")
	}
}

// A client that announces a Content-Length, sends fewer bytes and closes leaves
// no object, even in front of versitygw's posix backend, which keeps truncated
// bodies when hit directly.
func TestTruncatedUploadLeavesNoObject(t *testing.T) {
	bin := stack.VersitygwPath()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := stack.StartVersitygwPosix(ctx, bin, t.TempDir(), "FGVGWTRUNCATE00001", "versitygw-truncate-secret-000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	bucket := "t-truncate-" + randomSuffix()
	if _, err := v.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	proxy, vp := proxyFor(t, v.Endpoint)
	// The hazard: sent to versitygw directly, a truncated body is published.
	if !storeKeepsTruncated(t, v.Endpoint, bucket, "direct") {
		t.Fatal("versitygw posix no longer keeps a truncated body sent to it directly: this test cannot show that fencegate prevents it")
	}
	// Streamed (a spooled body cut short never leaves the gateway at all).
	g := startGateway(t, gatewayOptions{Store: &vp, Stream: true})
	if truncatedPut(t, g.Endpoint, proxy, v.Endpoint, bucket, "through-fencegate") {
		t.Fatal("a truncated upload through fencegate left an object at the store")
	}
}

// proxyFor puts a fault proxy in front of a store endpoint.
func proxyFor(t *testing.T, store stack.Endpoint) (*faultproxy.HTTP, stack.Endpoint) {
	t.Helper()
	p, err := faultproxy.NewHTTP(store.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ep := store
	ep.URL = p.URL()
	return p, ep
}

func waitEvent(t *testing.T, ch <-chan faultproxy.Event, what string) faultproxy.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return faultproxy.Event{}
	}
}

// storeKeepsTruncated sends half of a 1 MiB body announced in full straight
// to store, closes, and waits (bounded) for the store to publish it: true
// once it does, false if it never did within 30 s.
func storeKeepsTruncated(t *testing.T, store stack.Endpoint, bucket, key string) bool {
	t.Helper()
	const size = 1 << 20
	conn := startRawPut(t, store, bucket, key, size)
	_, _ = conn.Write(make([]byte, size/2))
	conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !storeHas(t, store, bucket, key) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// truncatedPut sends half of a 1 MiB body announced in full to client (a
// gateway whose store is behind proxy), closes once the write reached the
// store, waits for the store to see its request end, and reports whether the
// store then holds the key. So that a late publication is not read as "no
// object", it first waits until store has published a truncated body sent
// to it directly after that end (the barrier): the store acted on the cut
// request before then.
func truncatedPut(t *testing.T, client stack.Endpoint, proxy *faultproxy.HTTP, store stack.Endpoint, bucket, key string) bool {
	t.Helper()
	const size = 1 << 20
	w := proxy.Watch(faultproxy.MethodPath("PUT", "/"+bucket+"/"+key), 1)
	conn := startRawPut(t, client, bucket, key, size)
	_, _ = conn.Write(make([]byte, size/2))
	waitEvent(t, w.Started, "the write to reach the store")
	conn.Close()
	waitEvent(t, w.Done, "the store to see the write end")
	if !storeKeepsTruncated(t, store, bucket, key+".barrier") {
		t.Fatal("the store did not publish the barrier (a truncated body sent to it directly)")
	}
	return storeHas(t, store, bucket, key)
}

func storeHas(t *testing.T, store stack.Endpoint, bucket, key string) bool {
	t.Helper()
	_, err := store.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key)})
	if err == nil {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "NoSuchKey") {
		return false
	}
	t.Fatalf("HEAD %s: %v", key, err)
	return false
}

// dialGateway opens a raw connection to the gateway at host, over TLS or
// not, with its socket tuned first (buffer sizes); the test closes it.
func dialGateway(t *testing.T, host string, overTLS bool, tune func(*net.TCPConn)) net.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	tune(raw.(*net.TCPConn))
	conn := raw
	if overTLS {
		conn = tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startRawPut opens a connection and sends the headers of an UNSIGNED-PAYLOAD
// PUT of size bytes; the caller writes the body (or not).
func startRawPut(t *testing.T, ep stack.Endpoint, bucket, key string, size int64) net.Conn {
	t.Helper()
	req, err := http.NewRequest("PUT", ep.URL+"/"+bucket+"/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	var head strings.Builder
	fmt.Fprintf(&head, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", req.URL.RequestURI(), req.URL.Host, size)
	for k, vs := range req.Header {
		head.WriteString(k + ": " + vs[0] + "\r\n")
	}
	head.WriteString("\r\n")
	if _, err := conn.Write([]byte(head.String())); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A client that sends its whole body before it reads the answer (urllib3,
// curl without Expect) still gets the S3 error of a request refused before its
// body was read: the gateway half-closes and reads what is still coming
// (gateway/linger.go) instead of closing a socket that holds unread bytes,
// which the kernel answers with a reset that throws the answer away. The
// client's send buffer is kept small so its body cannot hide in socket
// buffers: without the lingering close, its write fails with a reset. Over
// plain TCP and TLS.
func TestEarlyRefusalReachesAClientStillSending(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[overTLS], func(t *testing.T) {
			earlyRefusalsWhileSending(t, overTLS)
		})
	}
}

func earlyRefusalsWhileSending(t *testing.T, overTLS bool) {
	g := startGateway(t, gatewayOptions{TLS: overTLS})
	bucket := "t-linger-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	u, _ := url.Parse(g.URL)
	file := strings.Repeat("x", 4<<20)

	// A POST form whose checksum field is garbled: refused from the field,
	// before the file is read.
	fields := append([]formField{{"key", "garbled"}, {"x-amz-checksum-sha256", "sailorjerry"}},
		postPolicy(g.Endpoint, time.Now().Add(time.Hour), map[string]string{"bucket": bucket}, map[string]string{"key": "garbled"})...)
	form, ctype := formBody(t, fields, "f", []byte(file))
	formHead := fmt.Sprintf("POST /%s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", bucket, u.Host, ctype, len(form))

	// A PUT signed with the wrong secret, without Expect: refused from its
	// headers, before the body is read.
	bad := g.Endpoint
	bad.SecretKey = "wrong-secret-000000000000000000000000000"
	req := signedRequest(t, bad, "PUT", "/"+bucket+"/badsig", time.Now())
	var putHead strings.Builder
	fmt.Fprintf(&putHead, "PUT /%s/badsig HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", bucket, u.Host, len(file))
	for k, vs := range req.Header {
		putHead.WriteString(k + ": " + vs[0] + "\r\n")
	}
	putHead.WriteString("\r\n")

	for _, c := range []struct {
		name, request string
		status        int
		code          string
	}{
		{"form with a garbled checksum", formHead + string(form), 400, "BadDigest"},
		{"PUT with a wrong signature", putHead.String() + file, 403, "SignatureDoesNotMatch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dialGateway(t, u.Host, overTLS, func(c *net.TCPConn) { _ = c.SetWriteBuffer(64 << 10) })
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(conn, c.request); err != nil {
				t.Fatalf("sending the whole request: %v (the gateway reset the connection instead of reading to its end)", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			if code := s3ErrorCode(t, resp); resp.StatusCode != c.status || code != c.code {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, code, c.status, c.code)
			}
			if !resp.Close {
				t.Fatal("connection left open for a body that was never read")
			}
		})
	}
	assertNothingLanded(t, g, bucket, "garbled")
	assertNothingLanded(t, g, bucket, "badsig")
}
