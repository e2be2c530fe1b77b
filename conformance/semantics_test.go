package conformance

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/internal/faultproxy"
)

// W4: a write reaches the store at most once. The store fails the first
// attempt; nothing at any layer sends it again.
func TestWritesAreNeverRetried(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	bucket := "t-noretry-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	before := fp.Requests()
	fp.Fail(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1, 500,
		`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>injected</Message></Error>`)
	r := putRaw(g.Endpoint, bucket, "k", []byte("once"), nil)
	if r.Status != 500 {
		t.Fatalf("PUT with the store failing: %+v, want the store's 500", r)
	}
	// The bucket was created through fencegate, so the new key needs no HEAD:
	// the one request the store saw is the PUT, sent once.
	if n := fp.Requests() - before; n != 1 {
		t.Fatalf("the store saw %d requests for one PUT: a write was retried", n)
	}
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts %+v: a 5xx leaves the outcome unknown", as)
	}
	if r := putRaw(g.Endpoint, bucket, "k", []byte("again"), nil); r.Status != 200 {
		t.Fatalf("next PUT: %+v", r)
	}
	audit(t, g.Store, bucket, "k")
}

// Clients' own conditions are honoured as S3 does (412), the attempt metadata
// never shows, and x-fencegate-generation comes back on writes.
func TestClientConditionsAndHiddenMetadata(t *testing.T) {
	g := startGateway(t, gatewayOptions{Lease: testLease})
	ctx := context.Background()
	bucket := "t-semantics-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	first := putRaw(g.Endpoint, bucket, "k", []byte("one"), map[string]string{"If-None-Match": "*", "X-Amz-Meta-Color": "red"})
	if first.Status != 200 || first.Generation == 0 {
		t.Fatalf("create with If-None-Match: %+v", first)
	}
	if r := putRaw(g.Endpoint, bucket, "k", []byte("two"), map[string]string{"If-None-Match": "*"}); r.Status != 412 {
		t.Fatalf("If-None-Match on an existing key: %+v, want 412", r)
	}
	if r := putRaw(g.Endpoint, bucket, "k", []byte("two"), map[string]string{"If-Match": `"0123"`}); r.Status != 412 {
		t.Fatalf("If-Match with a wrong ETag: %+v, want 412", r)
	}
	second := putRaw(g.Endpoint, bucket, "k", []byte("two"), map[string]string{"If-Match": `"` + first.ETag + `"`, "X-Amz-Meta-Color": "blue"})
	if second.Status != 200 || second.Generation <= first.Generation {
		t.Fatalf("If-Match with the current ETag: %+v", second)
	}
	c := g.S3Client()
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := head.Metadata["fencegate-attempt"]; ok || head.Metadata["color"] != "blue" {
		t.Fatalf("HEAD metadata %v: the attempt id must be hidden, the client's kept", head.Metadata)
	}
	// A client cannot forge attribution.
	forged := putRaw(g.Endpoint, bucket, "f", []byte("x"), map[string]string{"X-Amz-Meta-Fencegate-Attempt": "00000000-0000-4000-8000-000000000000"})
	if forged.Status != 200 {
		t.Fatal(forged)
	}
	direct, err := g.Store.S3Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("f")})
	if err != nil || direct.Metadata["fencegate-attempt"] == "00000000-0000-4000-8000-000000000000" {
		t.Fatalf("forged attribution reached the store: %v %v", direct.Metadata, err)
	}

	// CopyObject with the COPY directive keeps the source's metadata and system
	// headers, and the copy gets its own attempt id.
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("src"), Body: strings.NewReader("source"),
		ContentType: aws.String("text/x-src"), CacheControl: aws.String("max-age=7"), Metadata: map[string]string{"owner": "me"}}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []types.MetadataDirective{types.MetadataDirectiveCopy, types.MetadataDirectiveReplace} {
		dst := "copy-" + string(dir)
		in := &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String(dst), CopySource: aws.String(bucket + "/src"), MetadataDirective: dir}
		if dir == types.MetadataDirectiveReplace {
			in.Metadata = map[string]string{"owner": "replaced"}
			in.ContentType = aws.String("text/x-replaced")
		}
		if _, err := c.CopyObject(ctx, in); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(dst)})
		if err != nil {
			t.Fatal(err)
		}
		wantOwner, wantType := "me", "text/x-src"
		if dir == types.MetadataDirectiveReplace {
			wantOwner, wantType = "replaced", "text/x-replaced"
		}
		if h.Metadata["owner"] != wantOwner || aws.ToString(h.ContentType) != wantType {
			t.Fatalf("%s copy: metadata %v, content type %q", dir, h.Metadata, aws.ToString(h.ContentType))
		}
		if dir == types.MetadataDirectiveCopy && aws.ToString(h.CacheControl) != "max-age=7" {
			t.Fatalf("COPY lost Cache-Control: %q", aws.ToString(h.CacheControl))
		}
	}
	// Deleting a key that is not there changes nothing: no generation.
	if r := doRaw(g.Endpoint, "DELETE", "/"+bucket+"/never-was", nil, nil); r.Status != 204 {
		t.Fatalf("DELETE of an absent key: %+v", r)
	}
	if gens := generationsOf(t, bucket, "never-was"); len(gens) != 0 {
		t.Fatalf("a delete of an absent key made generations %+v", gens)
	}
	audit(t, g.Store, bucket, "k", "f", "src", "copy-COPY", "copy-REPLACE", "never-was")
}

