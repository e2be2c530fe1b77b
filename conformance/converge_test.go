package conformance

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
)

// Writes made straight at the store, between two gateway writes, must never
// leave a key stuck: the gateway's next write settles the key from a fresh
// HEAD, records what it found as an external generation, and goes ahead. A
// bodiless write (DELETE, CopyObject, Complete) goes ahead in the same request;
// a PUT, whose streamed body its one sending consumed, gets one 503 SlowDown
// that S3 clients retry, and the retry succeeds at once.

// putThrough PUTs through the gateway once (no retries) and requires the status.
func putThrough(t *testing.T, g *testGateway, bucket, key, body string, status int) rawResult {
	t.Helper()
	res := putRaw(g.Endpoint, bucket, key, []byte(body), nil)
	if res.Err != nil || res.Status != status {
		t.Fatalf("PUT %s through the gateway: %d %s %v, want %d", key, res.Status, res.Code, res.Err, status)
	}
	return res
}

// putAfterDivergence PUTs through the gateway after the key changed around it:
// one 503 SlowDown is allowed (the PUT's streamed body was consumed by the
// refused fence), the retry must succeed.
func putAfterDivergence(t *testing.T, g *testGateway, bucket, key, body string) rawResult {
	t.Helper()
	if res := putRaw(g.Endpoint, bucket, key, []byte(body), nil); res.Status == 200 {
		return res
	} else if res.Status != 503 {
		t.Fatalf("PUT %s after a write around the gateway: %d %s %v", key, res.Status, res.Code, res.Err)
	}
	return putThrough(t, g, bucket, key, body, 200)
}

// deleteDirect deletes a key straight at the store.
func deleteDirect(t *testing.T, store stack.Endpoint, bucket, key string) {
	t.Helper()
	if _, err := store.S3Client().DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
}

// requireExternal checks that the key's history records bytes not written by
// the gateway, as the catalog's generation before the last.
func requireExternalGeneration(t *testing.T, bucket, key string) {
	t.Helper()
	for _, g := range generationsOf(t, bucket, key) {
		if g.Origin == "external" {
			return
		}
	}
	t.Fatalf("%s: no external generation in %+v", key, generationsOf(t, bucket, key))
}

func TestConvergeDirectPutBetweenGatewayPuts(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-conv-put-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	putThrough(t, g, bucket, "k", "one", 200)
	putRaw(g.Store, bucket, "k", []byte("written around the gateway"), nil)

	// The PUT that finds the key changed: refused by the store's fence, answered
	// 503 after the key was settled from a fresh HEAD; its retry goes ahead.
	putAfterDivergence(t, g, bucket, "k", "two")
	requireExternalGeneration(t, bucket, "k")
	if got := getBody(t, g.Endpoint, bucket, "k"); string(got) != "two" {
		t.Fatalf("content %q", got)
	}
	audit(t, g.Store, bucket, "k")
	// And again: never stuck, however often it happens.
	for range 3 {
		putRaw(g.Store, bucket, "k", []byte("around again"), nil)
		putAfterDivergence(t, g, bucket, "k", "three")
		audit(t, g.Store, bucket, "k")
	}
}

func TestConvergeDirectDeleteBetweenGatewayWrites(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-conv-del-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()

	// A gateway PUT after a direct DELETE.
	putThrough(t, g, bucket, "k", "one", 200)
	deleteDirect(t, g.Store, bucket, "k")
	putAfterDivergence(t, g, bucket, "k", "two")
	audit(t, g.Store, bucket, "k")

	// A gateway DELETE after a direct PUT: bodiless, so it goes ahead at once.
	putRaw(g.Store, bucket, "k", []byte("around"), nil)
	if res := doRaw(g.Endpoint, "DELETE", "/"+bucket+"/k", nil, nil); res.Status != 204 {
		t.Fatalf("DELETE after a direct PUT: %d %s %v", res.Status, res.Code, res.Err)
	}
	requireAbsent(t, g.Store, bucket, "k", "gateway DELETE after a direct PUT")
	requireExternalGeneration(t, bucket, "k")
	audit(t, g.Store, bucket, "k")

	// A gateway DELETE after a direct DELETE: 204, as S3 answers.
	putThrough(t, g, bucket, "k2", "x", 200)
	deleteDirect(t, g.Store, bucket, "k2")
	if res := doRaw(g.Endpoint, "DELETE", "/"+bucket+"/k2", nil, nil); res.Status != 204 {
		t.Fatalf("DELETE after a direct DELETE: %d %s %v", res.Status, res.Code, res.Err)
	}
	audit(t, g.Store, bucket, "k2")
	putThrough(t, g, bucket, "k2", "y", 200)
	audit(t, g.Store, bucket, "k2")

	// DeleteObjects after a direct PUT: each key goes ahead in the batch.
	putThrough(t, g, bucket, "k3", "x", 200)
	putRaw(g.Store, bucket, "k3", []byte("around"), nil)
	out, err := g.S3Client().DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket,
		Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("k3")}}}})
	if err != nil || len(out.Errors) != 0 {
		t.Fatalf("DeleteObjects after a direct PUT: %v %+v", err, out)
	}
	requireAbsent(t, g.Store, bucket, "k3", "DeleteObjects after a direct PUT")
	audit(t, g.Store, bucket, "k3")
}

