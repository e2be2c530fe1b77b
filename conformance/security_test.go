package conformance

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

// The attacks of the security issue, each sent as raw HTTP the way real
// clients (aws cli, boto3: lower-case names) and attackers (odd case, added
// unsigned headers) send it, and each checked at the store: nothing copied,
// created, deleted, made public or tagged.

// caseSpellings are the spellings every header the gateway reads is tried in.
func caseSpellings(lower string) []string {
	mixed := []byte(lower)
	for i := range mixed {
		if i%2 == 1 {
			mixed[i] = bytes.ToUpper(mixed[i : i+1])[0]
		}
	}
	return []string{lower, strings.ToUpper(lower), http.CanonicalHeaderKey(lower), string(mixed)}
}

// rawSigned builds a request whose headers keep exactly the given names (Go
// would canonicalize them), signed over all of them.
func rawSigned(t *testing.T, ep stack.Endpoint, method, path string, body []byte, headers [][2]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, ep.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body, req.ContentLength = nil, 0
	}
	for _, h := range headers {
		req.Header[h[0]] = append(req.Header[h[0]], h[1])
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, hash, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

// presigned returns a presigned URL for method on path, signing only host.
func presigned(t *testing.T, ep stack.Endpoint, method, path string) string {
	t.Helper()
	req, err := http.NewRequest(method, ep.URL+path+"?X-Amz-Expires=300", nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	u, _, err := s3Signer().PresignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// sendExpect sends req and requires the status and S3 error code.
func sendExpect(t *testing.T, what string, req *http.Request, status int, code string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if code == "" {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Fatalf("%s: %d, want %d\n%s", what, resp.StatusCode, status, body)
		}
		return
	}
	if got := s3ErrorCode(t, resp); resp.StatusCode != status || got != code {
		t.Fatalf("%s: %d %s, want %d %s", what, resp.StatusCode, got, status, code)
	}
}

// storeObject reads a key straight from the store: its body and metadata, or
// ok=false when it is absent.
func storeGet(t *testing.T, store stack.Endpoint, bucket, key string) (body string, out *s3.GetObjectOutput, ok bool) {
	t.Helper()
	o, err := store.S3Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound") {
			return "", nil, false
		}
		t.Fatalf("store GET %s/%s: %v", bucket, key, err)
	}
	b, _ := io.ReadAll(o.Body)
	o.Body.Close()
	return string(b), o, true
}

func requireAbsent(t *testing.T, store stack.Endpoint, bucket, key, what string) {
	t.Helper()
	if _, _, ok := storeGet(t, store, bucket, key); ok {
		t.Fatalf("%s: %s/%s exists at the store", what, bucket, key)
	}
}

type securityFixture struct {
	g                  *testGateway
	dropbox, secret    string
	rw, writeOnly      stack.Endpoint // rw: read+write on dropbox only
	secretKey, secret2 string
}

func newSecurityFixture(t *testing.T) *securityFixture {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	fx := &securityFixture{g: g, dropbox: "t-dropbox-" + randomSuffix(), secret: "t-secret-" + randomSuffix()}
	createBucket(t, g.Endpoint, fx.dropbox)
	createBucket(t, g.Endpoint, fx.secret)
	fx.secretKey = "s.txt"
	if _, err := g.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &fx.secret, Key: &fx.secretKey, Body: strings.NewReader("the secret")}); err != nil {
		t.Fatal(err)
	}
	fx.rw = g.endpointWithKey(t, "dropbox rw", meta.Grant{Bucket: fx.dropbox, Permission: meta.PermRead}, meta.Grant{Bucket: fx.dropbox, Permission: meta.PermWrite})
	fx.writeOnly = g.endpointWithKey(t, "dropbox write only", meta.Grant{Bucket: fx.dropbox, Permission: meta.PermWrite})
	return fx
}