// Empty objects and directory markers (keys ending in "/", as rclone and the
// consoles make them) go through the protocol like any object.
func TestEmptyObjectsAndDirectoryMarkers(t *testing.T) {
	g := startGateway(t, gatewayOptions{Lease: testLease})
	ctx := context.Background()
	bucket := "t-empty-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	c := g.S3Client()
	for _, key := range []string{"empty", "folder/", "a b/c?d#e"} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: strings.NewReader("")}); err != nil {
			t.Fatalf("PUT %q: %v", key, err)
		}
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key)})
		if err != nil || aws.ToInt64(h.ContentLength) != 0 {
			t.Fatalf("HEAD %q: %v, %v", key, h, err)
		}
		if got := getBody(t, g.Endpoint, bucket, key); len(got) != 0 {
			t.Fatalf("GET %q: %d bytes", key, len(got))
		}
	}
	audit(t, g.Store, bucket, "empty", "folder/", "a b/c?d#e")
}

// SeaweedFS keeps the keys under "d/" as a directory "d": it refuses to
// create "d" (or the marker "d/") on the condition that the key is absent,
// though its HEAD finds none. fencegate answers 409 ObjectExistsAsDirectory,
// which clients do not retry, rather than 503 SlowDown, which they retried
// for ever: a spooled body is sent once more and a second refusal is the
// store's own; a streamed one (its body consumed by its one sending) is
// told so by a listing of the keys under it. Nothing lands, the attempt
// fails and the lease is free. The key under it is untouched.
func TestKeyOverADirectoryOfTheStore(t *testing.T) {
	t.Run("spooled", func(t *testing.T) { keyOverADirectory(t, gatewayOptions{Lease: testLease}) })
	t.Run("streamed", func(t *testing.T) { keyOverADirectory(t, gatewayOptions{Lease: testLease, Stream: true}) })
	// Told that the store keeps keys apart (as S3 does), the gateway takes
	// the same refusal of a streamed body for a key that changed: 503, and
	// no listing decides otherwise.
	t.Run("streamed, keys taken apart", func(t *testing.T) {
		g := startGateway(t, gatewayOptions{Lease: testLease, Stream: true})
		probeTakingKeysApart(t, g)
		bucket := "t-dirkey-" + randomSuffix()
		createBucket(t, g.Endpoint, bucket)
		wantWireStatus(t, "PUT d/x", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/d/x", []byte("child"), nil), 200)
		w := wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/d", []byte("over"), nil)
		if w.Status != http.StatusServiceUnavailable || errorCode(w.Body) != "SlowDown" {
			t.Fatalf("PUT d over the store's directory, keys taken apart: %d %s", w.Status, w.Body)
		}
	})
}

// probeTakingKeysApart applies the store's start-up probe to g as if it had
// proven that writing "p/" keeps an object "p": the store taken to keep keys
// apart, as S3 does, not as file paths.
func probeTakingKeysApart(t *testing.T, g *testGateway) {
	t.Helper()
	res, err := g.Server.Probe(context.Background(), "fencegate-probe")
	if err != nil {
		t.Fatal(err)
	}
	res.MarkerKeepsObject = true
	g.Server.ApplyProbe(res)
}

func keyOverADirectory(t *testing.T, opts gatewayOptions) {
	g := startGateway(t, opts)
	bucket := "t-dirkey-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	wantWireStatus(t, "PUT d/x", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/d/x", []byte("child"), nil), 200)
	for _, key := range []string{"d", "d/"} {
		w := wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/"+key, []byte("over"), nil)
		if key == "d/" {
			w = wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/"+key, nil, nil)
		}
		if w.Status != http.StatusConflict || errorCode(w.Body) != "ObjectExistsAsDirectory" {
			t.Fatalf("PUT %s over the store's directory: %d %s", key, w.Status, w.Body)
		}
		as := attemptsOf(t, bucket, key)
		for _, a := range as {
			if a.State != "failed" {
				t.Errorf("PUT %s: attempts %+v, want every one failed", key, as)
			}
		}
		if len(as) == 0 {
			t.Errorf("PUT %s: no attempt recorded", key)
		}
		if !leaseExpired(t, bucket, key) {
			t.Errorf("PUT %s: the key's lease is still held", key)
		}
		// "d/" is the store's directory to a HEAD: the catalog may record
		// it (external), never as fencegate's bytes.
		if row, ok := catalogOf(t, bucket, key); ok && row.Origin == "fencegate" {
			t.Errorf("PUT %s: the catalog row %+v", key, row)
		}
	}
	// A copy and a multipart upload onto the directory's key meet the same
	// refusal (their requests carry no body to consume: sent once more).
	ctx := context.Background()
	c := g.S3Client()
	_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("d"), CopySource: aws.String(bucket + "/d/x")})
	wantAPIError(t, "CopyObject onto the store's directory", err, "ObjectExistsAsDirectory")
	err = completeOnePart(t, c, bucket, "d")
	wantAPIError(t, "CompleteMultipartUpload onto the store's directory", err, "ObjectExistsAsDirectory")
	if got := getBody(t, g.Endpoint, bucket, "d/x"); string(got) != "child" {
		t.Errorf("d/x holds %q", got)
	}
	if !leaseExpired(t, bucket, "d") {
		t.Errorf("d: the key's lease is still held")
	}

	// With d/x deleted the store keeps the directory, empty, for a few
	// minutes (SeaweedFS removes it itself, about 2.5 min after, measured)
	// and refuses both fences on it the while: a write of "d" or "d/" is
	// told so, 503 SlowDown, not the conflict of keys to delete, spooled or
	// streamed alike.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("d/x")}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"d", "d/"} {
		body := []byte("over")
		if key == "d/" {
			body = nil
		}
		w := wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/"+key, body, nil)
		if w.Status != http.StatusServiceUnavailable || errorCode(w.Body) != "SlowDown" || !strings.Contains(string(w.Body), "empty directory") {
			t.Fatalf("PUT %s over the store's empty directory: %d %s", key, w.Status, w.Body)
		}
		for _, a := range attemptsOf(t, bucket, key) {
			if a.Op != "multipart" && a.State != "failed" { // the upload above stays open
				t.Errorf("PUT %s over the empty directory: attempt %+v, want failed", key, a)
			}
		}
		if !leaseExpired(t, bucket, key) {
			t.Errorf("PUT %s over the empty directory: the key's lease is still held", key)
		}
	}
}

