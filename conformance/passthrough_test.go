package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestPassThroughObjectLifecycle(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := map[bool]string{false: "http", true: "https"}[tls]
		t.Run(name, func(t *testing.T) {
			g := startGateway(t, gatewayOptions{TLS: tls})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := g.S3Client()
			bucket := "t-passthrough-" + name + "-" + randomSuffix()
			if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
				t.Fatal(err)
			}
			body := make([]byte, 3<<20+5)
			_, _ = rand.Read(body)
			key := "dir/ünï code+plus %2B sp ace"
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body),
				ContentType: aws.String("application/x-test"), Metadata: map[string]string{"color": "blue"}}); err != nil {
				t.Fatal(err)
			}
			out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			if got := readAllClose(t, out.Body); !bytes.Equal(got, body) {
				t.Fatalf("GET through fencegate: %d bytes, differing from the %d PUT", len(got), len(body))
			}
			if out.Metadata["color"] != "blue" || aws.ToString(out.ContentType) != "application/x-test" {
				t.Fatalf("metadata %v, content type %q", out.Metadata, aws.ToString(out.ContentType))
			}
			// The same bytes straight from the store.
			direct, err := g.Store.S3Client().GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			if got := readAllClose(t, direct.Body); !bytes.Equal(got, body) {
				t.Fatal("the store holds different bytes than were PUT through fencegate")
			}
			head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			if aws.ToInt64(head.ContentLength) != int64(len(body)) {
				t.Fatalf("HEAD Content-Length %d, want %d", aws.ToInt64(head.ContentLength), len(body))
			}
			rng, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key, Range: aws.String("bytes=10-19")})
			if err != nil {
				t.Fatal(err)
			}
			if got := readAllClose(t, rng.Body); !bytes.Equal(got, body[10:20]) {
				t.Fatalf("range GET %x, want %x", got, body[10:20])
			}
			list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: aws.String("dir/")})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Contents) != 1 || aws.ToString(list.Contents[0].Key) != key {
				t.Fatalf("list: %+v", list.Contents)
			}
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
