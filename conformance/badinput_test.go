package conformance

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/badinput"
)

// The hostile-request corpus (internal/badinput) against a gateway: every
// case gets one of the answers it allows (never a 2xx, a 5xx, a non-XML error
// or a hang), and afterwards the gateway still serves, holds no lease, has no
// attempt left leased, and the store holds nothing a refused or smuggled
// request would have written.
func TestBadInputCorpus(t *testing.T) {
	start := time.Now()
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-badinput-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)

	cases := badinput.Cases()
	results := badinput.Run(ctx, badinput.Target{
		URL: g.URL, AccessKey: g.AccessKey, SecretKey: g.SecretKey, Region: g.Region, Bucket: bucket,
		Timeout: 10 * time.Second,
	}, cases)
	if len(results) != len(cases) {
		t.Fatalf("%d results for %d cases", len(results), len(cases))
	}
	for _, r := range results {
		if r.Err != nil || r.Problem != "" {
			t.Error(r)
		} else if testing.Verbose() {
			t.Log(r)
		}
	}

	// Still serving.
	key := "after-the-corpus"
	payload := bytes.Repeat([]byte("still here "), 100)
	if _, err := g.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(payload)}); err != nil {
		t.Fatalf("PUT after the corpus: %v", err)
	}
	if got := getBody(t, g.Endpoint, bucket, key); !bytes.Equal(got, payload) {
		t.Fatalf("GET after the corpus: %d bytes", len(got))
	}

	// No lease held, no attempt left leased.
	pool := packageKeys(t).Pool
	var held, leased int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM leases WHERE bucket = $1 AND holder IS NOT NULL`, bucket).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE bucket = $1 AND state = 'leased'`, bucket).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if held != 0 || leased != 0 {
		t.Errorf("after the corpus: %d leases held, %d attempts leased", held, leased)
	}

	// The store holds the one object written since, and no upload.
	list, err := g.Store.S3Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range list.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	if len(keys) != 1 || keys[0] != key {
		t.Errorf("the store holds %d objects: %s", len(keys), strings.Join(keys, ", "))
	}
	ups, err := g.Store.S3Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d multipart uploads left at the store", len(ups.Uploads))
	}
	t.Logf("%d cases in %v", len(cases), time.Since(start).Round(time.Millisecond))
}