// completeOnePart uploads one part to a new multipart upload of key and
// returns its Complete's error.
func completeOnePart(t *testing.T, c *s3.Client, bucket, key string) error {
	t.Helper()
	_, err := c.CompleteMultipartUpload(context.Background(), onePartUpload(t, c, bucket, key))
	return err
}

// onePartUpload creates a multipart upload of key, uploads one part to it,
// and returns the Complete that would publish it (to send once, or again).
func onePartUpload(t *testing.T, c *s3.Client, bucket, key string) *s3.CompleteMultipartUploadInput {
	t.Helper()
	ctx := context.Background()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("part")})
	if err != nil {
		t.Fatal(err)
	}
	return &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.ETag}}}}
}

// wantAPIError fails unless err is the S3 error code.
func wantAPIError(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

// SeaweedFS keeps an object "p" beside keys under "p/", but a write of the
// marker "p/" replaces the object "p" with its directory: the object is
// gone, with no write of its key. fencegate refuses a write creating "p/"
// while the store holds an object "p" (409 ParentIsObject), before any byte
// reaches the store, so the object stays; the start-up probe learns whether
// the store does this (a store that keeps both is written as S3 is).
func TestMarkerNeverReplacesAnObject(t *testing.T) {
	t.Run("spooled", func(t *testing.T) { markerOverAnObject(t, gatewayOptions{Lease: testLease}) })
	t.Run("streamed", func(t *testing.T) { markerOverAnObject(t, gatewayOptions{Lease: testLease, Stream: true}) })
	// What the refusal prevents: a gateway told that the store keeps both
	// sends the marker, and SeaweedFS deletes the object.
	t.Run("unguarded", func(t *testing.T) {
		g := startGateway(t, gatewayOptions{Lease: testLease})
		probeTakingKeysApart(t, g)
		bucket := "t-marker-" + randomSuffix()
		createBucket(t, g.Endpoint, bucket)
		for _, k := range []string{"p", "p/c", "p/"} {
			body := []byte(k)
			if k == "p/" {
				body = nil
			}
			wantWireStatus(t, "PUT "+k, wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/"+k, body, nil), 200)
		}
		requireAbsent(t, g.Store, bucket, "p", "the object p once the marker p/ was written unguarded")
	})
}

func markerOverAnObject(t *testing.T, opts gatewayOptions) {
	g := startGateway(t, opts)
	bucket := "t-marker-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	wantWireStatus(t, "PUT p", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/p", []byte("parent"), nil), 200)
	wantWireStatus(t, "PUT p/c", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/p/c", []byte("child"), nil), 200)
	w := wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/p/", nil, nil)
	if w.Status != http.StatusConflict || errorCode(w.Body) != "ParentIsObject" {
		t.Fatalf("PUT p/ over the object p: %d %s", w.Status, w.Body)
	}
	ctx := context.Background()
	c := g.S3Client()
	_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("p/"), CopySource: aws.String(bucket + "/p/c")})
	wantAPIError(t, "CopyObject onto p/", err, "ParentIsObject")
	err = completeOnePart(t, c, bucket, "p/")
	wantAPIError(t, "CompleteMultipartUpload onto p/", err, "ParentIsObject")
	for key, want := range map[string]string{"p": "parent", "p/c": "child"} {
		if got := getBody(t, g.Endpoint, bucket, key); string(got) != want {
			t.Errorf("%s holds %q, want %q", key, got, want)
		}
	}
	for _, a := range attemptsOf(t, bucket, "p/") {
		if a.State != "failed" && a.Op != "multipart" { // the upload stays open for its client
			t.Errorf("p/: attempt %+v, want failed", a)
		}
	}
	if !leaseExpired(t, bucket, "p/") {
		t.Errorf("p/: the key's lease is still held")
	}
	// With no object "q", the marker "q/" is an ordinary write. (With keys
	// under "p/", or a directory they left, the store itself refuses the
	// fenced marker: TestKeyOverADirectoryOfTheStore.)
	wantWireStatus(t, "PUT q/ with no object q", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/q/", nil, nil), 200)
}

