package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// The client suite: unmodified S3 clients run an object lifecycle against an
// endpoint, each in its own bucket, and every byte and metadata value they read
// back must be exactly what was written. TestClientsDirect runs it against the
// store itself, which proves the suite right; the gateway's tests run the same
// suite through fencegate over HTTP and HTTPS.
func TestClientsDirect(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every client's lifecycle")
	}
	runClientSuite(t, testenv.Store(t), false)
}

// envSkipMissing lets a machine without some client binaries skip their subtests
// instead of failing them.
const envSkipMissing = "FENCEGATE_SKIP_MISSING_CLIENTS"

// Sizes: multipart parts are at least 5 MiB except the last, so the big object
// makes three parts of 5, 5 and 1 MiB (plus a few bytes).
const (
	partSize  = 5 << 20
	bigSize   = 2*partSize + 1<<20 + 7
	smallSize = 64<<10 + 13
)

// Listing layout: 1,050 keys in one shared bucket, seeded once per suite run.
// Under "list/": 500 keys below "a/", 500 below "b/" and 50 directly ("c-NNNN").
const (
	listPerDir  = 500
	listDirect  = 50
	listTotal   = 2*listPerDir + listDirect
	listPrefix  = "list/"
	listBPrefix = "list/b/"
)

// objMeta is what a client sets on an object and must read back exactly.
type objMeta struct {
	User               map[string]string // without the x-amz-meta- prefix, lowercase keys
	ContentType        string
	CacheControl       string
	ContentDisposition string
}

var (
	// Metadata every client sets at upload.
	uploadMeta = objMeta{
		User:               map[string]string{"color": "blue", "owner": "fencegate conformance", "note": "x=1 y=2"},
		ContentType:        "application/x-fencegate-test",
		CacheControl:       "max-age=3600, private",
		ContentDisposition: `attachment; filename="report.bin"`,
	}
	// Metadata a CopyObject with the REPLACE directive puts in its place.
	replaceMeta = objMeta{
		User:        map[string]string{"stage": "replaced"},
		ContentType: "text/x-fencegate-replaced",
	}
)

// Keys: a space and a plus exercise key encoding (a "+" is not a space).
const (
	keySmall = "docs/hello world+1.bin"
	keyBig   = "big/multi part.bin"
)

// clientFixture is shared by every client's subtest of one suite run.
type clientFixture struct {
	ep          stack.Endpoint
	insecure    bool
	verify      *s3.Client // a neutral checker (aws-sdk-go-v2, default config) on the same endpoint
	small, big  []byte
	smallPath   string   // small, on disk for CLI clients
	bigPath     string   // big, on disk
	listBucket  string   // 1,050 keys, read-only for the clients
	listKeys    []string // sorted
	listRemoved bool
}

// runClientSuite runs every client's lifecycle against ep as parallel subtests
// (t.Run("clients/<client>")), and returns when they have all finished, so the
// caller may stop its endpoint right after. insecureTLS makes https:// endpoints
// with self-signed certificates acceptable. FENCEGATE_SKIP_MISSING_CLIENTS=1
// skips clients that are not installed instead of failing them.
func runClientSuite(t *testing.T, ep stack.Endpoint, insecureTLS bool) {
	fx := newClientFixture(t, ep, insecureTLS)
	clients := []struct {
		name string
		run  func(*testing.T, *clientFixture)
	}{
		{"aws-sdk-go-v2", func(t *testing.T, fx *clientFixture) { goSDKLifecycle(t, fx, goSDKDefault) }},
		{"aws-sdk-go-v2-checksums", func(t *testing.T, fx *clientFixture) { goSDKLifecycle(t, fx, goSDKChecksums) }},
		{"aws-sdk-go-v2-when-required", func(t *testing.T, fx *clientFixture) { goSDKLifecycle(t, fx, goSDKWhenRequired) }},
		{"minio-go", minioLifecycleDefault},
		{"minio-go-trailers", minioLifecycleTrailers},
		{"aws-cli-v1", func(t *testing.T, fx *clientFixture) { awsCLILifecycle(t, fx, 1) }},
		{"aws-cli-v2", func(t *testing.T, fx *clientFixture) { awsCLILifecycle(t, fx, 2) }},
		{"rclone", rcloneLifecycle},
		{"s3cmd", s3cmdLifecycle},
		{"node-aws-sdk-v3", nodeLifecycle},
	}
	// The group returns only after its parallel subtests have finished.
	t.Run("clients", func(t *testing.T) {
		for _, c := range clients {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, fx)
			})
		}
	})
	fx.removeListBucket(t)
}

