package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// The store the whole suite builds on keeps bytes and metadata exactly.
func TestStorePutGetRoundTrip(t *testing.T) {
	roundTrip(t, testenv.Store(t))
}

// versitygw's posix backend is the second store (and the benchmark's peer binary).
func TestVersitygwPosixPutGetRoundTrip(t *testing.T) {
	bin := stack.VersitygwPath()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("versitygw not built (%s): `fencegate dev stores` builds it; `make test` does so first", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := stack.StartVersitygwPosix(ctx, bin, t.TempDir(), "FGVGWTESTKEY00001", "versitygw-test-secret-0000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	roundTrip(t, v.Endpoint)
}

func roundTrip(t *testing.T, ep stack.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := ep.S3Client()
	bucket := testenv.Bucket(t)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 1<<20+17)
	_, _ = rand.Read(body)
	key := "dir/obj ect+1"
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body),
		Metadata: map[string]string{"owner": "fencegate"}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("GET returned %d bytes differing from the %d PUT", len(got), len(body))
	}
	if out.Metadata["owner"] != "fencegate" {
		t.Fatalf("metadata %v, want owner=fencegate", out.Metadata)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
}