func TestConvergeDirectMultipartAndCopy(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-conv-mpu-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()
	putThrough(t, g, bucket, "k", "one", 200)
	putThrough(t, g, bucket, "src", "source bytes", 200)

	// A multipart upload completed straight at the store.
	direct := g.Store.S3Client()
	up, err := direct.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := direct.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String("k"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("multipart around the gateway"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: aws.String("k"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	// A gateway CopyObject onto it: bodiless, so it goes ahead at once.
	once := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	if _, err := once.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("k"), CopySource: aws.String(bucket + "/src")}); err != nil {
		t.Fatalf("CopyObject after a direct multipart upload: %v", err)
	}
	requireExternalGeneration(t, bucket, "k")
	if got := getBody(t, g.Endpoint, bucket, "k"); string(got) != "source bytes" {
		t.Fatalf("content %q", got)
	}
	audit(t, g.Store, bucket, "k")

	// A gateway multipart upload completed after a direct PUT: Complete goes
	// ahead at once.
	gup, err := once.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	gpart, err := once.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String("k"), UploadId: gup.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("through the gateway"))})
	if err != nil {
		t.Fatal(err)
	}
	putRaw(g.Store, bucket, "k", []byte("around again"), nil)
	if _, err := once.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: aws.String("k"), UploadId: gup.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: gpart.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatalf("Complete after a direct PUT: %v", err)
	}
	if got := getBody(t, g.Endpoint, bucket, "k"); string(got) != "through the gateway" {
		t.Fatalf("content %q", got)
	}
	audit(t, g.Store, bucket, "k")
}

// Answers that are not the fence keep their S3 meaning: a Complete of an
// aborted upload is NoSuchUpload, a copy from a missing source NoSuchKey, not
// 503 SlowDown.
func TestConvergeRefusalsThatAreNotTheFence(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-conv-nf-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()
	putThrough(t, g, bucket, "k", "one", 200)
	once := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	up, err := once.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := once.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String("k"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("part"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Store.S3Client().AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: aws.String("k"), UploadId: up.UploadId}); err != nil {
		t.Fatal(err)
	}
	_, err = once.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: aws.String("k"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}})
	if err == nil || !strings.Contains(err.Error(), "NoSuchUpload") {
		t.Fatalf("Complete of an aborted upload: %v", err)
	}
	_, err = once.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("k"), CopySource: aws.String(bucket + "/missing"),
		MetadataDirective: types.MetadataDirectiveReplace})
	if err == nil || !strings.Contains(err.Error(), "NoSuchKey") {
		t.Fatalf("REPLACE copy from a missing source: %v", err)
	}
	audit(t, g.Store, bucket, "k")
	putThrough(t, g, bucket, "k", "two", 200)
}

// Versioned buckets: deleting a version (DeleteObject with versionId, and a
// DeleteObjects entry with one) settles the key from the store, so the catalog
// follows what the key now resolves to and the next write goes ahead.
func TestConvergeVersionedDeletes(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-conv-ver-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()
	if _, err := g.S3Client().PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &bucket,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	once := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	v1, err := once.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("one")})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := once.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("two")})
	if err != nil {
		t.Fatal(err)
	}
	if v2.VersionId == nil {
		t.Skip("the store did not version the bucket")
	}
	// Delete the current version through the gateway: "one" is current again.
	if _, err := once.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("k"), VersionId: v2.VersionId}); err != nil {
		t.Fatal(err)
	}
	audit(t, g.Store, bucket, "k")
	if _, err := once.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("three")}); err != nil {
		t.Fatalf("PUT after deleting a version: %v", err)
	}
	// A version deleted straight at the store, then a DeleteObjects of another
	// version through the gateway, then a PUT.
	list, err := g.Store.S3Client().ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &bucket, Prefix: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	var current string
	for _, v := range list.Versions {
		if aws.ToBool(v.IsLatest) {
			current = aws.ToString(v.VersionId)
		}
	}
	if _, err := g.Store.S3Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("k"), VersionId: &current}); err != nil {
		t.Fatal(err)
	}
	out, err := once.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("k"), VersionId: v1.VersionId}}}})
	if err != nil || len(out.Errors) != 0 {
		t.Fatalf("DeleteObjects of a version: %v %+v", err, out)
	}
	audit(t, g.Store, bucket, "k")
	if _, err := once.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("four")}); err != nil {
		t.Fatalf("PUT after deleting versions: %v", err)
	}
	audit(t, g.Store, bucket, "k")
}

// A store that never answers a HEAD cannot hold the caller past its context:
// the settle's HEAD (which a writer holds a lease for, and the reconciler a
// claim) dies with its deadline, on the gateway's own store connections too.
func TestConvergeHungStoreHeadIsBounded(t *testing.T) {
	proxy, store := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &store})
	bucket := "t-conv-hang-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	held := proxy.Hold(faultproxy.MethodPath("HEAD", "/"+bucket+"/k"), 1)
	defer held.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := g.Server.Store().Head(ctx, bucket, "k")
		errc <- err
	}()
	<-held.Arrived // the HEAD reached the store's proxy and is held there
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a held HEAD answered")
		}
		t.Logf("held HEAD ended after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("a HEAD held at the store outlived its 300 ms context by 10 s")
	}
}
