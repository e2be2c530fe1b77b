package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// putRandom stores size random bytes at bucket/key through the gateway.
func putRandom(t *testing.T, g *testGateway, bucket, key string, size int) []byte {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	if _, err := g.S3Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: &bucket, Key: &key, Body: bytes.NewReader(data), ContentType: aws.String("application/x-test"),
	}); err != nil {
		t.Fatal(err)
	}
	return data
}

// Large GETs are spliced from the store's socket to the client's, and the
// client's connection then serves its next requests: whole bodies, ranges,
// small answers and errors, all on one keep-alive connection.
func TestLargeGetsSplicedOnOneConnection(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-splice-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	big := putRandom(t, g, bucket, "big", 3<<20+17)
	small := putRandom(t, g, bucket, "small", 1000)

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true}}
	var conns []string
	do := func(path, rangeHdr string) (*http.Response, []byte) {
		t.Helper()
		req := signedRequest(t, g.Endpoint, "GET", path, time.Now())
		if rangeHdr != "" {
			req.Header.Set("Range", rangeHdr) // unsigned headers are allowed
		}
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			conns = append(conns, i.Conn.LocalAddr().String())
		}}
		resp, err := client.Do(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
		if err != nil {
			t.Fatal(err)
		}
		return resp, readAllClose(t, resp.Body)
	}

	for round := range 2 {
		resp, body := do("/"+bucket+"/big", "")
		if resp.StatusCode != 200 || !bytes.Equal(body, big) {
			t.Fatalf("round %d: GET big: %s, %d bytes, equal %v", round, resp.Status, len(body), bytes.Equal(body, big))
		}
		if resp.Header.Get("Content-Type") != "application/x-test" || resp.Header.Get("ETag") == "" || resp.Header.Get("x-amz-request-id") == "" {
			t.Fatalf("GET big lost headers: %v", resp.Header)
		}
		resp, body = do("/"+bucket+"/big", "bytes=100-2097251")
		if resp.StatusCode != 206 || !bytes.Equal(body, big[100:2097252]) {
			t.Fatalf("ranged GET: %s, %d bytes", resp.Status, len(body))
		}
		if cr := resp.Header.Get("Content-Range"); cr != "bytes 100-2097251/3145745" {
			t.Fatalf("Content-Range %q", cr)
		}
		resp, body = do("/"+bucket+"/small", "")
		if resp.StatusCode != 200 || !bytes.Equal(body, small) {
			t.Fatalf("GET small: %s", resp.Status)
		}
		resp, body = do("/"+bucket+"/missing", "")
		if resp.StatusCode != 404 || !strings.Contains(string(body), "NoSuchKey") {
			t.Fatalf("GET missing: %s %s", resp.Status, body)
		}
	}
	// Two rounds of the whole body and the 2 MiB range went by splice, less
	// what the gateway's reader of each store answer had buffered already
	// (at most its 4 KiB buffer each; 64 KiB allowed).
	want := float64(2*(len(big)+2<<20) - 4*(64<<10))
	if got := metricsOf(t, g.Admin)["fencegate_spliced_body_bytes_total"]; got < want {
		t.Fatalf("spliced %v bytes, want at least %v", got, want)
	}
	for _, c := range conns {
		if c != conns[0] {
			t.Fatalf("requests used connections %v: the spliced answers did not hand the connection back", conns)
		}
	}
	if len(conns) != 8 {
		t.Fatalf("%d requests traced, want 8", len(conns))
	}
}

// A client that hangs up in the middle of a spliced body costs the gateway
// nothing: the next requests are served.
func TestSplicedGetClientGoneMidBody(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-splice-gone-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	big := putRandom(t, g, bucket, "big", 16<<20)
	for range 3 {
		req := signedRequest(t, g.Endpoint, "GET", "/"+bucket+"/big", time.Now())
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 100<<10)); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // closes the connection: the rest is never read
	}
	// The abandoned bodies went through splice (not a copy loop): what the
	// clients read of them was counted as spliced. Without splicing this
	// test would only show that a copying relay survives a client gone.
	waitFor(t, "the abandoned GETs' spliced bytes to be counted", 10*time.Second, func() bool {
		return metricsOf(t, g.Admin)["fencegate_spliced_body_bytes_total"] > 0
	})
	out, err := g.S3Client().GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("big")})
	if err != nil {
		t.Fatal(err)
	}
	if body := readAllClose(t, out.Body); !bytes.Equal(body, big) {
		t.Fatalf("GET after abandoned GETs: %d bytes, want %d", len(body), len(big))
	}
}

// A graceful shutdown waits for a spliced body still on its way.
func TestShutdownWaitsForSplicedGet(t *testing.T) {
	g := startGateway(t, gatewayOptions{ShutdownGrace: 30 * time.Second})
	bucket := "t-splice-shutdown-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	// Larger than loopback's socket buffers, so the relay cannot finish while
	// the client reads nothing.
	big := putRandom(t, g, bucket, "big", 48<<20)
	req := signedRequest(t, g.Endpoint, "GET", "/"+bucket+"/big", time.Now())
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}

	g.Shutdown()
	waitNotAccepting(t, g)
	served := make(chan error, 1)
	go func() { served <- g.Wait() }()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while a spliced body was still being relayed", err)
	case <-time.After(500 * time.Millisecond):
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := append(first, rest...); !bytes.Equal(got, big) {
		t.Fatalf("body across the shutdown: %d bytes, want %d", len(got), len(big))
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the spliced body was done")
	}
}

// A client that pipelines requests behind a spliced GET gets every answer in
// order on the same connection.
func TestPipelinedRequestBehindSplicedGet(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-splice-pipe-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	big := putRandom(t, g, bucket, "big", 2<<20)
	small := putRandom(t, g, bucket, "small", 10)
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var wire bytes.Buffer
	reqs := []*http.Request{
		signedRequest(t, g.Endpoint, "GET", "/"+bucket+"/big", time.Now()),
		signedRequest(t, g.Endpoint, "GET", "/"+bucket+"/small", time.Now()),
		signedRequest(t, g.Endpoint, "GET", "/"+bucket+"/big", time.Now()),
	}
	for _, r := range reqs {
		if err := r.Write(&wire); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Write(wire.Bytes()); err != nil { // all three in one segment
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	for i, want := range [][]byte{big, small, big} {
		resp, err := http.ReadResponse(br, reqs[i])
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if body := readAllClose(t, resp.Body); resp.StatusCode != 200 || !bytes.Equal(body, want) {
			t.Fatalf("answer %d: %s, %d bytes, want %d", i, resp.Status, len(body), len(want))
		}
	}
}