// 1. A copy (and an UploadPartCopy) from a bucket the key has no grant on is
// refused whatever the case of x-amz-copy-source.
func TestSecurityCopySourceAnyCase(t *testing.T) {
	fx := newSecurityFixture(t)
	src := "/" + fx.secret + "/" + fx.secretKey
	for i, name := range caseSpellings("x-amz-copy-source") {
		dst := "stolen-" + string(rune('a'+i))
		sendExpect(t, "CopyObject with "+name, rawSigned(t, fx.rw, "PUT", "/"+fx.dropbox+"/"+dst, nil, [][2]string{{name, src}}), 403, "AccessDenied")
		requireAbsent(t, fx.g.Store, fx.dropbox, dst, "CopyObject with "+name)
	}
	// UploadPartCopy into an upload the key opened itself.
	ctx := context.Background()
	key := "stolen-part"
	up, err := fx.rw.S3Client().CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &fx.dropbox, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range caseSpellings("x-amz-copy-source") {
		path := "/" + fx.dropbox + "/" + key + "?partNumber=1&uploadId=" + url.QueryEscape(*up.UploadId)
		sendExpect(t, "UploadPartCopy with "+name, rawSigned(t, fx.rw, "PUT", path, nil, [][2]string{{name, src}}), 403, "AccessDenied")
	}
	parts, err := fx.g.Store.S3Client().ListParts(ctx, &s3.ListPartsInput{Bucket: &fx.dropbox, Key: &key, UploadId: up.UploadId})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts.Parts) != 0 {
		t.Fatalf("UploadPartCopy reached the store: %d parts", len(parts.Parts))
	}
	// The same copy with a grant on the source works (the check is not a blanket refusal).
	sendExpect(t, "own copy", rawSigned(t, fx.rw, "PUT", "/"+fx.dropbox+"/copy", nil, [][2]string{{"x-amz-copy-source", "/" + fx.dropbox + "/" + key + "-absent"}}), 404, "NoSuchKey")
}

// The client's own conditions are honoured in every case: If-None-Match: * on
// an existing key is S3's 412, never a silent overwrite or a 503.
func TestSecurityClientConditionsAnyCase(t *testing.T) {
	fx := newSecurityFixture(t)
	key := "cond"
	path := "/" + fx.dropbox + "/" + key
	sendExpect(t, "first PUT", rawSigned(t, fx.rw, "PUT", path, []byte("v1"), nil), 200, "")
	for _, name := range caseSpellings("if-none-match") {
		sendExpect(t, "PUT "+name+": *", rawSigned(t, fx.rw, "PUT", path, []byte("overwrite"), [][2]string{{name, "*"}}), 412, "PreconditionFailed")
	}
	for _, name := range caseSpellings("if-match") {
		sendExpect(t, "PUT "+name+": stale", rawSigned(t, fx.rw, "PUT", path, []byte("overwrite"), [][2]string{{name, `"00000000000000000000000000000000"`}}), 412, "PreconditionFailed")
	}
	for _, name := range caseSpellings("x-amz-copy-source-if-match") {
		sendExpect(t, "copy "+name+": stale", rawSigned(t, fx.rw, "PUT", path+"-copy", nil,
			[][2]string{{"x-amz-copy-source", path}, {name, `"00000000000000000000000000000000"`}}), 412, "PreconditionFailed")
		requireAbsent(t, fx.g.Store, fx.dropbox, key+"-copy", "copy with a stale "+name)
	}
	if body, _, _ := storeGet(t, fx.g.Store, fx.dropbox, key); body != "v1" {
		t.Fatalf("the object was overwritten: %q", body)
	}
	// x-amz-metadata-directive in any case: REPLACE takes the request's metadata.
	for i, name := range caseSpellings("x-amz-metadata-directive") {
		dst := key + "-meta-" + string(rune('a'+i))
		sendExpect(t, "copy with "+name, rawSigned(t, fx.rw, "PUT", "/"+fx.dropbox+"/"+dst, nil,
			[][2]string{{"x-amz-copy-source", path}, {name, "REPLACE"}, {"x-amz-meta-Color", "blue"}}), 200, "")
		_, o, ok := storeGet(t, fx.g.Store, fx.dropbox, dst)
		if !ok || o.Metadata["color"] != "blue" {
			t.Fatalf("copy with %s: metadata %v", name, o.Metadata)
		}
	}
}

