package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Regression tests for the gateway bugs the hostile-request corpus
// (internal/badinput, TestBadInputCorpus) found, each on its own.

// rawAnswer writes raw on a fresh connection, ends the client's side, and
// reads the first answer: its status, its S3 error code ("" for none) and
// its body.
func rawAnswer(t *testing.T, url string, raw string) (int, string, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	for err == nil && resp.StatusCode == http.StatusContinue {
		resp, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	code := ""
	if i, j := strings.Index(string(b), "<Code>"), strings.Index(string(b), "</Code>"); i >= 0 && j > i &&
		strings.Contains(string(b), "<Error>") {
		code = string(b[i+len("<Code>") : j])
	}
	return resp.StatusCode, code, string(b)
}

// A request fasthttp cannot read was answered with its plain text ("Error
// when parsing request", "Too big request header"): S3 clients expect an S3
// XML error, with S3's code for it.
func TestUnparsableRequestIsAnsweredInS3XML(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	head := "PUT /b/k HTTP/1.1\r\nHost: h\r\n"
	for _, c := range []struct {
		name, raw string
		code      string
	}{
		{"two Content-Lengths", head + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", "BadRequest"},
		{"Content-Length not a number", head + "Content-Length: 1x\r\n\r\na", "BadRequest"},
		{"Transfer-Encoding: xchunked", head + "Transfer-Encoding: xchunked\r\n\r\n", "BadRequest"},
		{"a request target without '/'", "GET b/k HTTP/1.1\r\nHost: h\r\n\r\n", "BadRequest"},
		{"a 20 KiB header", head + "X-Pad: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", "RequestHeaderSectionTooLarge"},
		{"a body shorter than its Content-Length", head + "Content-Length: 100\r\n\r\nshort", "IncompleteBody"},
	} {
		status, code, body := rawAnswer(t, g.URL, c.raw)
		if status != 400 || code != c.code {
			t.Errorf("%s: %d %q, want 400 %s\n%s", c.name, status, code, c.code, body)
		}
	}
}

// A key with a NUL byte reached PostgreSQL, whose text cannot hold it: the
// lease failed and the client got 500 InternalError. It is refused up front,
// as a key, a copy source and a DeleteObjects key alike.
func TestKeyWithNULIsRefused(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-nul-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	if r := putRaw(g.Endpoint, bucket, "a%00b", []byte("x"), nil); r.Status != 400 || r.Code != "InvalidArgument" {
		t.Errorf("PUT a%%00b: %+v", r)
	}
	if r := putRaw(g.Endpoint, bucket, "copy", nil, map[string]string{"x-amz-copy-source": bucket + "/a%00b"}); r.Status != 400 || r.Code != "InvalidArgument" {
		t.Errorf("copy from a%%00b: %+v", r)
	}
	if r := doRaw(g.Endpoint, "DELETE", "/"+bucket+"/a%00b", nil, nil); r.Status != 400 || r.Code != "InvalidArgument" {
		t.Errorf("DELETE a%%00b: %+v", r)
	}
	var n int
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT count(*) FROM attempts WHERE bucket = $1`, bucket).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d attempts recorded (%v)", n, err)
	}
}

// encoding/xml reads a struct's fields under any root element, so a
// DeleteObjects document with another root deleted its <Object>s, and a
// CompleteMultipartUpload whose root was <Delete> was sent on, and the store
// (reading it as leniently) published the upload. Both are MalformedXML,
// the Complete before any lease.
func TestDocumentOfAnotherRootIsMalformedXML(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-root-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	if r := putRaw(g.Endpoint, bucket, "victim", []byte("v"), nil); r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	doc := []byte("<CompleteMultipartUpload><Object><Key>victim</Key></Object></CompleteMultipartUpload>")
	sum := md5.Sum(doc)
	r := doRaw(g.Endpoint, "POST", "/"+bucket+"?delete", doc, map[string]string{"Content-MD5": base64.StdEncoding.EncodeToString(sum[:])})
	if r.Status != 400 || r.Code != "MalformedXML" {
		t.Errorf("DeleteObjects under <CompleteMultipartUpload>: %+v", r)
	}
	if _, _, ok := storeGet(t, g.Store, bucket, "victim"); !ok {
		t.Error("the object was deleted")
	}

	key := "upload"
	c := g.S3Client()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("part")})
	if err != nil {
		t.Fatal(err)
	}
	path := "/" + bucket + "/" + key + "?uploadId=" + url.QueryEscape(*up.UploadId)
	for _, root := range []string{"Delete", "X"} {
		doc := "<" + root + "><Part><PartNumber>1</PartNumber><ETag>" + *part.ETag + "</ETag></Part></" + root + ">"
		if r := doRaw(g.Endpoint, "POST", path, []byte(doc), nil); r.Status != 400 || r.Code != "MalformedXML" {
			t.Errorf("Complete under <%s>: %+v", root, r)
		}
		requireAbsent(t, g.Store, bucket, key, "Complete under <"+root+">")
	}
	if n := len(attemptsOf(t, bucket, key)); n != 1 { // the upload's own
		t.Errorf("%d attempts: a refused Complete took the lease", n)
	}
	doc = []byte("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>" + *part.ETag + "</ETag></Part></CompleteMultipartUpload>")
	if r := doRaw(g.Endpoint, "POST", path, doc, nil); r.Status != 200 {
		t.Errorf("the proper Complete: %+v", r)
	}
}

// A Complete's part list must name parts in ascending order, as S3
// requires: one out of order is 400 InvalidPartOrder, an empty list 400
// MalformedXML, both before any lease (the store answered an empty list 404
// NoSuchUpload). A part named twice in a row is sent on, as ceph/s3-tests
// expects (test_multipart_resend_first_finishes_last).
func TestCompletePartListOrder(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-partorder-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	key := "upload"
	c := g.S3Client()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	etags := map[int32]string{}
	for n, body := range map[int32][]byte{1: bytes.Repeat([]byte("1"), 5<<20), 2: []byte("two")} {
		part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId, PartNumber: aws.Int32(n), Body: bytes.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		etags[n] = *part.ETag
	}
	doc := func(numbers ...int32) []byte {
		var b strings.Builder
		b.WriteString("<CompleteMultipartUpload>")
		for _, n := range numbers {
			fmt.Fprintf(&b, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", n, etags[n])
		}
		b.WriteString("</CompleteMultipartUpload>")
		return []byte(b.String())
	}
	path := "/" + bucket + "/" + key + "?uploadId=" + url.QueryEscape(*up.UploadId)
	for _, tc := range []struct {
		name    string
		numbers []int32
		code    string
	}{
		{"parts 2, 1", []int32{2, 1}, "InvalidPartOrder"},
		{"parts 1, 2, 1", []int32{1, 2, 1}, "InvalidPartOrder"},
		{"no part", nil, "MalformedXML"},
	} {
		if r := doRaw(g.Endpoint, "POST", path, doc(tc.numbers...), nil); r.Status != 400 || r.Code != tc.code {
			t.Errorf("Complete with %s: %+v, want 400 %s", tc.name, r, tc.code)
		}
		requireAbsent(t, g.Store, bucket, key, "Complete with "+tc.name)
	}
	if n := len(attemptsOf(t, bucket, key)); n != 1 { // the upload's own
		t.Errorf("%d attempts: a refused Complete took the lease", n)
	}
	if r := doRaw(g.Endpoint, "POST", path, doc(1, 2, 2), nil); r.Status != 200 {
		t.Fatalf("the proper Complete: %+v", r)
	}
	if body, _, ok := storeGet(t, g.Store, bucket, key); !ok || len(body) != 5<<20+3 {
		t.Errorf("the published object: %d bytes (present %v), want %d", len(body), ok, 5<<20+3)
	}
}

// A CompleteMultipartUpload's uploadId was looked up in PostgreSQL as it
// came: one with a NUL byte or not UTF-8 failed the query, and the client
// got 500 InternalError. No store makes such an id: NoSuchUpload.
func TestCompleteOfAnUploadIDThatIsNotTextIsNoSuchUpload(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-uploadid-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	doc := []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"00"</ETag></Part></CompleteMultipartUpload>`)
	for _, id := range []string{"%00", "a%00b", "%FF", "%C3%28"} {
		if r := doRaw(g.Endpoint, "POST", "/"+bucket+"/k?uploadId="+id, doc, nil); r.Status != 404 || r.Code != "NoSuchUpload" {
			t.Errorf("uploadId=%s: %+v", id, r)
		}
	}
}

// A path-style request whose bucket segment is empty ("//bucket/key") was
// routed to the service level: a GET was answered as ListBuckets, a PUT as
// 501 NotImplemented. It is InvalidURI.
func TestEmptyBucketSegmentIsInvalidURI(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-slash-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	for _, method := range []string{"GET", "PUT", "DELETE"} {
		if r := doRaw(g.Endpoint, method, "//"+bucket+"/k", nil, nil); r.Status != 400 || r.Code != "InvalidURI" {
			t.Errorf("%s //%s/k: %+v", method, bucket, r)
		}
	}
	if r := doRaw(g.Endpoint, "GET", "/", nil, nil); r.Status != 200 {
		t.Errorf("ListBuckets: %+v", r)
	}
}

// An absolute-form request target (PUT http://other.invalid/bucket/key)
// names a host of its own, which HTTP says wins over the Host header; the
// gateway verified and routed by the Host header and wrote the object. A
// target whose host is not the Host header is InvalidURI; one that agrees
// is served.
func TestAbsoluteFormTargetOfAnotherHostIsRefused(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-absolute-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	host := strings.TrimPrefix(g.URL, "http://")
	for _, c := range []struct {
		key, authority string
		status         int
	}{
		{"other", "other.invalid", 400},
		{"other-port", host + "1", 400},
		{"same", host, 200},
	} {
		head := rawSignedHead(t, g.Endpoint, "PUT", "/"+bucket+"/"+c.key, 4, nil)
		raw := strings.Replace(string(head), "PUT /", "PUT http://"+c.authority+"/", 1) + "body"
		status, code, body := rawAnswer(t, g.URL, raw)
		if status != c.status || status == 400 && code != "InvalidURI" {
			t.Errorf("PUT http://%s/%s/%s: %d %s\n%s", c.authority, bucket, c.key, status, code, body)
		}
		if _, _, ok := storeGet(t, g.Store, bucket, c.key); ok != (c.status == 200) {
			t.Errorf("%s: at the store: %v", c.key, ok)
		}
	}
}

// A GET or HEAD with a body (signed and verified) was sent on with it, and
// the store client's read connections carry no body: the client got 503
// ServiceUnavailable. The body is verified and not sent on.
func TestReadWithABodyIsServed(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-readbody-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	if r := putRaw(g.Endpoint, bucket, "k", []byte("v"), nil); r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	for _, c := range []struct {
		method, key string
		status      int
	}{{"GET", "k", 200}, {"HEAD", "k", 200}, {"GET", "absent", 404}, {"GET", "", 200}} {
		if r := doRaw(g.Endpoint, c.method, "/"+bucket+"/"+c.key, []byte("a body"), nil); r.Status != c.status {
			t.Errorf("%s /%s/%s with a body: %+v", c.method, bucket, c.key, r)
		}
	}
}

// A PutObject or UploadPart declaring more than S3's 5 GiB took a lease and
// was sent to the store: SeaweedFS refused a plain one itself, an aws-chunked
// one streamed until its body ended (a client sending 5 TiB would hold the
// key's lease while it did). It is EntityTooLarge from its headers, before
// the body and any lease.
func TestPutOver5GiBIsEntityTooLarge(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-toolarge-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	const size = 6 << 30
	for _, c := range []struct {
		name  string
		extra map[string]string
		body  int
	}{
		{"Expect: 100-continue", map[string]string{"Expect": "100-continue"}, 0},
		{"16 KiB of the body sent", nil, 16 << 10},
		{"aws-chunked", map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": "6442450944",
			"X-Amz-Content-Sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "X-Amz-Trailer": "x-amz-checksum-crc32", "Expect": "100-continue"}, 0},
	} {
		head := string(rawSignedHead(t, g.Endpoint, "PUT", "/"+bucket+"/k", size+1<<20, c.extra))
		if c.extra["X-Amz-Content-Sha256"] != "" { // rawSignedHead signs UNSIGNED-PAYLOAD: sign the streaming mode instead
			head = streamingHead(t, g, bucket, size+1<<20, c.extra)
		}
		status, code, body := rawAnswer(t, g.URL, head+strings.Repeat("x", c.body))
		if status != 400 || code != "EntityTooLarge" {
			t.Errorf("%s: %d %s\n%s", c.name, status, code, body)
		}
	}
	requireAbsent(t, g.Store, bucket, "k", "PUT of 6 GiB")
	if n := len(attemptsOf(t, bucket, "k")); n != 0 {
		t.Errorf("%d attempts", n)
	}
}

// streamingHead is rawSignedHead for an unsigned aws-chunked payload with a
// trailer (STREAMING-UNSIGNED-PAYLOAD-TRAILER), the SDKs' default form.
func streamingHead(t *testing.T, g *testGateway, bucket string, size int64, extra map[string]string) string {
	t.Helper()
	const mode = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	req, err := http.NewRequest("PUT", g.URL+"/"+bucket+"/k", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	creds := aws.Credentials{AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, mode, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("PUT " + req.URL.RequestURI() + " HTTP/1.1\r\nHost: " + req.URL.Host + "\r\nContent-Length: " + strconv.FormatInt(size, 10) + "\r\n")
	for k, vs := range req.Header {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	return b.String() + "\r\n"
}

// fasthttp printed a request it could not read, its bytes included (the
// Authorization header, a signature a reader of the log could replay), to
// the process's stderr through the standard logger, outside the gateway's
// JSON log. Its lines go to the JSON log, without the request's bytes.
func TestUnreadableRequestIsNotLoggedWithItsBytes(t *testing.T) {
	g := startGatewayProcess(t, testenv.Store(t), "FENCEGATE_LOG_LEVEL=info")
	marker := strings.Repeat("5ee", 21) + "d"
	head := "PUT /b/k HTTP/1.1\r\nHost: h\r\nX-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\nX-Amz-Date: 20260101T000000Z\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=" + g.AccessKey + "/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + marker + "\r\n"
	for _, raw := range []string{
		head + "Content-Length: 1x\r\n\r\nx",
		head + "X-Pad: " + strings.Repeat("a", 20<<10) + "\r\n\r\n",
		head + "Transfer-Encoding: xchunked\r\n\r\n",
	} {
		if status, _, body := rawAnswer(t, g.URL, raw); status != 400 {
			t.Fatalf("%d\n%s", status, body)
		}
	}
	if status, _, _ := rawAnswer(t, g.URL, "GET /healthz-is-not-here HTTP/1.1\r\nHost: h\r\n\r\n"); status == 0 {
		t.Fatal("the gateway stopped answering")
	}
	log, err := os.ReadFile(g.proc.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), marker) {
		t.Errorf("the log holds the request's signature:\n%s", log)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if line != "" && !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON: %.300s", line)
		}
	}
}

// A PUT whose body comes chunked (Transfer-Encoding, no Content-Length) is
// refused as S3 refuses it, 411 MissingContentLength, whether or not the
// client signed Transfer-Encoding: botocore signing with awscrt signs every
// header it sends, that one included, and fencegate's canonical request
// named it twice ("chunked,chunked"), answering 403 SignatureDoesNotMatch.
func TestChunkedBodySignedWithItsTransferEncoding(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-te-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	host := strings.TrimPrefix(g.URL, "http://")
	now := time.Now().UTC()
	amzDate, date := now.Format("20060102T150405Z"), now.Format("20060102")
	for _, signed := range []string{"host;transfer-encoding;x-amz-content-sha256;x-amz-date", "host;x-amz-content-sha256;x-amz-date"} {
		canonical := "PUT\n/" + bucket + "/k\n\nhost:" + host + "\n"
		if strings.Contains(signed, "transfer-encoding") {
			canonical += "transfer-encoding:chunked\n"
		}
		canonical += "x-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:" + amzDate + "\n\n" + signed + "\nUNSIGNED-PAYLOAD"
		sum := sha256.Sum256([]byte(canonical))
		scope := date + "/us-east-1/s3/aws4_request"
		signature := postSignature(g.SecretKey, date, "AWS4-HMAC-SHA256\n"+amzDate+"\n"+scope+"\n"+hex.EncodeToString(sum[:]))
		raw := "PUT /" + bucket + "/k HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n" +
			"X-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\nX-Amz-Date: " + amzDate + "\r\n" +
			"Authorization: AWS4-HMAC-SHA256 Credential=" + g.AccessKey + "/" + scope + ", SignedHeaders=" + signed + ", Signature=" + signature + "\r\n" +
			"\r\n3\r\nbar\r\n0\r\n\r\n"
		if status, code, body := rawAnswer(t, g.URL, raw); status != 411 || code != "MissingContentLength" {
			t.Errorf("signed headers %s: %d %s, want 411 MissingContentLength\n%s", signed, status, code, body)
		}
	}
}
