package conformance

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// lifecycleService is a reconciler lifecycle service on g's lease manager and
// store client (so through g's fault proxy, if any).
func lifecycleService(t *testing.T, g *testGateway, cfg lease.LifecycleConfig) *lease.Service {
	t.Helper()
	s, err := lease.NewService(cfg, g.Leases, &meta.Catalog{Pool: packageKeys(t).Pool}, g.Server.Store(), nil)
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
		if r := uploadOf(t, id); r.State != lease.StateOpen || !r.Claimed || r.Error == "" {
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
			if uploadOf(t, id).State != lease.StateAborted {
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
	if !st[heldID] || uploadOf(t, heldID).State != lease.StateOpen {
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
	if uploadOf(t, heldID).State != lease.StateCommitted {
		t.Fatalf("the held upload is %+v after its Complete, want committed", uploadOf(t, heldID))
	}
	audit(t, g.Store, bucket, "done", "held")
}

// Two gateways' reconcilers passing at once process each item exactly once,
// counted from the attempts' try records: every abandoned upload is claimed
// once (one try) and aborted, every unknown attempt whose bytes landed is
// claimed once and adopted.
func TestTwoGatewaysProcessEachItemOnce(t *testing.T) {
	fp, fep := faultStore(t)
	g1 := startGateway(t, gatewayOptions{Store: &fep})
	g2 := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-twice-" + randomSuffix()
	createBucket(t, g1.Endpoint, bucket)
	ctx := context.Background()
	c := g1.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	const n = 12
	var uploads []string
	for i := range n {
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(fmt.Sprintf("up-%02d", i))})
		if err != nil {
			t.Fatal(err)
		}
		uploads = append(uploads, *up.UploadId)
	}
	// Unknown attempts whose bytes landed: the store's answers are dropped.
	for i := range n {
		key := fmt.Sprintf("lost-%02d", i)
		dropped := fp.DropResponse(faultproxy.MethodPath("PUT", "/"+bucket+"/"+key), 1)
		if r := putRaw(g1.Endpoint, bucket, key, []byte("landed "+key), nil); r.Status == 200 {
			t.Fatalf("PUT with its answer dropped: %+v", r)
		}
		<-dropped
	}
	time.Sleep(1200 * time.Millisecond)
	cfg := lease.LifecycleConfig{Kinds: []string{lease.KindUnresolved, lease.KindUploads}, UploadIdle: time.Second, Batch: n / 3, ClaimFor: time.Minute}
	s1, s2 := lifecycleService(t, g1, cfg), lifecycleService(t, g2, cfg)
	results := make(chan lease.PassResult, 2)
	for _, s := range []*lease.Service{s1, s2} {
		go func() { results <- s.RunOnce(ctx) }()
	}
	for range 2 {
		p := <-results
		t.Logf("pass: unresolved %+v, uploads %+v", p.Kind(lease.KindUnresolved).Counts, p.Kind(lease.KindUploads).Counts)
	}
	pool := packageKeys(t).Pool
	var tries []int
	rows, err := pool.Query(ctx, `SELECT tries, state, op FROM attempts WHERE bucket = $1 ORDER BY key`, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tr int
		var state, op string
		if err := rows.Scan(&tr, &state, &op); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"multipart": "aborted", "put": "adopted"}[op]
		if tr != 1 || state != want {
			t.Errorf("a %s attempt tried %d times, %s: want once, %s", op, tr, state, want)
		}
		tries = append(tries, tr)
	}
	if len(tries) != 2*n {
		t.Fatalf("%d attempts, want %d", len(tries), 2*n)
	}
	st := storeUploads(t, g1, bucket)
	for _, id := range uploads {
		if st[id] {
			t.Errorf("upload %s still at the store", id)
		}
	}
}
