package conformance

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// lifecycleService is a reconciler lifecycle service on g's lease manager and
// store client (so through g's fault proxy, if any).
func lifecycleService(t *testing.T, g *testGateway, cfg lease.LifecycleConfig) *lease.Service {
	t.Helper()
	s, err := lease.NewService(cfg, g.Leases, &meta.Catalog{Pool: packageKeys(t).Pool}, gateway.LifecycleStore(g.Server.Store()), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type uploadRow struct {
	State   string
	Claimed bool
	Tries   int
	Error   string
}

func uploadOf(t *testing.T, uploadID string) uploadRow {
	t.Helper()
	var r uploadRow
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT state, claim_token IS NOT NULL, tries, coalesce(last_error, '')
		FROM attempts WHERE upload_id = $1`, uploadID).Scan(&r.State, &r.Claimed, &r.Tries, &r.Error); err != nil {
		t.Fatal(err)
	}
	return r
}

// storeUploads lists the upload ids the store still has in bucket.
func storeUploads(t *testing.T, g *testGateway, bucket string) map[string]bool {
	t.Helper()
	out, err := g.Store.S3Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, u := range out.Uploads {
		ids[aws.ToString(u.UploadId)] = true
	}
	return ids
}

// A store outage during the clean-up of abandoned multipart uploads: the
// uploads stay claimed and open, nothing is lost, and all are aborted once
// the outage ends. An upload whose Complete is held at the proxy (in
// progress, its key leased) is never aborted and completes afterwards; a
// completed object is never touched.
func TestAbandonedUploadsSurviveStoreOutage(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-abandon-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()
	c := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	upload := func(key string) (string, string) {
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("bytes of " + key))})
		if err != nil {
			t.Fatal(err)
		}
		return *up.UploadId, *part.ETag
	}
	complete := func(key, id, etag string) rawResult {
		body := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + etag + `</ETag></Part></CompleteMultipartUpload>`
		return doRaw(g.Endpoint, "POST", "/"+bucket+"/"+key+"?uploadId="+id, []byte(body), nil)
	}
	var abandoned []string
	for i := range 4 {
		id, _ := upload(fmt.Sprintf("abandoned-%d", i))
		abandoned = append(abandoned, id)
	}
	doneID, doneETag := upload("done")
	if r := complete("done", doneID, doneETag); r.Status != 200 {
		t.Fatalf("Complete of done: %+v", r)
	}
	doneGens := generationsOf(t, bucket, "done")
	heldID, heldETag := upload("held")
	hold := fp.Hold(faultproxy.MethodPath("POST", "/"+bucket+"/held"), 1)
	heldDone := make(chan rawResult, 1)
	go func() { heldDone <- complete("held", heldID, heldETag) }()
	<-hold.Arrived

	const idle = time.Second
	time.Sleep(idle + 200*time.Millisecond) // every upload is idle past the abandoned age now
	svc := lifecycleService(t, g, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadIdle: idle,
		RetryAfter: 200 * time.Millisecond, ClaimFor: time.Minute})

	// The outage: every request to the bucket's keys fails.
	fp.Fail(faultproxy.MethodPath("GET", "/"+bucket+"/"), -1, 503, "<Error><Code>ServiceUnavailable</Code></Error>")
	fp.Fail(faultproxy.MethodPath("DELETE", "/"+bucket+"/"), -1, 503, "<Error><Code>ServiceUnavailable</Code></Error>")
	for pass := range 3 {
		k := svc.RunOnce(ctx).Kind(lease.KindUploads)
		t.Logf("outage pass %d: %+v", pass, k.Counts)
		time.Sleep(250 * time.Millisecond)
	}
	for _, id := range abandoned {
		if r := uploadOf(t, id); r.State != meta.StateOpen || !r.Claimed || r.Error == "" {
			t.Fatalf("upload %s during the outage: %+v, want open, claimed, its error noted", id, r)
		}
	}
	if r := uploadOf(t, heldID); r.Tries != 0 || r.Claimed {
		t.Fatalf("the upload whose Complete is in progress was claimed: %+v", r)
	}
	st := storeUploads(t, g, bucket)
	for _, id := range append(abandoned, heldID) {
		if !st[id] {
			t.Fatalf("upload %s is gone from the store during the outage", id)
		}
	}

	fp.Reset() // the outage ends (the held Complete stays held)
	deadline := time.Now().Add(20 * time.Second)
	for pass := 0; ; pass++ {
		k := svc.RunOnce(ctx).Kind(lease.KindUploads)
		t.Logf("pass %d after the outage: %+v", pass, k.Counts)
		left := 0
		for _, id := range abandoned {
			if uploadOf(t, id).State != meta.StateAborted {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d abandoned uploads still not aborted after the outage", left)
		}
		time.Sleep(250 * time.Millisecond)
	}
	st = storeUploads(t, g, bucket)
	for _, id := range abandoned {
		if st[id] {
			t.Errorf("abandoned upload %s is still at the store", id)
		}
	}
	if !st[heldID] || uploadOf(t, heldID).State != meta.StateOpen {
		t.Fatalf("the upload whose Complete is held was aborted (at the store: %v, %+v)", st[heldID], uploadOf(t, heldID))
	}
	hold.Release()
	if r := <-heldDone; r.Status != 200 {
		t.Fatalf("the held Complete: %+v, want 200", r)
	}
	if gens := generationsOf(t, bucket, "done"); len(gens) != len(doneGens) || gens[len(gens)-1] != doneGens[len(doneGens)-1] {
		t.Fatalf("the completed object was touched: generations %+v, were %+v", gens, doneGens)
	}
	if body := getBody(t, g.Endpoint, bucket, "done"); string(body) != "bytes of done" {
		t.Fatalf("done reads %q", body)
	}
	svc.RunOnce(ctx)
	if uploadOf(t, heldID).State != meta.StateCommitted {
		t.Fatalf("the held upload is %+v after its Complete, want committed", uploadOf(t, heldID))
	}
	audit(t, g.Store, bucket, "done", "held")
}
