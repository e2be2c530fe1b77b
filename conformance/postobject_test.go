package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

// Browser-form uploads (POST Object): a multipart/form-data body built by
// hand, as a web page would send it, with a policy document signed with
// SigV4 by a fencegate key. The file lands through the write protocol like a
// PutObject.

// formField is one form field, in the order it is sent.
type formField struct{ name, value string }

// postPolicy signs a policy with the key's SigV4 POST signature (the policy's
// base64 text, HMAC'd with the signing key) and returns the fields a browser
// form would carry: policy, algorithm, credential, date and signature. The
// algorithm, credential and date conditions are added as S3 requires.
func postPolicy(ep stack.Endpoint, expiration time.Time, conditions ...any) []formField {
	now := time.Now().UTC()
	date := now.Format("20060102")
	amzDate := now.Format("20060102T150405Z")
	credential := ep.AccessKey + "/" + date + "/us-east-1/s3/aws4_request"
	conditions = append(conditions,
		map[string]string{"x-amz-algorithm": "AWS4-HMAC-SHA256"},
		map[string]string{"x-amz-credential": credential},
		map[string]string{"x-amz-date": amzDate})
	doc, err := json.Marshal(map[string]any{"expiration": expiration.UTC().Format("2006-01-02T15:04:05.000Z"), "conditions": conditions})
	if err != nil {
		panic(err)
	}
	policy := base64.StdEncoding.EncodeToString(doc)
	return []formField{
		{"policy", policy},
		{"x-amz-algorithm", "AWS4-HMAC-SHA256"},
		{"x-amz-credential", credential},
		{"x-amz-date", amzDate},
		{"x-amz-signature", postSignature(ep.SecretKey, date, policy)},
	}
}

func postSignature(secret, date, policy string) string {
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	k := mac([]byte("AWS4"+secret), date)
	k = mac(k, "us-east-1")
	k = mac(k, "s3")
	k = mac(k, "aws4_request")
	return hex.EncodeToString(mac(k, policy))
}

// postForm sends fields and then the file part, in that order, as one
// multipart/form-data POST to the bucket.
func postForm(t *testing.T, endpoint, bucket string, fields []formField, filename string, file []byte) (*http.Response, []byte) {
	t.Helper()
	body, ctype := formBody(t, fields, filename, file)
	req, err := http.NewRequest(http.MethodPost, endpoint+"/"+bucket, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	client := &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		Timeout:       time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func formBody(t *testing.T, fields []formField, filename string, file []byte) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := w.WriteField(f.name, f.value); err != nil {
			t.Fatal(err)
		}
	}
	if file != nil {
		p, err := w.CreateFormFile("file", filename)
		if err != nil {
			t.Fatal(err)
		}
		p.Write(file)
	}
	w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

func errorCode(b []byte) string {
	var e struct{ Code string }
	_ = xml.Unmarshal(b, &e)
	return e.Code
}

// assertNothingLanded checks that a refused POST left nothing: no object at
// the store, no catalog row, no attempt.
func assertNothingLanded(t *testing.T, g *testGateway, bucket, key string) {
	t.Helper()
	if _, err := g.Store.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &key}); err == nil {
		t.Errorf("%s: an object landed at the store", key)
	}
	if row, ok := catalogOf(t, bucket, key); ok {
		t.Errorf("%s: a catalog row %+v", key, row)
	}
	if a := attemptsOf(t, bucket, key); len(a) != 0 {
		t.Errorf("%s: attempts %+v", key, a)
	}
}

