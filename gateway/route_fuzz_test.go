package gateway

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// Request targets as real clients put them on the wire (aws cli v1 and v2,
// boto3, the Go and JavaScript SDKs, rclone, s3cmd, minio-go, presigners),
// and some hostile ones, seeding the routing and classification targets.
var wireTargets = []string{
	"/",
	"/bucket",
	"/bucket/",
	"/bucket?list-type=2&prefix=&delimiter=%2F&encoding-type=url",
	"/bucket?delimiter=%2F&max-keys=1000&prefix=dir%2F",
	"/bucket?location",
	"/bucket?versioning",
	"/bucket?uploads",
	"/bucket?versions&prefix=a",
	"/bucket?delete",
	"/bucket?delete=",
	"/bucket/key",
	"/bucket/key?x-id=GetObject",
	"/bucket/key?x-id=PutObject",
	"/bucket/dir/file%20name%2B1.txt",
	"/bucket/a+b",
	"/bucket/%C3%BC/%E6%97%A5%E6%9C%AC",
	"/bucket/key?uploads",
	"/bucket/key?uploads&x-id=CreateMultipartUpload",
	"/bucket/key?partNumber=1&uploadId=2~abc.def_-",
	"/bucket/key?uploadId=2~abc&x-id=CompleteMultipartUpload",
	"/bucket/key?tagging",
	"/bucket/key?acl",
	"/bucket/key?versionId=null",
	"/bucket/key?attributes",
	"/bucket/key?restore",
	"/bucket/key?select&select-type=2",
	"/bucket/key?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature=00",
	"/bucket/key?x-amz-copy-source=src%2Fk",
	"/bucket/key?uploadId&tagging",
	"//bucket/key",
	"/bucket/../other/key",
	"/bucket/%2e%2e/key",
	"/%2e%2e/bucket/key",
	"/bucket/a%00b",
	"/bucket/%C3%28",
	"/bucket/a%zzb",
	`/bucket/a\b`,
	"http://other.invalid/bucket/key",
	"*",
}

var wireMethods = []string{"GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"}

var fuzzDomains = []string{"s3.local"}

// plainObjectOps are the operations on an object itself, which no request
// naming an operation-selecting subresource may reach.
var plainObjectOps = map[string]bool{"PutObject": true, "CopyObject": true, "GetObject": true, "HeadObject": true, "DeleteObject": true}

// route(escaped path of bucket and key) is that bucket and key again: the
// encoding clients sign with (sigv4.AppendEscapedPath) and the gateway's
// decoding agree, in path and virtual-host style.
func FuzzRoute(f *testing.F) {
	for _, target := range wireTargets {
		path, _, _ := strings.Cut(target, "?")
		f.Add("127.0.0.1:9000", path)
		f.Add("bucket.s3.local:9000", path)
	}
	f.Fuzz(func(t *testing.T, host, path string) {
		bucket, key, ok := route(host, path, fuzzDomains)
		if !ok {
			return
		}
		if bucket == "" && key != "" {
			t.Fatalf("route(%q, %q): a key %q without a bucket", host, path, key)
		}
		if !ValidBucketName(bucket) {
			return // refused by admit
		}
		again := func(host string, path []byte) {
			b, k, ok := route(host, string(path), fuzzDomains)
			if !ok || b != bucket || k != key {
				t.Fatalf("route(%q, %q) = %q, %q; its encoding %q routes to %q, %q (ok %v)", host, path, bucket, key, path, b, k, ok)
			}
		}
		p := sigv4.AppendEscapedPath([]byte("/"), bucket)
		if key != "" {
			p = sigv4.AppendEscapedPath(append(p, '/'), key)
		}
		again("127.0.0.1:9000", p)
		if !strings.HasSuffix(bucket, ".s3.local") && bucket != "s3.local" {
			again(bucket+".s3.local", sigv4.AppendEscapedPath([]byte("/"), key))
		}
	})
}

