package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// A header value may carry a tab (HTTP allows it), and the clients fold it
// differently when they sign: aws-sdk-go-v2 collapses runs of spaces only,
// botocore (aws cli, boto3) every run of whitespace, as SeaweedFS and MinIO
// do when they verify. fencegate takes either signature, sends the value on
// as it came, and signs its own request to the store the way the store
// folds (probed at start-up, docs/SECURITY.md). Before, the first form was
// signed for the store by spaces only, refused by the store, and answered 500
// with an alarm about fencegate's store credentials; the second was 403.
func TestHeaderValuesWithTabs(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-tabs-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	const value = "a\tb  c"

	for _, form := range []struct {
		name   string
		signed string // the value as the client's signer folds it
	}{
		{"spaces folded (aws-sdk-go-v2)", "a\tb c"},
		{"all whitespace folded (botocore)", "a b c"},
	} {
		key := strings.Fields(form.name)[0] + "-" + randomSuffix()
		status, body := sendFolded(t, g.URL, g.AccessKey, g.SecretKey, "PUT", "/"+bucket+"/"+key, []byte("tabbed"), "x-amz-meta-note", value, form.signed)
		if status != 200 {
			t.Errorf("PUT, %s: %d %s", form.name, status, body)
			continue
		}
		head, err := g.Endpoint.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key)})
		if err != nil {
			t.Fatalf("HEAD after PUT, %s: %v", form.name, err)
		}
		if got := head.Metadata["note"]; strings.Join(strings.Fields(got), " ") != "a b c" || !strings.Contains(got, "\t") {
			t.Errorf("%s: the stored metadata is %q, want the value sent (%q) with its tab", form.name, got, value)
		}
		status, body = sendFolded(t, g.URL, g.AccessKey, g.SecretKey, "POST", "/"+bucket+"/mpu-"+key+"?uploads", nil, "x-amz-meta-note", value, form.signed)
		if status != 200 || !bytes.Contains(body, []byte("<UploadId>")) {
			t.Errorf("CreateMultipartUpload, %s: %d %s", form.name, status, body)
		}
	}

	// A signature over another value is still refused, tab or not.
	status, body := sendFolded(t, g.URL, g.AccessKey, g.SecretKey, "PUT", "/"+bucket+"/forged", []byte("x"), "x-amz-meta-note", value, "a b d")
	if status != http.StatusForbidden || errorCode(body) != "SignatureDoesNotMatch" {
		t.Errorf("PUT signed over another value: %d %s", status, body)
	}
	assertNothingLanded(t, g, bucket, "forged")
}

// sendFolded sends method path with header name: value, signed by
// aws-sdk-go-v2 as though the value were signedValue: the canonical form
// another client's signer gives value.
func sendFolded(t *testing.T, base, akid, secret, method, path string, body []byte, name, value, signedValue string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	req.Header.Set(name, signedValue)
	creds := aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, hash, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	req.Header.Set(name, value)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