// SeaweedFS deletes the marker "m/" (a directory entry "m") when told to
// delete the absent key "m". S3 changes nothing there, and fencegate sends
// such a delete only once HEADs show neither the key nor a marker under its
// name; with the marker there it answers as S3 does (204, or the key listed
// Deleted) and sends nothing: the marker and its catalog entry stay.
func TestDeleteOfAnAbsentKeyKeepsItsMarker(t *testing.T) {
	g := startGateway(t, gatewayOptions{Lease: testLease})
	bucket := "t-delmarker-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()
	c := g.S3Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("m/"), Body: strings.NewReader("")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("m")}); err != nil {
		t.Fatalf("DELETE m: %v", err)
	}
	out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("m")}}}})
	if err != nil || len(out.Errors) > 0 || len(out.Deleted) != 1 || aws.ToString(out.Deleted[0].Key) != "m" {
		t.Fatalf("DeleteObjects m: %+v %v", out, err)
	}
	if _, err := g.Store.S3Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("m/")}); err != nil {
		t.Fatalf("the marker m/ at the store after deletes of m: %v", err)
	}
	if row, ok := catalogOf(t, bucket, "m/"); !ok || row.Deleted {
		t.Errorf("m/ in the catalog: %+v %v", row, ok)
	}
	// A delete of an absent key with no marker is sent as before.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("never")}); err != nil {
		t.Fatalf("DELETE never: %v", err)
	}
	// The marker itself is deleted when asked.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("m/")}); err != nil {
		t.Fatal(err)
	}
	requireAbsent(t, g.Store, bucket, "m/", "the marker deleted by its own key")

	// What the HEADs prevent: a gateway told that the store keeps keys
	// apart sends the delete of "n", and SeaweedFS deletes the marker "n/".
	gu := startGateway(t, gatewayOptions{Lease: testLease})
	probeTakingKeysApart(t, gu)
	wantWireStatus(t, "PUT n/", wireExchange(t, gu.Endpoint, "PUT", "/"+bucket+"/n/", nil, nil), 200)
	wantWireStatus(t, "DELETE n", wireExchange(t, gu.Endpoint, "DELETE", "/"+bucket+"/n", nil, nil), 204)
	requireAbsent(t, g.Store, bucket, "n/", "the marker n/ once n was deleted unguarded")
}