// A request as the server reads it off the wire, routed and classified as
// admit does: no panic, and the operation agrees with what was asked.
func FuzzClassifyRequest(f *testing.F) {
	for _, target := range wireTargets {
		for _, m := range wireMethods {
			f.Add(m, target, "127.0.0.1:9000", "")
		}
		f.Add("PUT", target, "127.0.0.1:9000", "/src/key")
		f.Add("PUT", target, "127.0.0.1:9000", "src/a%2Fb?versionId=1")
		f.Add("GET", target, "bucket.s3.local", "")
	}
	srv := &Server{}
	f.Fuzz(func(t *testing.T, method, target, host, copySource string) {
		raw := method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n"
		if copySource != "" {
			raw += "x-amz-copy-source: " + copySource + "\r\n"
		}
		var req fasthttp.Request
		req.Header.DisableNormalizing()
		if req.Header.Read(bufioReader(raw+"\r\n")) != nil {
			return // not a request fasthttp reads: it never reaches admit
		}
		uri := req.URI()
		bucket, key, ok := route(string(req.Header.Host()), string(uri.PathOriginal()), fuzzDomains)
		if !ok {
			return
		}
		var queryKeys []string
		for k := range uri.QueryArgs().All() {
			queryKeys = append(queryKeys, string(k))
		}
		hdr, e := readHeaders(&req.Header, uri.QueryArgs())
		if e != nil {
			return
		}
		m := string(req.Header.Method())
		hasCopy := hdr.get("x-amz-copy-source") != ""
		op := classifyQuery(m, bucket, key, queryKeys, hasCopy)
		if viaArgs := classifyArgs(methodName(req.Header.Method()), bucket, key, uri.QueryArgs(), hasCopy); viaArgs.Name != op.Name ||
			viaArgs.Unsupported != op.Unsupported || viaArgs.Level != op.Level {
			t.Fatalf("%q: %s from the query's names, %s from the query itself", raw, op.Name, viaArgs.Name)
		}

		// The same request with its query in another order is the same
		// operation (an unsupported one may be named after another of its
		// parameters).
		reversed := slices.Clone(queryKeys)
		slices.Reverse(reversed)
		if again := classifyQuery(m, bucket, key, reversed, hasCopy); again.Unsupported != op.Unsupported || !op.Unsupported && again.Name != op.Name {
			t.Fatalf("%q: %s, and %s with the query reversed", raw, op.Name, again.Name)
		}
		wantLevel := store.LevelService
		if bucket != "" {
			wantLevel = store.LevelBucket
			if key != "" {
				wantLevel = store.LevelObject
			}
		}
		switch {
		case bucket == "" && key != "":
			t.Fatalf("%q: key %q without a bucket", raw, key)
		case op.Level != wantLevel:
			t.Fatalf("%q: %s at level %v for bucket %q key %q", raw, op.Name, op.Level, bucket, key)
		case op.Unsupported != (op.run == nil):
			t.Fatalf("%q: %s unsupported=%v with handler=%v", raw, op.Name, op.Unsupported, op.run != nil)
		case !op.Unsupported && !knownOps[op.Name]:
			t.Fatalf("%q: %s is not in the table", raw, op.Name)
		}
		switch m {
		case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete:
		default:
			if !op.Unsupported {
				t.Fatalf("%q: method %q classified as %s", raw, m, op.Name)
			}
		}
		if op.Publishes {
			// A keyed write: a write, never a read method.
			if op.Perm != PermWrite || m == http.MethodGet || m == http.MethodHead {
				t.Fatalf("%q: %s publishes with %v", raw, op.Name, op.Perm)
			}
		}
		if (m == http.MethodGet || m == http.MethodHead) && op.Body != BodyNone {
			t.Fatalf("%q: %s reads a body", raw, op.Name)
		}
		for _, q := range queryKeys {
			if (knownUnsupported[q] || slices.Contains(selectingSubresources, q)) && plainObjectOps[op.Name] {
				t.Fatalf("%q: ?%s selects another operation, classified as %s", raw, q, op.Name)
			}
		}
		if op.Name == "CopyObject" && !hasCopy || op.Name == "PutObject" && hasCopy {
			t.Fatalf("%q: %s with copy source %v", raw, op.Name, hasCopy)
		}
		if op.FormAuthenticated && (m != http.MethodPost || key != "") {
			t.Fatalf("%q: %s authenticated by a form", raw, op.Name)
		}
		if wantLevel == store.LevelObject && srv.checkKey(key) == nil {
			// An accepted key is what its escaped form routes to.
			enc := string(sigv4.AppendEscapedPath([]byte("/"+bucket+"/"), key))
			var again fasthttp.Request
			again.Header.DisableNormalizing()
			if err := again.Header.Read(bufioReader("GET " + enc + " HTTP/1.1\r\nHost: h\r\n\r\n")); err != nil {
				t.Fatalf("key %q: its escaped target %q is not read: %v", key, enc, err)
			}
			b, k, ok := route(string(again.Header.Host()), string(again.URI().PathOriginal()), nil)
			if !ok || b != bucket || k != key {
				t.Fatalf("key %q: its escaped target %q routes to %q, %q (ok %v)", key, enc, b, k, ok)
			}
			if strings.IndexByte(key, 0) >= 0 {
				t.Fatalf("accepted key %q has a NUL byte", key)
			}
		}
	})
}

// A copy source the gateway accepts names a valid bucket and a key, and the
// source spelled back in the escaped form parses to the same.
func FuzzParseCopySource(f *testing.F) {
	for _, s := range []string{"/src/key", "src/key", "src/a%2Fb?versionId=1", "/src/%C3%BC", "src/", "/src", "%zz/k", "/../k", "src/a%00", "a/b?c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		bucket, key, e := parseCopySource(v)
		if e != nil {
			if e.Status != http.StatusBadRequest {
				t.Fatalf("%q: %d", v, e.Status)
			}
			return
		}
		if !ValidBucketName(bucket) || key == "" {
			t.Fatalf("%q: bucket %q key %q", v, bucket, key)
		}
		enc := string(sigv4.AppendEscapedPath([]byte("/"+bucket+"/"), key))
		if b, k, e := parseCopySource(enc); e != nil || b != bucket || k != key {
			t.Fatalf("%q: %q, %q; spelled back as %q: %q, %q, %v", v, bucket, key, enc, b, k, e)
		}
	})
}