func newClientFixture(t *testing.T, ep stack.Endpoint, insecure bool) *clientFixture {
	t.Helper()
	fx := &clientFixture{ep: ep, insecure: insecure, verify: ep.S3Client(), small: randomBytes(t, smallSize), big: randomBytes(t, bigSize)}
	dir := t.TempDir()
	fx.smallPath = filepath.Join(dir, "small.bin")
	fx.bigPath = filepath.Join(dir, "big.bin")
	for p, b := range map[string][]byte{fx.smallPath: fx.small, fx.bigPath: fx.big} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fx.listBucket = testenv.Bucket(t) + "-list"
	fx.listKeys = listingKeys()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := fx.verify.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &fx.listBucket}); err != nil {
		t.Fatalf("create listing bucket: %v", err)
	}
	t.Cleanup(func() { fx.removeListBucket(t) }) // if the suite stops early
	start := time.Now()
	if err := putConcurrently(ctx, fx.verify, fx.listBucket, fx.listKeys, 32); err != nil {
		t.Fatalf("seed listing bucket: %v", err)
	}
	t.Logf("seeded %d keys in %s in %s", len(fx.listKeys), fx.listBucket, time.Since(start).Round(time.Millisecond))
	return fx
}

func (fx *clientFixture) removeListBucket(t *testing.T) {
	if !fx.listRemoved {
		fx.listRemoved = true
		removeBucket(t, fx.verify, fx.listBucket)
	}
}

func listingKeys() []string {
	var keys []string
	for _, d := range []string{"a", "b"} {
		for i := 0; i < listPerDir; i++ {
			keys = append(keys, fmt.Sprintf("%s%s/%04d", listPrefix, d, i))
		}
	}
	for i := 0; i < listDirect; i++ {
		keys = append(keys, fmt.Sprintf("%sc-%04d", listPrefix, i))
	}
	sort.Strings(keys)
	return keys
}

// listingBody is the content of one listing key (its own name).
func listingBody(key string) []byte { return []byte(key + "\n") }

// keysUnder is the sorted subset of the listing keys starting with prefix.
func (fx *clientFixture) keysUnder(prefix string) []string {
	var out []string
	for _, k := range fx.listKeys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// directKeys are the 50 keys directly under "list/" (not below a "folder").
func (fx *clientFixture) directKeys() []string {
	var out []string
	for _, k := range fx.keysUnder(listPrefix) {
		if !strings.Contains(strings.TrimPrefix(k, listPrefix), "/") {
			out = append(out, k)
		}
	}
	return out
}

func putConcurrently(ctx context.Context, c *s3.Client, bucket string, keys []string, workers int) error {
	work := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(k), Body: bytes.NewReader(listingBody(k))})
				if err != nil {
					errs <- fmt.Errorf("put %s: %w", k, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, k := range keys {
		select {
		case work <- k:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// removeBucket empties and deletes bucket, ignoring what is already gone: the
// cleanup after a lifecycle that failed half-way.
func removeBucket(t *testing.T, c *s3.Client, bucket string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	uploads, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket})
	if err == nil {
		for _, u := range uploads.Uploads {
			_, _ = c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: u.Key, UploadId: u.UploadId})
		}
	}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			break
		}
		var ids []types.ObjectIdentifier
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		if len(ids) > 0 {
			_, _ = c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		}
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket}); err != nil && !isNoSuchBucket(err) {
		t.Logf("cleanup: delete bucket %s: %v", bucket, err)
	}
}

func isNoSuchBucket(err error) bool {
	var nb *types.NoSuchBucket
	return errors.As(err, &nb) || strings.Contains(err.Error(), "NoSuchBucket") || httpStatus(err) == http.StatusNotFound
}

// ---- checks shared by the clients ----

// ignoreContentType tells expectObject to leave Content-Type unchecked (for an
// object whose client set none, which has the store's default).
const ignoreContentType = "ignore Content-Type"