// SeaweedFS keeps a directory "d/" for the keys under "d/" (and after the
// last of them is deleted), and answers a HEAD of "d/" with an empty body
// and the ETag of an empty multipart upload, though its listings do not show
// it and S3 has no object there. The catalog records no object for it: a
// write of "d/" that meets it (and settles the key) leaves no live entry and
// no generation, so the audit, which lists, finds the catalog as the store
// is and stops settling the key on every pass. A marker "m/" deleted while
// keys under it remain is recorded deleted, and stays so.
func TestStoreDirectoryIsNoObject(t *testing.T) {
	g := startGateway(t, gatewayOptions{Lease: testLease})
	bucket := "t-storedir-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	st := g.Store.S3Client()
	ctx := context.Background()
	wantWireStatus(t, "PUT d/x", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/d/x", []byte("x"), nil), 200)
	wantWireStatus(t, "DELETE d/x", wireExchange(t, g.Endpoint, "DELETE", "/"+bucket+"/d/x", nil, nil), 204)
	head, err := st.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("d/")})
	if err != nil {
		t.Fatalf("the store's directory d/ after its last key was deleted (the case this test needs): %v", err)
	}
	t.Logf("the store's HEAD of d/: ETag %s, Content-Type %s", aws.ToString(head.ETag), aws.ToString(head.ContentType))
	// Read through the gateway, it is what S3 and the catalog say: no object.
	wantWireStatus(t, "GET d/", wireExchange(t, g.Endpoint, "GET", "/"+bucket+"/d/", nil, nil), 404)
	wantWireStatus(t, "HEAD d/", wireExchange(t, g.Endpoint, "HEAD", "/"+bucket+"/d/", nil, nil), 404)
	// The store refuses both fences on its directory, so the write is
	// refused (503: the directory is empty, and the store clears it by
	// itself); what matters here is what settling it leaves in the catalog.
	wantWireStatus(t, "PUT d/", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/d/", nil, nil), 503)
	if gens := generationsOf(t, bucket, "d/"); len(gens) != 0 {
		t.Errorf("the store's directory d/ recorded as an object: %+v", gens)
	}

	wantWireStatus(t, "PUT m/", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/m/", nil, nil), 200)
	wantWireStatus(t, "PUT m/x", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/m/x", []byte("x"), nil), 200)
	wantWireStatus(t, "DELETE m/", wireExchange(t, g.Endpoint, "DELETE", "/"+bucket+"/m/", nil, nil), 204)
	wantWireStatus(t, "PUT m/ again", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/m/", nil, nil), 409)
	if row, ok := catalogOf(t, bucket, "m/"); !ok || !row.Deleted {
		t.Errorf("m/ deleted while m/x remains, then settled: catalog %+v %v, want deleted", row, ok)
	}
	// A marker written as an object reads as one, keys under it or not.
	wantWireStatus(t, "PUT e/", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/e/", nil, nil), 200)
	wantWireStatus(t, "PUT e/x", wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/e/x", []byte("x"), nil), 200)
	wantWireStatus(t, "GET e/", wireExchange(t, g.Endpoint, "GET", "/"+bucket+"/e/", nil, nil), 200)
	wantWireStatus(t, "HEAD e/", wireExchange(t, g.Endpoint, "HEAD", "/"+bucket+"/e/", nil, nil), 200)
	// A delete of the absent key "m" beside the store's directory "m/"
	// (no marker now, m/x under it) spares the directory, as it spares a
	// marker (TestDeleteOfAnAbsentKeyKeepsItsMarker).
	wantWireStatus(t, "DELETE m", wireExchange(t, g.Endpoint, "DELETE", "/"+bucket+"/m", nil, nil), 204)
	if _, err := st.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("m/x")}); err != nil {
		t.Errorf("m/x at the store after a delete of m: %v", err)
	}
	list, err := st.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Contents {
		if k := aws.ToString(o.Key); k == "d/" || k == "m/" {
			t.Errorf("the store lists %s: the test's premise (a directory no listing shows) does not hold", k)
		}
	}
}
