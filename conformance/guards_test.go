package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/lease"
)

// An unknown outcome's guard leaves only by proof (docs/DESIGN.md, W6). These
// tests leave a write's request on the wire, undelivered, while its gateway
// gives up on it (a shutdown cuts it), let other writes run, then deliver it.

// cutHeldWrite starts a write through a gateway whose store request the proxy
// holds, shuts that gateway down so it cuts the request (the attempt ends
// unknown), and returns the held request, still deliverable.
func cutHeldWrite(t *testing.T, fp *faultproxy.HTTP, fep stack.Endpoint, m faultproxy.Match, write func(g *testGateway) rawResult) *faultproxy.Held {
	t.Helper()
	held, r := cutHeld(t, fp, fep, m, write)
	if r.Status == 200 {
		t.Fatalf("the cut write answered %+v", r)
	}
	return held
}

// cutHeld is cutHeldWrite returning the write's answer, whatever it is. The
// shutdown must end within its grace plus a bound: the cut request does not
// hold the process.
func cutHeld(t *testing.T, fp *faultproxy.HTTP, fep stack.Endpoint, m faultproxy.Match, write func(g *testGateway) rawResult) (*faultproxy.Held, rawResult) {
	t.Helper()
	const grace = 300 * time.Millisecond
	g := startGateway(t, gatewayOptions{Store: &fep, ShutdownGrace: grace})
	held := fp.Hold(m, 1)
	res := make(chan rawResult, 1)
	go func() { res <- write(g) }()
	<-held.Arrived
	start := time.Now()
	g.Shutdown()
	if err := g.Wait(); err != nil {
		t.Fatalf("gateway shutdown: %v", err)
	}
	if took := time.Since(start); took > grace+5*time.Second {
		t.Fatalf("shutdown took %s with a held store request, grace %s", took, grace)
	}
	return held, <-res
}

// delivered waits for a held request released with ReleaseDetached to reach
// the store, and returns the store's status.
func delivered(t *testing.T, held *faultproxy.Held) int {
	t.Helper()
	select {
	case ev := <-held.Delivered:
		return ev.Status
	case <-time.After(30 * time.Second):
		t.Fatal("the held request never reached the store")
	}
	return 0
}

// reconcileOnce runs one reconciler pass with g's lease manager.
func reconcileOnce(t *testing.T, g *testGateway) {
	t.Helper()
	r := lease.NewReconciler(lease.ReconcilerConfig{}, g.Leases, g.Server.Store(), nil)
	if _, err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A Complete try whose outcome is unknown keeps its guard when a retry of the
// same upload fails: the retry is an attempt of its own. The first try, when
// it lands after all, is adopted and the upload answers as published.
func TestCompleteRetryKeepsEarlierTryGuard(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-ctry-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()
	c := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String("k"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("the upload's bytes"))})
	if err != nil {
		t.Fatal(err)
	}
	complete := func(g *testGateway, etag string) rawResult {
		body := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + etag + `</ETag></Part></CompleteMultipartUpload>`
		return doRaw(g.Endpoint, "POST", "/"+bucket+"/k?uploadId="+*up.UploadId, []byte(body), nil)
	}
	held := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("POST", "/"+bucket+"/k"), func(g1 *testGateway) rawResult {
		return complete(g1, *part.ETag)
	})
	// A retry with a part list the store refuses (a wrong ETag).
	if r := complete(g, `"00000000000000000000000000000000"`); r.Status != 400 {
		t.Fatalf("retry with a wrong part ETag: %+v, want 400", r)
	}
	held.ReleaseDetached()
	if st := delivered(t, held); st != 200 {
		t.Fatalf("the first try reached the store, which answered %d", st)
	}
	reconcileOnce(t, g)
	audit(t, g.Store, bucket, "k")
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 1 || gens[0].Origin != "adopted" {
		t.Fatalf("generations %+v: want the first try's landing adopted", gens)
	}
	// The client's next retry is answered from the catalog: the upload is
	// published.
	if r := complete(g, *part.ETag); r.Status != 200 || r.Generation != gens[0].Generation {
		t.Fatalf("a repeated Complete: %+v, want 200 with generation %d", r, gens[0].Generation)
	}
}

// A committed DELETE does not retire an unknown guard that it makes possible
// again: a PUT fenced with If-None-Match: * can land once the key is deleted.
func TestDeleteKeepsGuardItReopens(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-reopen-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	// A PUT of an absent key (fenced If-None-Match: *) is cut on the wire.
	held := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("PUT", "/"+bucket+"/k"), func(g1 *testGateway) rawResult {
		return putRaw(g1.Endpoint, bucket, "k", []byte("the cut write"), nil)
	})
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts after the cut: %+v, want one unknown", as)
	}
	// Another application writes the key straight at the store; a DELETE
	// through the gateway removes it.
	putRaw(g.Store, bucket, "k", []byte("around the gateway"), nil)
	if r := doRaw(g.Endpoint, "DELETE", "/"+bucket+"/k", nil, nil); r.Status != 204 {
		t.Fatalf("DELETE: %+v", r)
	}
	if s := attemptState(t, as[0].ID); s != "unknown" {
		t.Fatalf("the cut PUT is %s after the DELETE committed, want unknown (the delete re-opened its fence)", s)
	}
	// The cut PUT arrives after all, and lands.
	held.ReleaseDetached()
	if st := delivered(t, held); st != 200 {
		t.Fatalf("the cut PUT reached the store, which answered %d", st)
	}
	reconcileOnce(t, g)
	audit(t, g.Store, bucket, "k")
	if s := attemptState(t, as[0].ID); s != "adopted" {
		t.Fatalf("the cut PUT is %s, want adopted", s)
	}
}

