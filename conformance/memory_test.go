package conformance

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// patternReader yields n deterministic bytes without holding them.
type patternReader struct{ left, pos int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	for i := range b {
		x := uint64(p.pos + int64(i))
		b[i] = byte(x*2654435761>>13) ^ byte(x)
	}
	p.pos += int64(len(b))
	p.left -= int64(len(b))
	return len(b), nil
}

// Streaming keeps memory bounded: a 512 MiB PUT and GET through a gateway
// process grow its peak RSS by less than 64 MiB. It runs in `make test` (a
// few seconds); `make memcheck` runs the 2 GiB version.
func TestMemoryStreaming512MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 512 MiB")
	}
	memoryStreaming(t, 512<<20)
}

// The 2 GiB version, run by `make memcheck` (FENCEGATE_MEMCHECK=1).
func TestMemoryStreaming2GiB(t *testing.T) {
	if os.Getenv("FENCEGATE_MEMCHECK") == "" {
		t.Skip("set FENCEGATE_MEMCHECK=1 (make memcheck)")
	}
	memoryStreaming(t, 2<<30)
}

func memoryStreaming(t *testing.T, size int64) {
	store := testenv.Store(t)
	g := startGatewayProcess(t, store)
	ctx := context.Background()
	bucket := "t-memory-" + randomSuffix()
	if _, err := g.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Do not leave the bytes at the run's store.
		_, _ = store.S3Client().DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("big")})
	})
	idle := g.rssKiB(t, "VmRSS")

	start := time.Now()
	req, _ := http.NewRequest("PUT", g.URL+"/"+bucket+"/big", &patternReader{left: size})
	req.ContentLength = size
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	creds := aws.Credentials{AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT: %s", resp.Status)
	}
	putSecs := time.Since(start).Seconds()

	start = time.Now()
	out, err := g.S3Client().GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("big")})
	if err != nil {
		t.Fatal(err)
	}
	h := crc32.NewIEEE()
	n, err := io.Copy(h, out.Body)
	out.Body.Close()
	if err != nil || n != size {
		t.Fatalf("GET: %d bytes, %v", n, err)
	}
	want := crc32.NewIEEE()
	_, _ = io.Copy(want, &patternReader{left: size})
	if h.Sum32() != want.Sum32() {
		t.Fatal("GET returned different bytes")
	}
	getSecs := time.Since(start).Seconds()
	peak := g.rssKiB(t, "VmHWM")
	growth := float64(peak-idle) / 1024
	mib := float64(size >> 20)
	t.Logf("%.0f MiB through fencegate: PUT %.0f MiB/s, GET %.0f MiB/s; RSS idle %.1f MiB, peak %.1f MiB, growth %.1f MiB (limit 64)",
		mib, mib/putSecs, mib/getSecs, float64(idle)/1024, float64(peak)/1024, growth)
	if growth >= 64 {
		t.Fatalf("peak RSS grew by %.1f MiB while streaming %.0f MiB", growth, mib)
	}
}

// The spool keeps memory bounded too: 64 concurrent 16 MiB PUTs (each small
// enough to spool) through a gateway process with the default spool settings
// grow its peak RSS by less than 64 MiB. Bodies over --spool-memory go to
// temporary files, at most --spool-budget (256 MiB) at once; the rest stream.
func TestMemorySpool64Concurrent16MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 1 GiB")
	}
	// The pinned SeaweedFS (weed mini) answers 500 to most of 64 concurrent
	// 16 MiB PUTs sent straight at it on this machine; versitygw's posix
	// backend takes them all, so it is the store here.
	ctx := context.Background()
	v, err := stack.StartVersitygwPosix(ctx, stack.VersitygwPath(), t.TempDir(), "FGVGWSPOOLMEM00001", "versitygw-spoolmem-secret-00000000000000")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	g := startGatewayProcess(t, v.Endpoint)
	bucket := "t-spoolmem-" + randomSuffix()
	if _, err := g.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	const clients, size = 64, 16 << 20
	idle := g.rssKiB(t, "VmRSS")
	// The spool's peak, sampled from /metrics while the PUTs run.
	stop := make(chan struct{})
	peaks := make(chan [2]float64, 1)
	go func() {
		var disk, mem float64
		for {
			select {
			case <-stop:
				peaks <- [2]float64{disk, mem}
				return
			case <-time.After(20 * time.Millisecond):
			}
			disk = max(disk, adminMetric(t, g.Admin, "fencegate_spooled_bytes_disk"))
			mem = max(mem, adminMetric(t, g.Admin, "fencegate_spooled_bytes_memory"))
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	creds := aws.Credentials{AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/%s/o%d", g.URL, bucket, i), &patternReader{left: size})
			req.ContentLength = size
			req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
			if err := v4.NewSigner().SignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
				errs <- err
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("PUT o%d: %s %s", i, resp.Status, body)
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	peak := <-peaks
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	rssPeak := g.rssKiB(t, "VmHWM")
	growth := float64(rssPeak-idle) / 1024
	t.Logf("%d x %d MiB PUTs (to versitygw posix) in %.1f s (%.0f MiB/s); spool peak: %.0f MiB on disk, %.1f MiB in memory; RSS idle %.1f MiB, peak %.1f MiB, growth %.1f MiB (limit 64)",
		clients, size>>20, secs, float64(clients*size>>20)/secs, peak[0]/(1<<20), peak[1]/(1<<20), float64(idle)/1024, float64(rssPeak)/1024, growth)
	if peak[0] > 256<<20 {
		t.Fatalf("spooled %.0f MiB on disk at once, over the 256 MiB budget", peak[0]/(1<<20))
	}
	if growth >= 64 {
		t.Fatalf("peak RSS grew by %.1f MiB", growth)
	}
}