// 2. Unsigned x-amz-* headers never reach the store: added to a presigned URL
// or to a replayed header-signed request, they are refused.
func TestSecurityUnsignedHeaders(t *testing.T) {
	fx := newSecurityFixture(t)
	path := "/" + fx.dropbox + "/presigned"
	for _, extra := range [][2]string{
		{"X-Amz-Copy-Source", "/" + fx.secret + "/" + fx.secretKey},
		{"x-amz-meta-evil", "1"},
		{"X-Amz-Tagging", "evil=1"},
		{"x-amz-acl", "public-read"},
		{"X-AMZ-WEBSITE-REDIRECT-LOCATION", "/elsewhere"},
	} {
		u := presigned(t, fx.rw, "PUT", path)
		req, _ := http.NewRequest("PUT", u, strings.NewReader("body"))
		req.Header[extra[0]] = []string{extra[1]}
		sendExpect(t, "presigned PUT + unsigned "+extra[0], req, 403, "AccessDenied")

		replay := rawSigned(t, fx.rw, "PUT", path, []byte("body"), nil)
		replay.Header[extra[0]] = []string{extra[1]}
		sendExpect(t, "signed PUT + unsigned "+extra[0], replay, 403, "AccessDenied")
	}
	requireAbsent(t, fx.g.Store, fx.dropbox, "presigned", "unsigned headers")
	// The presigned URL alone works, and so does a presigned GET with an
	// unsigned Range (not an x-amz-* header: S3 accepts it).
	req, _ := http.NewRequest("PUT", presigned(t, fx.rw, "PUT", path), strings.NewReader("body"))
	sendExpect(t, "presigned PUT", req, 200, "")
	get, _ := http.NewRequest("GET", presigned(t, fx.rw, "GET", path), nil)
	get.Header.Set("Range", "bytes=0-1")
	sendExpect(t, "presigned ranged GET", get, 206, "")
	_, o, _ := storeGet(t, fx.g.Store, fx.dropbox, "presigned")
	delete(o.Metadata, "fencegate-attempt") // fencegate's own attribution
	if len(o.Metadata) != 0 || o.WebsiteRedirectLocation != nil {
		t.Fatalf("metadata reached the store: %v", o.Metadata)
	}
}

// 3. An empty key never addresses the bucket: DeleteObjects with <Key></Key>
// is a per-key error and the bucket survives; object operations on an empty,
// over-long or folded key get S3's errors.
func TestSecurityObjectKeysNeverAddressABucket(t *testing.T) {
	fx := newSecurityFixture(t)
	empty := "t-empty-" + randomSuffix()
	createBucket(t, fx.g.Endpoint, empty)
	ep := fx.g.endpointWithKey(t, "write only on empty", meta.Grant{Bucket: empty, Permission: meta.PermWrite})
	doc := []byte(`<Delete><Object><Key></Key></Object></Delete>`)
	req := rawSigned(t, ep, "POST", "/"+empty+"?delete", doc, [][2]string{{"content-md5", md5b64(doc)}})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("<Code>UserKeyMustBeSpecified</Code>")) {
		t.Fatalf("DeleteObjects with an empty key: %d %s", resp.StatusCode, body)
	}
	if _, err := fx.g.Store.S3Client().HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: &empty}); err != nil {
		t.Fatalf("the bucket is gone: %v", err)
	}
	long := strings.Repeat("k", 1025)
	sendExpect(t, "over-long key", rawSigned(t, fx.rw, "PUT", "/"+fx.dropbox+"/"+long, []byte("x"), nil), 400, "KeyTooLongError")
	sendExpect(t, "invalid UTF-8 key", rawSigned(t, fx.rw, "PUT", "/"+fx.dropbox+"/a%FFb", []byte("x"), nil), 400, "InvalidArgument")
	// 7. Spellings the store folds into one object are refused, so two
	// "different" keys can never race on one object under two leases.
	for _, key := range []string{"alias//y", "/alias/y", "alias/./y", "alias/x/../y", `alias\y`} {
		p := "/" + fx.dropbox + "/" + strings.ReplaceAll(url.PathEscape(key), "%2F", "/")
		sendExpect(t, "PUT "+key, rawSigned(t, fx.rw, "PUT", p, []byte("x"), nil), 400, "InvalidArgument")
		doc := []byte(`<Delete><Object><Key>` + key + `</Key></Object></Delete>`)
		resp, err := http.DefaultClient.Do(rawSigned(t, fx.rw, "POST", "/"+fx.dropbox+"?delete", doc, [][2]string{{"Content-MD5", md5b64(doc)}}))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(body, []byte("<Code>InvalidArgument</Code>")) {
			t.Fatalf("DeleteObjects of %q: %s", key, body)
		}
		sendExpect(t, "copy from "+key, rawSigned(t, fx.rw, "PUT", "/"+fx.dropbox+"/dst", nil,
			[][2]string{{"x-amz-copy-source", "/" + fx.dropbox + "/" + url.PathEscape(key)}}), 400, "InvalidArgument")
	}
	requireAbsent(t, fx.g.Store, fx.dropbox, "alias/y", "folded spellings")
}

