package conformance

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// AWS Signature Version 2 (issue 30), as the clients sign it by default:
// aws cli v1's `s3 presign` and boto3's generate_presigned_url make SigV2
// URLs; aws cli v1 with `signature_version = s3` signs every request with a
// SigV2 header. fencegate verifies them and sends the request to the store
// signed V4 with its own key.

// awsCLIv1Config is aws cli v1 with its defaults but path-style addressing,
// plus extra lines for the s3 section.
func awsCLIv1Config(t *testing.T, ep stack.Endpoint, s3Extra string) *tool {
	t.Helper()
	return awsCLIv1Fixture(t, &clientFixture{ep: ep}, s3Extra)
}

func awsCLIv1Fixture(t *testing.T, fx *clientFixture, s3Extra string) *tool {
	t.Helper()
	ep := fx.ep
	c := awsCLI(t, fx, 1)
	cfg := filepath.Join(t.TempDir(), "aws-config")
	if err := os.WriteFile(cfg, []byte("[default]\nregion = "+ep.Region+"\ns3 =\n  addressing_style = path\n"+s3Extra), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, kv := range c.env {
		if strings.HasPrefix(kv, "AWS_CONFIG_FILE=") {
			c.env[i] = "AWS_CONFIG_FILE=" + cfg
		}
	}
	return c
}

// boto3Presign runs boto3's generate_presigned_url with its default settings.
func boto3Presign(t *testing.T, ep stack.Endpoint, method, bucket, key string, expiresIn int) string {
	t.Helper()
	return boto3PresignWith(t, ep, method, bucket, key, expiresIn, "{}")
}

// boto3PresignWith is boto3Presign with more of the operation's parameters,
// a JSON object (e.g. {"Metadata": {"a": "b"}, "ACL": "private"}).
func boto3PresignWith(t *testing.T, ep stack.Endpoint, method, bucket, key string, expiresIn int, params string) string {
	t.Helper()
	py := requireBinary(t, "python3", "pip install 'awscli<2' (brings botocore; boto3 beside it)")
	c := &tool{t: t, bin: py, dir: t.TempDir(), timeout: time.Minute, env: childEnv(t.TempDir(),
		"AWS_ACCESS_KEY_ID="+ep.AccessKey, "AWS_SECRET_ACCESS_KEY="+ep.SecretKey, "AWS_EC2_METADATA_DISABLED=true")}
	script := `import sys, json, boto3
c = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
print(c.generate_presigned_url(sys.argv[2], Params=dict(json.loads(sys.argv[6]), Bucket=sys.argv[3], Key=sys.argv[4]), ExpiresIn=int(sys.argv[5])))`
	out, stderr, err := c.try("-c", script, ep.URL, method, bucket, key, itoa(expiresIn), params)
	if err != nil {
		if strings.Contains(stderr, "No module named 'boto3'") {
			missingClient(t, "boto3 is not installed beside aws cli v1's botocore")
		}
		t.Fatalf("boto3 generate_presigned_url: %v\n%s", err, stderr)
	}
	return strings.TrimSpace(out)
}

func itoa(n int) string { return strconv.Itoa(n) }

func wantV2URL(t *testing.T, what, u string) {
	t.Helper()
	if !strings.Contains(u, "AWSAccessKeyId=") || !strings.Contains(u, "Signature=") || !strings.Contains(u, "Expires=") {
		t.Fatalf("%s is not a SigV2 URL: %s", what, u)
	}
}

var v2Signature = regexp.MustCompile(`Signature=([^&]+)`)

// tamperV2 changes one character of a SigV2 URL's signature.
func tamperV2(u string) string {
	return v2Signature.ReplaceAllStringFunc(u, func(m string) string {
		c := byte('A')
		if m[len("Signature=")] == 'A' {
			c = 'B'
		}
		return "Signature=" + string(c) + m[len("Signature=")+1:]
	})
}

func TestSigV2PresignedClients(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ep := g.Endpoint
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	wantWireStatus(t, "put", wireExchange(t, ep, "PUT", "/"+bucket+"/cli%20key%2B1", []byte("cli bytes"), nil), 200)

	// aws cli v1's `aws s3 presign`, default settings: a SigV2 URL.
	cli := awsCLIv1Config(t, ep, "")
	u := strings.TrimSpace(cli.run("s3", "presign", "s3://"+bucket+"/cli key+1"))
	wantV2URL(t, "aws s3 presign", u)
	resp, body := corsRequest(t, "GET", u, nil, nil)
	if resp.StatusCode != 200 || string(body) != "cli bytes" {
		t.Fatalf("GET of aws s3 presign's URL: %d %q", resp.StatusCode, body)
	}
	resp, body = corsRequest(t, "GET", tamperV2(u), nil, nil)
	wantS3Error(t, "tampered aws s3 presign URL", resp, body, 403, "SignatureDoesNotMatch")
	expiring := strings.TrimSpace(cli.run("s3", "presign", "s3://"+bucket+"/cli key+1", "--expires-in", "1"))
	time.Sleep(2100 * time.Millisecond)
	resp, body = corsRequest(t, "GET", expiring, nil, nil)
	wantS3Error(t, "expired aws s3 presign URL", resp, body, 403, "AccessDenied")
	if m := xmlText(body, "Message"); m != "Request has expired" {
		t.Errorf("expired URL: message %q, want \"Request has expired\"", m)
	}

	// boto3's generate_presigned_url, default settings: PUT then GET.
	put := boto3Presign(t, ep, "put_object", bucket, "boto3 key", 300)
	wantV2URL(t, "boto3 put_object URL", put)
	resp, body = corsRequest(t, "PUT", put, []byte("boto3 bytes"), nil)
	if resp.StatusCode != 200 || resp.Header.Get("x-fencegate-generation") == "" {
		t.Fatalf("PUT of boto3's presigned URL: %d, generation %q\n%s", resp.StatusCode, resp.Header.Get("x-fencegate-generation"), body)
	}
	get := boto3Presign(t, ep, "get_object", bucket, "boto3 key", 300)
	resp, body = corsRequest(t, "GET", get, nil, nil)
	if resp.StatusCode != 200 || string(body) != "boto3 bytes" {
		t.Fatalf("GET of boto3's presigned URL: %d %q", resp.StatusCode, body)
	}
	// The GET URL does not open a PUT.
	resp, body = corsRequest(t, "PUT", get, []byte("other bytes"), nil)
	wantS3Error(t, "PUT with a GET URL", resp, body, 403, "SignatureDoesNotMatch")
	if got := getBody(t, testenv.Store(t), bucket, "boto3 key"); string(got) != "boto3 bytes" {
		t.Errorf("the store holds %q after the refused PUT", got)
	}
}

// s3cmdV2 is s3cmd with signature_v2 = True: every request signed with
// an "Authorization: AWS key:signature" header. (aws cli v1's own
// signature_version = s3 no longer reaches its requests: botocore's
// endpoint rules pick V4.)
func s3cmdV2(t *testing.T, ep stack.Endpoint) *tool {
	t.Helper()
	bin := requireBinary(t, "s3cmd", "apt-get install -y s3cmd")
	u, err := url.Parse(ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cfg := filepath.Join(home, ".s3cfg")
	if err := os.WriteFile(cfg, []byte(strings.Join([]string{"[default]",
		"access_key = " + ep.AccessKey, "secret_key = " + ep.SecretKey,
		"host_base = " + u.Host, "host_bucket = " + u.Host, "use_https = False",
		"signature_v2 = True", "bucket_location = " + ep.Region,
		"preserve_attrs = False", "guess_mime_type = False", "progress_meter = False", ""}, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tool{t: t, bin: bin, dir: t.TempDir(), timeout: 2 * time.Minute, env: childEnv(home), prefix: []string{"-c", cfg}}
}

// A whole round trip signed with SigV2 headers, and s3cmd's signurl (a
// SigV2 presigned URL).
func TestSigV2HeaderClient(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ep := g.Endpoint
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	sc := s3cmdV2(t, ep)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("header-signed bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc.run("put", src, "s3://"+bucket+"/dir/k v2", "--add-header=x-amz-meta-owner:v2")
	out := filepath.Join(t.TempDir(), "out")
	sc.run("get", "s3://"+bucket+"/dir/k v2", out)
	sameFile(t, "s3cmd get signed V2", out, []byte("header-signed bytes"))
	if l := sc.run("ls", "s3://"+bucket+"/dir/"); !strings.Contains(l, "dir/k v2") {
		t.Errorf("s3cmd ls signed V2: %q", l)
	}
	if info := sc.run("info", "s3://"+bucket+"/dir/k v2"); !strings.Contains(info, "x-amz-meta-owner: v2") {
		t.Errorf("s3cmd info signed V2 does not show the metadata:\n%s", info)
	}
	signed := strings.TrimSpace(sc.run("signurl", "s3://"+bucket+"/dir/k v2", "+300"))
	wantV2URL(t, "s3cmd signurl", signed)
	resp, body := corsRequest(t, "GET", signed, nil, nil)
	if resp.StatusCode != 200 || string(body) != "header-signed bytes" {
		t.Errorf("GET of s3cmd signurl's URL: %d %q", resp.StatusCode, body)
	}
	sc.run("del", "s3://"+bucket+"/dir/k v2")
	w := wireExchange(t, testenv.Store(t), "HEAD", "/"+bucket+"/dir/k%20v2", nil, nil)
	if w.Status != 404 {
		t.Errorf("after s3cmd del signed V2 the store's HEAD: %d", w.Status)
	}
}

// --sigv2=false: both forms are NotImplemented.
func TestSigV2TurnedOff(t *testing.T) {
	g := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) { c.DisableSigV2 = true }})
	ep := g.Endpoint
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	wantWireStatus(t, "put", wireExchange(t, ep, "PUT", "/"+bucket+"/k", []byte("x"), nil), 200)
	u := strings.TrimSpace(awsCLIv1Config(t, ep, "").run("s3", "presign", "s3://"+bucket+"/k"))
	resp, body := corsRequest(t, "GET", u, nil, nil)
	wantS3Error(t, "SigV2 URL with --sigv2=false", resp, body, 501, "NotImplemented")
	s3cmdV2(t, ep).fail([]string{"NotImplemented"}, "ls", "s3://"+bucket)
}

// A SigV2 signature covers every x-amz-* query parameter the gateway acts
// on as a header: boto3's presigned PUT with metadata and an ACL (which it
// signs as headers and sends in the query) works, while a parameter added to
// a presigned URL after signing, or to a request signed with a V2 header,
// is refused: it would turn a PUT into a copy of another object, or make
// the object public.
func TestSigV2SignsTheAmzParametersOfItsQuery(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ep := g.Endpoint
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	wantWireStatus(t, "put the secret", wireExchange(t, ep, "PUT", "/"+bucket+"/secret", []byte("top secret"), nil), 200)

	withMeta := boto3PresignWith(t, ep, "put_object", bucket, "with meta", 300, `{"Metadata": {"owner": "ann"}, "ACL": "private"}`)
	wantV2URL(t, "boto3 put_object URL with metadata", withMeta)
	if !strings.Contains(withMeta, "x-amz-meta-owner=ann") {
		t.Fatalf("boto3 did not put the metadata in the query: %s", withMeta)
	}
	resp, body := corsRequest(t, "PUT", withMeta, []byte("ann's bytes"), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("PUT of boto3's presigned URL with metadata: %d\n%s", resp.StatusCode, body)
	}
	if h := wireExchange(t, testenv.Store(t), "HEAD", "/"+bucket+"/with%20meta", nil, nil); h.Status != 200 || strings.Join(h.Header["x-amz-meta-owner"], ",") != "ann" {
		t.Errorf("the store's object: %d, x-amz-meta-owner %q", h.Status, h.Header["x-amz-meta-owner"])
	}

	put := boto3Presign(t, ep, "put_object", bucket, "upload", 300)
	for _, added := range []string{"&x-amz-copy-source=" + url.QueryEscape("/"+bucket+"/secret"), "&x-amz-acl=public-read", "&X-Amz-Meta-Evil=1"} {
		resp, body := corsRequest(t, "PUT", put+added, []byte("uploaded"), nil)
		wantS3Error(t, "boto3's presigned PUT with "+added+" added", resp, body, 403, "SignatureDoesNotMatch")
	}
	if h := wireExchange(t, testenv.Store(t), "HEAD", "/"+bucket+"/upload", nil, nil); h.Status != 404 {
		t.Errorf("after the refused PUTs the store's HEAD of the key: %d, want 404", h.Status)
	}

	// A V2 header signs no query.
	date := time.Now().UTC().Format(http.TimeFormat)
	sts := "PUT\n\n\n" + date + "\n/" + bucket + "/upload"
	mac := hmac.New(sha1.New, []byte(ep.SecretKey))
	mac.Write([]byte(sts))
	header := map[string]string{"Date": date, "Authorization": "AWS " + ep.AccessKey + ":" + base64.StdEncoding.EncodeToString(mac.Sum(nil))}
	resp, body = corsRequest(t, "PUT", ep.URL+"/"+bucket+"/upload", []byte("signed"), header)
	if resp.StatusCode != 200 {
		t.Fatalf("a V2 header-signed PUT: %d\n%s", resp.StatusCode, body)
	}
	resp, body = corsRequest(t, "PUT", ep.URL+"/"+bucket+"/upload?x-amz-copy-source="+url.QueryEscape("/"+bucket+"/secret"), []byte("signed"), header)
	wantS3Error(t, "a V2 header-signed PUT with x-amz-copy-source in its query", resp, body, 403, "AccessDenied")
	if got := getBody(t, testenv.Store(t), bucket, "upload"); string(got) != "signed" {
		t.Errorf("the store holds %q at the key after the refused copy", got)
	}
}
