package conformance

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Graceful shutdown stops accepting at once but lets a request in flight finish.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	g := startGateway(t, gatewayOptions{Stream: true})
	ctx := context.Background()
	bucket := "t-shutdown-" + randomSuffix()
	if _, err := g.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	const size = 64 << 10
	conn := startRawPut(t, g.Endpoint, bucket, "inflight", size)
	defer conn.Close()
	if _, err := conn.Write(make([]byte, size/2)); err != nil {
		t.Fatal(err)
	}
	// The gateway holds the key's lease once it has begun the write: it is
	// reading the body (the store's request is streaming it).
	waitFor(t, "the in-flight write to hold its lease", 10*time.Second, func() bool {
		as := attemptsOf(t, bucket, "inflight")
		return len(as) == 1 && as[0].State == "leased"
	})

	g.Shutdown()
	waitNotAccepting(t, g)
	if _, err := conn.Write(make([]byte, size/2)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("in-flight PUT: %s", resp.Status)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	head, err := g.Store.S3Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("inflight")})
	if err != nil || aws.ToInt64(head.ContentLength) != size {
		t.Fatalf("object after shutdown: %v, %v", head, err)
	}
}

// /metrics counts requests by operation and status.
func TestMetricsCountRequests(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	if _, err := g.S3Client().ListBuckets(context.Background(), &s3.ListBucketsInput{}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(g.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := string(readAllClose(t, resp.Body))
	for _, want := range []string{`fencegate_requests_total{op="ListBuckets",status="200"} 1`, "fencegate_request_duration_seconds_bucket"} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

// When the grace runs out, a write still in flight is cut: its attempt is
// recorded (failed: its body never completed) and its lease released.
func TestShutdownCutsLeasedWritesAndReleases(t *testing.T) {
	g := startGateway(t, gatewayOptions{Lease: testLease, ShutdownGrace: 500 * time.Millisecond, Stream: true})
	bucket := "t-shutcut-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	conn := startRawPut(t, g.Endpoint, bucket, "stuck", 1<<20)
	defer conn.Close()
	if _, err := conn.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the write to hold its lease", 10*time.Second, func() bool {
		as := attemptsOf(t, bucket, "stuck")
		return len(as) == 1 && as[0].State == "leased"
	})
	g.Shutdown()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	as := attemptsOf(t, bucket, "stuck")
	if len(as) != 1 || as[0].State != "failed" {
		t.Fatalf("attempts after shutdown: %+v, want the cut write failed", as)
	}
	// Released is a lease row with no holder: the write held one, so a missing
	// row or a failed query is a failure, and so is a holder whose lease has
	// merely expired (expiry is not release).
	var holder *string
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT holder::text FROM leases WHERE bucket = $1 AND key = 'stuck'`, bucket).Scan(&holder); err != nil {
		t.Fatalf("reading the lease row after shutdown: %v", err)
	}
	if holder != nil {
		t.Fatalf("lease still held by %s after shutdown", *holder)
	}
	audit(t, g.Store, bucket, "stuck")
}

// A body that stalls ends with S3's RequestTimeout. Streamed, the write is
// recorded failed (its body never completed) and its lease released; spooled,
// it never took a lease nor recorded an attempt.
func TestStalledBodyEndsWithRequestTimeout(t *testing.T) {
	for _, streamed := range []bool{true, false} {
		t.Run(map[bool]string{true: "streamed", false: "spooled"}[streamed], func(t *testing.T) {
			stalledBody(t, streamed)
		})
	}
}

func stalledBody(t *testing.T, streamed bool) {
	g := startGateway(t, gatewayOptions{Lease: testLease, BodyStall: 500 * time.Millisecond, Stream: streamed})
	bucket := "t-stall-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	conn := startRawPut(t, g.Endpoint, bucket, "stalled", 1<<20)
	defer conn.Close()
	if _, err := conn.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if code := s3ErrorCode(t, resp); resp.StatusCode != 400 || code != "RequestTimeout" {
		t.Fatalf("%d %s, want 400 RequestTimeout", resp.StatusCode, code)
	}
	as := attemptsOf(t, bucket, "stalled")
	switch {
	case streamed && (len(as) != 1 || as[0].State != "failed"):
		t.Fatalf("attempts %+v, want the stalled write failed", as)
	case !streamed && len(as) != 0:
		t.Fatalf("attempts %+v, want none: a spooled body takes no lease until it is whole", as)
	}
	audit(t, g.Store, bucket, "stalled")
}
