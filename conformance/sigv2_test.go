package conformance

import (
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
	py := requireBinary(t, "python3", "pip install 'awscli<2' (brings botocore; boto3 beside it)")
	c := &tool{t: t, bin: py, dir: t.TempDir(), timeout: time.Minute, env: childEnv(t.TempDir(),
		"AWS_ACCESS_KEY_ID="+ep.AccessKey, "AWS_SECRET_ACCESS_KEY="+ep.SecretKey, "AWS_EC2_METADATA_DISABLED=true")}
	script := `import sys, boto3
c = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
print(c.generate_presigned_url(sys.argv[2], Params={"Bucket": sys.argv[3], "Key": sys.argv[4]}, ExpiresIn=int(sys.argv[5])))`
	out, stderr, err := c.try("-c", script, ep.URL, method, bucket, key, itoa(expiresIn))
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
	wantWireStatus(t, "put", wireExchange(t, ep, "PUT", "/"+bucket+"/cli key+1", []byte("cli bytes"), nil), 200)

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

// aws cli v1 with signature_version = s3 signs every request with an
// "Authorization: AWS key:signature" header: a whole round trip.
func TestSigV2HeaderClient(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ep := g.Endpoint
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	cli := awsCLIv1Config(t, ep, "  signature_version = s3\n")
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("header-signed bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli.run("s3api", "put-object", "--bucket", bucket, "--key", "dir/k v2", "--body", src, "--metadata", "owner=v2")
	out := filepath.Join(t.TempDir(), "out")
	cli.run("s3api", "get-object", "--bucket", bucket, "--key", "dir/k v2", out)
	sameFile(t, "get-object signed V2", out, []byte("header-signed bytes"))
	var l awsList
	decodeJSON(t, cli.run("s3api", "list-objects", "--bucket", bucket, "--prefix", "dir/"), &l)
	sameKeys(t, "list-objects signed V2", awsKeys(l), []string{"dir/k v2"})
	cli.run("s3api", "get-object-tagging", "--bucket", bucket, "--key", "dir/k v2")
	cli.run("s3api", "delete-object", "--bucket", bucket, "--key", "dir/k v2")
	w := wireExchange(t, testenv.Store(t), "HEAD", "/"+bucket+"/dir/k%20v2", nil, nil)
	if w.Status != 404 {
		t.Errorf("after delete-object signed V2 the store's HEAD: %d", w.Status)
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
	awsCLIv1Config(t, ep, "  signature_version = s3\n").fail([]string{"NotImplemented"}, "s3api", "list-objects", "--bucket", bucket)
}