// A browser-style upload with a passing policy lands as a PutObject would:
// through the write protocol (a generation, recorded in the catalog with the
// attempt id on the bytes), with the form's metadata and system fields, the
// key taken from ${filename}, and S3's default 204.
func TestPostObjectLands(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-post-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)

	fields := append([]formField{
		{"key", "uploads/${filename}"},
		{"Content-Type", "text/plain"},
		{"Cache-Control", "max-age=60"},
		{"x-amz-meta-color", "blue"},
	}, postPolicy(g.Endpoint, time.Now().Add(time.Hour),
		map[string]string{"bucket": bucket},
		[]any{"starts-with", "$key", "uploads/"},
		[]any{"starts-with", "$Content-Type", "text/"},
		[]any{"eq", "$Cache-Control", "max-age=60"},
		map[string]string{"x-amz-meta-color": "blue"},
		[]any{"content-length-range", 1, 1024},
	)...)
	resp, body := postForm(t, g.URL, bucket, fields, "photo.txt", []byte("hello from a browser"))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST: %s %s", resp.Status, body)
	}
	etag := trimQuotes(resp.Header.Get("ETag"))
	gen, _ := strconv.ParseInt(resp.Header.Get("X-Fencegate-Generation"), 10, 64)
	if etag == "" || gen == 0 {
		t.Fatalf("POST answer lacks ETag %q or generation %q", resp.Header.Get("ETag"), resp.Header.Get("X-Fencegate-Generation"))
	}
	const key = "uploads/photo.txt"
	out, err := g.S3Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	got := readAllClose(t, out.Body)
	if string(got) != "hello from a browser" || aws.ToString(out.ContentType) != "text/plain" ||
		aws.ToString(out.CacheControl) != "max-age=60" || out.Metadata["color"] != "blue" {
		t.Fatalf("GET: %q type %q cache %q metadata %v", got, aws.ToString(out.ContentType), aws.ToString(out.CacheControl), out.Metadata)
	}
	row, ok := catalogOf(t, bucket, key)
	if !ok || row.Generation != gen || row.ETag != etag || row.Origin != "fencegate" {
		t.Fatalf("catalog row %+v (found %v), want generation %d etag %s by fencegate", row, ok, gen, etag)
	}
	if gens := generationsOf(t, bucket, key); len(gens) != 1 {
		t.Fatalf("generations %+v", gens)
	}
	audit(t, g.Store, bucket, key)
}

// success_action_status 200 and 201 (with S3's PostResponse document) and
// success_action_redirect (303 to the URL with bucket, key and ETag).
func TestPostObjectSuccessActions(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-postok-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	form := func(key string, extra ...formField) []formField {
		conds := []any{map[string]string{"bucket": bucket}, map[string]string{"key": key}}
		for _, f := range extra {
			conds = append(conds, []any{"eq", "$" + f.name, f.value})
		}
		return append(append([]formField{{"key", key}}, extra...), postPolicy(g.Endpoint, time.Now().Add(time.Hour), conds...)...)
	}

	resp, body := postForm(t, g.URL, bucket, form("s201", formField{"success_action_status", "201"}), "f", []byte("x"))
	var pr struct {
		Location, Bucket, Key, ETag string
	}
	if resp.StatusCode != http.StatusCreated || xml.Unmarshal(body, &pr) != nil || pr.Key != "s201" || pr.Bucket != bucket || trimQuotes(pr.ETag) != trimQuotes(resp.Header.Get("ETag")) {
		t.Fatalf("201: %s %s", resp.Status, body)
	}
	resp, body = postForm(t, g.URL, bucket, form("s200", formField{"success_action_status", "200"}), "f", []byte("x"))
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("200: %s %q", resp.Status, body)
	}
	// An unknown status is S3's default.
	resp, _ = postForm(t, g.URL, bucket, form("s404", formField{"success_action_status", "404"}), "f", []byte("x"))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("success_action_status 404: %s", resp.Status)
	}
	const redirect = "https://app.example/done?x=1"
	resp, _ = postForm(t, g.URL, bucket, form("a b", formField{"success_action_redirect", redirect}), "f", []byte("x"))
	etag := resp.Header.Get("ETag")
	want := redirect + "&bucket=" + bucket + "&key=a+b&etag=" + url.QueryEscape(etag)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Fatalf("redirect: %s Location %q, want 303 to %q", resp.Status, resp.Header.Get("Location"), want)
	}
	for _, k := range []string{"s201", "s200", "s404", "a b"} {
		if _, ok := catalogOf(t, bucket, k); !ok {
			t.Errorf("%s: no catalog row", k)
		}
	}
	audit(t, g.Store, bucket, "s201", "s200", "s404", "a b")
}