// expectObject checks, with the neutral checker, that key holds exactly want and
// carries meta (nil meta: metadata not checked). It returns the object's ETag.
func (fx *clientFixture) expectObject(t *testing.T, bucket, key string, want []byte, meta *objMeta, opts ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := fx.verify.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("checker: GET %s/%s: %v", bucket, key, err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		t.Fatalf("checker: GET %s/%s: %v", bucket, key, err)
	}
	sameBytes(t, "checker GET "+key, got, want)
	if meta != nil {
		m := *meta
		if slices.Contains(opts, ignoreContentType) {
			m.ContentType = aws.ToString(out.ContentType)
		}
		checkMeta(t, "checker GET "+key, m, out.Metadata, aws.ToString(out.ContentType), aws.ToString(out.CacheControl), aws.ToString(out.ContentDisposition))
	}
	return aws.ToString(out.ETag)
}

// expectKeys checks, with the neutral checker, that bucket holds exactly keys.
func (fx *clientFixture) expectKeys(t *testing.T, bucket string, keys ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	p := s3.NewListObjectsV2Paginator(fx.verify, &s3.ListObjectsV2Input{Bucket: &bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("checker: list %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			got = append(got, aws.ToString(o.Key))
		}
	}
	want := append([]string(nil), keys...)
	sort.Strings(want)
	sameKeys(t, "checker: keys in "+bucket, got, want)
}

// expectNoBucket checks, with the neutral checker, that bucket is gone.
func (fx *clientFixture) expectNoBucket(t *testing.T, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := fx.verify.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket})
	if err == nil || httpStatus(err) != http.StatusNotFound {
		t.Fatalf("checker: HEAD bucket %s after deleting it: %v, want 404", bucket, err)
	}
}

func checkMeta(t *testing.T, what string, want objMeta, user map[string]string, contentType, cacheControl, contentDisposition string) {
	t.Helper()
	got := map[string]string{}
	for k, v := range user {
		got[strings.ToLower(k)] = v
	}
	if !equalMaps(got, want.User) {
		t.Errorf("%s: user metadata %q, want %q", what, got, want.User)
	}
	if contentType != want.ContentType {
		t.Errorf("%s: Content-Type %q, want %q", what, contentType, want.ContentType)
	}
	if cacheControl != want.CacheControl {
		t.Errorf("%s: Cache-Control %q, want %q", what, cacheControl, want.CacheControl)
	}
	if contentDisposition != want.ContentDisposition {
		t.Errorf("%s: Content-Disposition %q, want %q", what, contentDisposition, want.ContentDisposition)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// clone is a deep copy of m with extra user metadata added: clients get their
// own copies (minio-go, for one, adds to the map it is given).
func (m objMeta) clone(extra ...string) objMeta {
	c := m
	c.User = map[string]string{}
	for k, v := range m.User {
		c.User[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		c.User[extra[i]] = extra[i+1]
	}
	return c
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes sha256 %s, want %d bytes sha256 %s", what, len(got), sha256Hex(got), len(want), sha256Hex(want))
	}
}

func sameFile(t *testing.T, what, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	sameBytes(t, what, got, want)
}

func sameKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) == len(want) {
		same := true
		for i := range got {
			if got[i] != want[i] {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	t.Fatalf("%s: got %d keys %s, want %d keys %s", what, len(got), abbrev(got), len(want), abbrev(want))
}

func abbrev(keys []string) string {
	if len(keys) <= 8 {
		return fmt.Sprintf("%q", keys)
	}
	return fmt.Sprintf("%q ... %q", keys[:4], keys[len(keys)-4:])
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// httpClient is a plain client for presigned URLs.
func (fx *clientFixture) httpClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if fx.insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// fetch sends one request to a presigned URL and returns the answer's body,
// failing unless the status is 200.
func (fx *clientFixture) fetch(t *testing.T, method, url string, body []byte, header http.Header) []byte {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := fx.httpClient().Do(req)
	if err != nil {
		t.Fatalf("presigned %s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("presigned %s %s: %v", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned %s %s: %s\n%s", method, url, resp.Status, got)
	}
	return got
}

// ---- running client binaries ----

// requireBinary finds a client binary or fails the test naming how to install it
// (skips instead when FENCEGATE_SKIP_MISSING_CLIENTS=1).
func requireBinary(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	missingClient(t, fmt.Sprintf("%s not found (%v): install it with `%s`", name, err, install))
	return ""
}

func missingClient(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv(envSkipMissing) == "1" {
		t.Skip(msg + " (skipped: " + envSkipMissing + "=1)")
	}
	t.Fatal(msg + " (or set " + envSkipMissing + "=1 to skip missing clients)")
}

// childEnv is this process's environment without anything that configures an S3
// client (AWS_*, RCLONE_*, the home folder, TLS overrides), with HOME set to home
// and extra appended: a client under test sees only what its test gives it.
func childEnv(home string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "AWS_"), strings.HasPrefix(k, "RCLONE_"), strings.HasPrefix(k, "S3CMD"),
			k == "HOME", k == "XDG_CONFIG_HOME", k == "XDG_CACHE_HOME", k == "NODE_TLS_REJECT_UNAUTHORIZED",
			k == "NODE_OPTIONS", k == "SSL_CERT_FILE", k == "REQUESTS_CA_BUNDLE", k == "CURL_CA_BUNDLE":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+home), extra...)
}

// tool runs one client binary with a fixed environment and working folder.
type tool struct {
	t       *testing.T
	bin     string
	prefix  []string // arguments before every command's own
	env     []string
	dir     string
	timeout time.Duration
}

// try runs the tool and returns its output; err is non-nil on a non-zero exit.
func (c *tool) try(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	defer func() {
		if d := time.Since(start); d > 5*time.Second {
			c.t.Logf("slow: %s took %s", c.describe(args), d.Round(time.Millisecond))
		}
	}()
	cmd := exec.CommandContext(ctx, c.bin, append(append([]string(nil), c.prefix...), args...)...)
	cmd.Env, cmd.Dir = c.env, c.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s: %w", c.timeout, err)
	}
	return out.String(), errb.String(), err
}