// 6. ACLs need admin: a write key cannot make an object public at the store,
// with a canned ACL or a grant, in any header case, in the query of a
// presigned URL, or with PutObjectAcl.
func TestSecurityACLNeedsAdmin(t *testing.T) {
	fx := newSecurityFixture(t)
	path := "/" + fx.dropbox + "/public"
	for _, name := range append(caseSpellings("x-amz-acl"), caseSpellings("x-amz-grant-read")...) {
		val := "public-read"
		if strings.EqualFold(name, "x-amz-grant-read") {
			val = `uri="http://acs.amazonaws.com/groups/global/AllUsers"`
		}
		sendExpect(t, "PUT with "+name, rawSigned(t, fx.writeOnly, "PUT", path, []byte("x"), [][2]string{{name, val}}), 403, "AccessDenied")
	}
	// Hoisted into a presigned URL's query (signed there).
	req, _ := http.NewRequest("PUT", fx.rw.URL+path+"?X-Amz-Expires=300&x-amz-acl=public-read", nil)
	creds := aws.Credentials{AccessKeyID: fx.rw.AccessKey, SecretAccessKey: fx.rw.SecretKey}
	u, _, err := s3Signer().PresignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	put, _ := http.NewRequest("PUT", u, strings.NewReader("x"))
	sendExpect(t, "presigned PUT with x-amz-acl in the query", put, 403, "AccessDenied")
	requireAbsent(t, fx.g.Store, fx.dropbox, "public", "ACL writes")
	sendExpect(t, "plain PUT", rawSigned(t, fx.writeOnly, "PUT", path, []byte("x"), nil), 200, "")
	acl := []byte(`<AccessControlPolicy><AccessControlList/></AccessControlPolicy>`)
	sendExpect(t, "PutObjectAcl", rawSigned(t, fx.writeOnly, "PUT", path+"?acl", acl, [][2]string{{"x-amz-acl", "public-read"}}), 403, "AccessDenied")
	sendExpect(t, "PutObjectAcl without a header", rawSigned(t, fx.writeOnly, "PUT", path+"?acl", acl, nil), 403, "AccessDenied")
	// Anonymous GET straight at the store: still private.
	resp, err := http.Get(fx.g.Store.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Fatal("the object is public at the store")
	}
}

// A header repeated in two cases is merged or refused, never half-seen: a
// second, differently-cased x-amz-copy-source cannot hide the first.
func TestSecurityRepeatedHeaders(t *testing.T) {
	fx := newSecurityFixture(t)
	req := rawSigned(t, fx.rw, "PUT", "/"+fx.dropbox+"/twice", nil, [][2]string{
		{"X-Amz-Copy-Source", "/" + fx.dropbox + "/nothing"}, {"x-amz-copy-source", "/" + fx.secret + "/" + fx.secretKey}})
	sendExpect(t, "two copy sources", req, 400, "InvalidArgument")
	requireAbsent(t, fx.g.Store, fx.dropbox, "twice", "two copy sources")
}