// Refusals, each with S3's status and code, and nothing landing: a wrong
// signature, an expired policy, a key outside starts-with, a file outside
// content-length-range, missing fields, a field the policy does not name, a
// malformed policy, an anonymous form, an ACL from a key without admin.
func TestPostObjectRefused(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-postno-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	writer, err := g.Keys.Create(context.Background(), "write only "+t.Name(), []meta.Grant{{Bucket: bucket, Permission: meta.PermWrite}})
	if err != nil {
		t.Fatal(err)
	}
	writeEP := g.Endpoint
	writeEP.AccessKey, writeEP.SecretKey = writer.ID, writer.Secret
	hour := time.Now().Add(time.Hour)
	std := func(ep stack.Endpoint, exp time.Time, extra ...any) []formField {
		conds := append([]any{map[string]string{"bucket": bucket}, []any{"starts-with", "$key", "in/"},
			[]any{"content-length-range", 2, 10}}, extra...)
		return postPolicy(ep, exp, conds...)
	}
	with := func(key string, fs []formField, more ...formField) []formField {
		out := []formField{}
		if key != "" {
			out = append(out, formField{"key", key})
		}
		return append(append(out, more...), fs...)
	}
	replace := func(fs []formField, name, value string) []formField {
		out := append([]formField(nil), fs...)
		for i := range out {
			if out[i].name == name {
				out[i].value = value
			}
		}
		return out
	}
	badPolicy := func(doc string) []formField {
		p := base64.StdEncoding.EncodeToString([]byte(doc))
		fs := postPolicy(g.Endpoint, hour)
		date := time.Now().UTC().Format("20060102")
		fs = replace(fs, "policy", p)
		return replace(fs, "x-amz-signature", postSignature(g.SecretKey, date, p))
	}
	cases := []struct {
		name, key string
		fields    []formField
		file      []byte
		status    int
		code      string
	}{
		{"wrong signature", "in/sig", replace(with("in/sig", std(g.Endpoint, hour)), "x-amz-signature", strings.Repeat("0", 64)), []byte("abc"), 403, "SignatureDoesNotMatch"},
		{"unknown key", "in/ak", with("in/ak", std(stack.Endpoint{AccessKey: "FGNOSUCHKEY", SecretKey: "x"}, hour)), []byte("abc"), 403, "InvalidAccessKeyId"},
		{"expired", "in/exp", with("in/exp", std(g.Endpoint, time.Now().Add(-time.Minute))), []byte("abc"), 403, "AccessDenied"},
		{"key outside starts-with", "out/k", with("out/k", std(g.Endpoint, hour)), []byte("abc"), 403, "AccessDenied"},
		{"too large", "in/big", with("in/big", std(g.Endpoint, hour)), []byte("0123456789A"), 400, "EntityTooLarge"},
		{"too small", "in/small", with("in/small", std(g.Endpoint, hour)), []byte("a"), 400, "EntityTooSmall"},
		{"no key field", "", with("", std(g.Endpoint, hour)), []byte("abc"), 400, "InvalidArgument"},
		{"no file", "in/nofile", with("in/nofile", std(g.Endpoint, hour)), nil, 400, "InvalidArgument"},
		{"no signature", "in/nosig", with("in/nosig", std(g.Endpoint, hour)[:4]), []byte("abc"), 400, "InvalidArgument"},
		{"field not in policy", "in/extra", with("in/extra", std(g.Endpoint, hour), formField{"x-amz-meta-x", "1"}), []byte("abc"), 403, "AccessDenied"},
		{"eq fails", "in/eq", with("in/eq", std(g.Endpoint, hour, []any{"eq", "$x-amz-meta-x", "1"}), formField{"x-amz-meta-x", "2"}), []byte("abc"), 403, "AccessDenied"},
		{"policy not JSON", "in/json", with("in/json", badPolicy("{not json")), []byte("abc"), 400, "InvalidPolicyDocument"},
		{"no expiration", "in/noexp", with("in/noexp", badPolicy(`{"conditions":[{"bucket":"`+bucket+`"}]}`)), []byte("abc"), 400, "InvalidPolicyDocument"},
		{"bad range", "in/range", with("in/range", std(g.Endpoint, hour, []any{"content-length-range", 5})), []byte("abc"), 400, "InvalidPolicyDocument"},
		{"anonymous", "in/anon", []formField{{"key", "in/anon"}}, []byte("abc"), 403, "AccessDenied"},
		{"acl without admin", "in/acl", with("in/acl", std(writeEP, hour, map[string]string{"acl": "public-read"}), formField{"acl", "public-read"}), []byte("abc"), 403, "AccessDenied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := postForm(t, g.URL, bucket, c.fields, "f.txt", c.file)
			if resp.StatusCode != c.status || errorCode(body) != c.code {
				t.Fatalf("got %s %s, want %d %s", resp.Status, body, c.status, c.code)
			}
			if c.key != "" {
				assertNothingLanded(t, g, bucket, c.key)
			}
		})
	}
	// The write-only key may upload without an ACL.
	resp, body := postForm(t, g.URL, bucket, with("in/w", std(writeEP, hour)), "f", []byte("abc"))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write-only key: %s %s", resp.Status, body)
	}
}