// run runs the tool and fails the test, showing the command and its output,
// unless it exits 0.
func (c *tool) run(args ...string) string {
	c.t.Helper()
	stdout, stderr, err := c.try(args...)
	if err != nil {
		c.t.Fatalf("%s: %v\n%s", c.describe(args), err, c.output(stdout, stderr))
	}
	return stdout
}

// fail runs the tool expecting a non-zero exit whose output mentions one of
// wants; it fails the test otherwise.
func (c *tool) fail(wants []string, args ...string) {
	c.t.Helper()
	stdout, stderr, err := c.try(args...)
	if err == nil {
		c.t.Fatalf("%s succeeded, want a failure mentioning %q\n%s", c.describe(args), wants, c.output(stdout, stderr))
	}
	for _, w := range wants {
		if strings.Contains(stdout+stderr, w) {
			return
		}
	}
	c.t.Fatalf("%s: %v, want a failure mentioning %q\n%s", c.describe(args), err, wants, c.output(stdout, stderr))
}

func (c *tool) describe(args []string) string {
	q := make([]string, 0, len(args)+1+len(c.prefix))
	for _, a := range append(append([]string{c.bin}, c.prefix...), args...) {
		if a == "" || strings.ContainsAny(a, " \t\"'$&;|<>*?()[]{}") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q = append(q, a)
	}
	return "command " + strings.Join(q, " ")
}

func (c *tool) output(stdout, stderr string) string {
	const limit = 8 << 10
	cut := func(s string) string {
		if len(s) > limit {
			return s[:limit/2] + fmt.Sprintf("\n... (%d bytes cut) ...\n", len(s)-limit) + s[len(s)-limit/2:]
		}
		return s
	}
	return "--- stdout:\n" + cut(stdout) + "\n--- stderr:\n" + cut(stderr)
}

// lines splits output into non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// Every client, through fencegate over HTTP and HTTPS (where clients send
// different encodings), with results identical to direct access.
func TestClientsThroughFencegate(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := map[bool]string{false: "http", true: "https"}[tls]
		t.Run(name, func(t *testing.T) {
			g := startGateway(t, gatewayOptions{TLS: tls})
			runClientSuite(t, g.Endpoint, tls)
		})
	}
}