// Adopting an unknown attempt needs the bytes to be what it sent: its size
// and, when both it and the store know one, its checksum. Bytes that carry
// the attempt's id but not its content (metadata copied by another tool) are
// recorded as external, and the attempt stays a guard.
func TestAdoptionComparesChecksum(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-adoptsum-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	held := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("PUT", "/"+bucket+"/k"), func(g1 *testGateway) rawResult {
		return putRaw(g1.Endpoint, bucket, "k", []byte("what the attempt sent"), nil)
	})
	defer held.Drop()
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts after the cut: %+v, want one unknown", as)
	}
	// Bytes of the same size, tagged with the attempt's id, written straight
	// at the store with a checksum.
	ctx := context.Background()
	if _, err := g.Store.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"),
		Body: bytes.NewReader([]byte("what another tool put")), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
		Metadata: map[string]string{"fencegate-attempt": as[0].ID}}); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, g)
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 1 || gens[0].Origin != "external" {
		t.Fatalf("generations %+v: want the foreign bytes recorded as external", gens)
	}
	if s := attemptState(t, as[0].ID); s != "unknown" {
		t.Fatalf("the attempt is %s, want still unknown (its bytes never showed up)", s)
	}
}

// A CreateMultipartUpload whose answer is lost may have created an upload at
// the store: it is recorded unknown (for the reconciler's upload cleanup), not
// failed, and it is no guard on the key's bytes.
func TestCreateUploadUnknownOutcome(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-cmuunk-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	dropped := fp.DropResponse(faultproxy.MethodPath("POST", "/"+bucket+"/k"), 1)
	if r := doRaw(g.Endpoint, "POST", "/"+bucket+"/k?uploads", nil, nil); r.Status == 200 {
		t.Fatalf("CreateMultipartUpload with its answer lost: %+v", r)
	}
	if ev := <-dropped; ev.Status != 200 {
		t.Fatalf("the store answered %d", ev.Status)
	}
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].Op != "multipart" || as[0].State != "unknown" {
		t.Fatalf("attempts %+v: want the upload recorded unknown", as)
	}
	putThrough(t, g, bucket, "k", "a write goes ahead", 200)
	audit(t, g.Store, bucket, "k")
}

// DeleteObjects' per-key deletes are cut by a shutdown like any write: the
// held entry ends unknown, fenced on its ETag, and when it lands after all it
// is settled; the entries that were not held are deleted and committed.
func TestDeleteObjectsCutByShutdown(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-dobcut-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	for _, k := range []string{"a", "b", "c"} {
		putThrough(t, g, bucket, k, "bytes of "+k, 200)
	}
	body := []byte(`<Delete><Object><Key>a</Key></Object><Object><Key>b</Key></Object><Object><Key>c</Key></Object></Delete>`)
	held, r := cutHeld(t, fp, fep, faultproxy.MethodPath("DELETE", "/"+bucket+"/b"), func(g1 *testGateway) rawResult {
		return doRaw(g1.Endpoint, "POST", "/"+bucket+"/?delete", body, map[string]string{"Content-MD5": md5b64(body)})
	})
	t.Logf("DeleteObjects cut by the shutdown answered %+v", r)
	var b struct{ ID, State, Op string }
	for _, a := range attemptsOf(t, bucket, "b") {
		if a.Op == "delete" {
			b = a
		}
	}
	if b.State != "unknown" {
		t.Fatalf("the cut entry's attempt: %+v, want unknown", b)
	}
	held.ReleaseDetached()
	if st := delivered(t, held); st != 204 {
		t.Fatalf("the cut delete reached the store, which answered %d", st)
	}
	reconcileOnce(t, g)
	audit(t, g.Store, bucket, "a", "b", "c")
	if s := attemptState(t, b.ID); s != "adopted" {
		t.Fatalf("the cut delete is %s after it landed, want adopted", s)
	}
}

// The checksum fencegate computes for a body it spooled is on the attempt
// before the store is asked: a gateway killed while the store holds the
// request leaves an attempt that a takeover adopts on size and checksum, not
// on size alone (issue 27, item 10).
func TestSpooledChecksumRecordedBeforeSending(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-sumfirst-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	body := []byte("a spooled body without a checksum of the client's")
	held := fp.Hold(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1)
	res := make(chan rawResult, 1)
	go func() { res <- putRaw(g.Endpoint, bucket, "k", body, nil) }()
	<-held.Arrived
	var state, sum string
	if err := packageKeys(t).Pool.QueryRow(context.Background(),
		`SELECT state, coalesce(checksum, '') FROM attempts WHERE bucket = $1 AND key = $2`, bucket, "k").Scan(&state, &sum); err != nil {
		t.Fatal(err)
	}
	held.Release()
	if r := within(t, res, time.Minute, "answer to the PUT"); r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	var crc [4]byte
	binary.BigEndian.PutUint32(crc[:], crc32.ChecksumIEEE(body))
	if want := "crc32:" + base64.StdEncoding.EncodeToString(crc[:]); state != "leased" || sum != want {
		t.Fatalf("while the store held the PUT its attempt was %s with checksum %q, want leased with %q", state, sum, want)
	}
}