// A checksum field is verified against the file (and carried to the store):
// a good one lands, a wrong one is BadDigest and lands nothing.
func TestPostObjectChecksum(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-postck-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	file := bytes.Repeat([]byte("x"), 100<<10)
	sum := sha256.Sum256(file)
	good := base64.StdEncoding.EncodeToString(sum[:])
	for _, c := range []struct {
		key, value string
		status     int
	}{{"good", good, 204}, {"bad", base64.StdEncoding.EncodeToString(make([]byte, 32)), 400}, {"garbled", "sailorjerry", 400}} {
		fields := append([]formField{{"key", c.key}, {"x-amz-checksum-sha256", c.value}},
			postPolicy(g.Endpoint, time.Now().Add(time.Hour), map[string]string{"bucket": bucket}, map[string]string{"key": c.key})...)
		resp, body := postForm(t, g.URL, bucket, fields, "f", file)
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %s %s", c.key, resp.Status, body)
		}
		if c.status != 204 {
			if errorCode(body) != "BadDigest" {
				t.Fatalf("%s: %s", c.key, body)
			}
			assertNothingLanded(t, g, bucket, c.key)
		}
	}
	out, err := g.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("good"), ChecksumMode: "ENABLED"})
	if err != nil || aws.ToString(out.ChecksumSHA256) != good {
		t.Fatalf("HEAD good: %v %v", err, out)
	}
	audit(t, g.Store, bucket, "good")
}

// A form cut short inside its file part, or a file larger than the spool
// (--spool-max), never publishes anything (W9).
func TestPostObjectTruncatedAndOversized(t *testing.T) {
	g := startGateway(t, gatewayOptions{BodyStall: 2 * time.Second, Configure: func(c *gateway.Config) { c.SpoolMax, c.SpoolMemory = 64<<10, 8<<10 }})
	bucket := "t-posttr-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	policy := func(key string) []formField {
		return append([]formField{{"key", key}}, postPolicy(g.Endpoint, time.Now().Add(time.Hour),
			map[string]string{"bucket": bucket}, map[string]string{"key": key}, []any{"content-length-range", 0, 1 << 20})...)
	}
	// Over the spool: refused before any lease.
	resp, body := postForm(t, g.URL, bucket, policy("big"), "f", bytes.Repeat([]byte("b"), 100<<10))
	if resp.StatusCode != 400 || errorCode(body) != "EntityTooLarge" {
		t.Fatalf("over --spool-max: %s %s", resp.Status, body)
	}
	assertNothingLanded(t, g, bucket, "big")

	// Cut short: all but the end of the file and the closing boundary, for a
	// file spooled in memory and one spooled to disk.
	for _, c := range []struct {
		key  string
		size int
	}{{"cut-memory", 4 << 10}, {"cut-disk", 32 << 10}} {
		form, ctype := formBody(t, policy(c.key), "f", bytes.Repeat([]byte("c"), c.size))
		conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /%s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", bucket, strings.TrimPrefix(g.URL, "http://"), ctype, len(form))
		conn.Write(form[:len(form)-200])
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if r, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
			b, _ := io.ReadAll(r.Body)
			if r.StatusCode < 400 {
				t.Fatalf("%s: a cut-short form was answered %s %s", c.key, r.Status, b)
			}
		}
		conn.Close()
		assertNothingLanded(t, g, bucket, c.key)
	}
}

// A form with a bad Content-Type is S3's PreconditionFailed.
func TestPostObjectNotAForm(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-postct-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	resp, err := http.Post(g.URL+"/"+bucket, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPreconditionFailed || errorCode(b) != "PreconditionFailed" {
		t.Fatalf("%s %s", resp.Status, b)
	}
}