// ListBuckets shows the key as the owner, not the store's identity, and only
// the key's buckets.
func TestSecurityListBucketsOwner(t *testing.T) {
	fx := newSecurityFixture(t)
	out, err := fx.rw.S3Client().ListBuckets(context.Background(), &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Owner == nil || aws.ToString(out.Owner.ID) != fx.rw.AccessKey {
		t.Fatalf("owner %+v, want the access key %s", out.Owner, fx.rw.AccessKey)
	}
	if len(out.Buckets) != 1 || aws.ToString(out.Buckets[0].Name) != fx.dropbox {
		t.Fatalf("buckets %+v", out.Buckets)
	}
}

// The start-up probe's bucket is fencegate's own: ListBuckets does not show
// it to a key granted every bucket (ceph/s3-tests' test_list_buckets_paginated
// counted it), only to a key granted that bucket by name.
func TestListBucketsHidesTheProbeBucket(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	mine := "t-listed-" + randomSuffix()
	createBucket(t, g.Endpoint, mine)
	if _, err := g.Store.S3Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("fencegate-probe")}); err != nil {
		t.Fatalf("the probe's bucket is not at the store: %v", err)
	}
	names := func(ep stack.Endpoint) map[string]bool {
		out, err := ep.S3Client().ListBuckets(ctx, &s3.ListBucketsInput{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, b := range out.Buckets {
			seen[aws.ToString(b.Name)] = true
		}
		return seen
	}
	if seen := names(g.Endpoint); !seen[mine] || seen["fencegate-probe"] {
		t.Fatalf("a key granted every bucket lists %v: want %s and not fencegate-probe", seen, mine)
	}
	ep := g.endpointWithKey(t, "probe reader", meta.Grant{Bucket: "fencegate-probe", Permission: meta.PermRead})
	if seen := names(ep); !seen["fencegate-probe"] || len(seen) != 1 {
		t.Fatalf("a key granted fencegate-probe by name lists %v", seen)
	}
}

// ListBuckets pages with max-buckets and a continuation token over the
// buckets the key may see (SeaweedFS ignores max-buckets; fencegate pages
// what it filtered, so a page is never short for a bucket it hid), and
// filters by prefix.
func TestListBucketsPaginated(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	prefix := "t-page-" + randomSuffix() + "-"
	want := []string{prefix + "a", prefix + "b", prefix + "c"}
	for _, b := range want {
		createBucket(t, g.Endpoint, b)
	}
	createBucket(t, g.Endpoint, "t-other-"+randomSuffix())
	narrow := g.endpointWithKey(t, "two of three", meta.Grant{Bucket: want[0], Permission: meta.PermRead}, meta.Grant{Bucket: want[2], Permission: meta.PermRead})
	pages := func(ep stack.Endpoint, max int32) (got []string, calls int) {
		in := &s3.ListBucketsInput{MaxBuckets: aws.Int32(max), Prefix: aws.String(prefix)}
		for {
			out, err := ep.S3Client().ListBuckets(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			calls++
			if len(out.Buckets) > int(max) || len(out.Buckets) == 0 {
				t.Fatalf("a page of %d buckets with max-buckets %d", len(out.Buckets), max)
			}
			if aws.ToString(out.Prefix) != prefix {
				t.Fatalf("the answer's prefix %q, want %q", aws.ToString(out.Prefix), prefix)
			}
			for _, b := range out.Buckets {
				got = append(got, aws.ToString(b.Name))
			}
			if out.ContinuationToken == nil {
				return got, calls
			}
			in.ContinuationToken = out.ContinuationToken
		}
	}
	if got, calls := pages(g.Endpoint, 1); !slices.Equal(got, want) || calls != 3 {
		t.Fatalf("max-buckets 1: %v in %d pages, want %v in 3", got, calls, want)
	}
	if got, calls := pages(g.Endpoint, 2); !slices.Equal(got, want) || calls != 2 {
		t.Fatalf("max-buckets 2: %v in %d pages, want %v in 2", got, calls, want)
	}
	if got, calls := pages(narrow, 1); !slices.Equal(got, []string{want[0], want[2]}) || calls != 2 {
		t.Fatalf("a key granted two, max-buckets 1: %v in %d pages", got, calls)
	}
	for _, q := range []string{"max-buckets=0", "max-buckets=10001", "max-buckets=x", "continuation-token=%25%25"} {
		sendExpect(t, "ListBuckets ?"+q, rawSigned(t, g.Endpoint, "GET", "/?"+q, nil, nil), 400, "InvalidArgument")
	}
}

func md5b64(b []byte) string {
	s := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(s[:])
}

// The same two holes through a real client that sends lower-case names (the
// aws cli, on botocore like boto3): a copy from a bucket without a grant, and
// If-None-Match: * on an existing key.
func TestSecurityAWSCLILowerCaseHeaders(t *testing.T) {
	fx := newSecurityFixture(t)
	aws := awsCLI(t, &clientFixture{ep: fx.rw}, 1)
	_, stderr, err := aws.try("s3api", "copy-object", "--bucket", fx.dropbox, "--key", "stolen.txt", "--copy-source", fx.secret+"/"+fx.secretKey)
	if err == nil || !strings.Contains(stderr, "AccessDenied") {
		t.Fatalf("aws s3api copy-object from a bucket without a grant: err %v, stderr %s", err, stderr)
	}
	requireAbsent(t, fx.g.Store, fx.dropbox, "stolen.txt", "aws cli copy")
	body := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(body, []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	aws.run("s3api", "put-object", "--bucket", fx.dropbox, "--key", "once", "--body", body)
	_, stderr, err = aws.try("s3api", "put-object", "--bucket", fx.dropbox, "--key", "once", "--body", body, "--if-none-match", "*")
	if err == nil || !strings.Contains(stderr, "PreconditionFailed") {
		t.Fatalf("aws s3api put-object --if-none-match '*' on an existing key: err %v, stderr %s", err, stderr)
	}
}
