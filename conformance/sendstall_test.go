package conformance

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway"
)

// A client that stops reading a GET's answer holds its connection (and the
// store connection behind it) only until the send stall timeout: then the
// gateway closes it, and the client, reading again, finds the answer cut
// short. A client that reads slowly but steadily, for several times that
// timeout, gets the whole object. Over plain TCP (the body spliced from the
// store's socket) and TLS (copied through the gateway's buffers).
func TestReaderThatStopsReadingIsCutOff(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[overTLS], func(t *testing.T) {
			readerStalls(t, overTLS)
		})
	}
}

func readerStalls(t *testing.T, overTLS bool) {
	const (
		stall = time.Second
		size  = 64 << 20 // far more than the sockets between the store and the client hold
	)
	g := startGateway(t, gatewayOptions{TLS: overTLS, Configure: func(c *gateway.Config) { c.SendStallTimeout = stall }})
	bucket := "t-sendstall-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	key := "big"
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if _, err := g.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(g.URL)
	// get sends the GET. The client's receive buffer is fixed and small: it
	// holds little of a stopped answer, and a reader that takes data at a
	// steady pace frees enough of it for TCP to open its window (Linux waits
	// for a good part of the buffer to be free) well within the timeout. An
	// autotuned buffer grows to megabytes, and reopens only every few
	// megabytes (docs/OPERATING.md, Limits).
	get := func() (net.Conn, *http.Response) {
		t.Helper()
		conn := dialGateway(t, u.Host, overTLS, func(c *net.TCPConn) { _ = c.SetReadBuffer(256 << 10) })
		if _, err := conn.Write(rawSignedHead(t, g.Endpoint, "GET", "/"+bucket+"/"+key, 0, nil)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4<<10), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.ContentLength != size {
			t.Fatalf("GET: %s, %d bytes", resp.Status, resp.ContentLength)
		}
		return conn, resp
	}

	t.Run("stops reading", func(t *testing.T) {
		_, resp := get()
		if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
			t.Fatal(err)
		}
		open := g.Server.OpenConns()
		stopped := time.Now()
		waitFor(t, "the gateway to close the connection of a client that stopped reading", 10*stall,
			func() bool { return g.Server.OpenConns() < open })
		took := time.Since(stopped)
		// The gateway's checks come every half timeout: the cut comes between
		// one and one and a half timeouts after the last byte the client took.
		if took < stall-100*time.Millisecond || took > 3*stall {
			t.Errorf("closed %v after the client stopped reading; the stall timeout is %v", took, stall)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		t.Logf("closed %v after the client stopped reading; %d MiB of %d MiB then read (%v)",
			took.Round(10*time.Millisecond), (n+1<<20)>>20, size>>20, err)
		if n+1<<20 >= size {
			t.Errorf("the client read the whole answer (%d bytes) after it was cut off", n+1<<20)
		}
		if got := adminMetric(t, g.Admin, "fencegate_connections_send_stalled_total"); got != 1 {
			t.Errorf("fencegate_connections_send_stalled_total %v, want 1", got)
		}
		if spliced := adminMetric(t, g.Admin, "fencegate_spliced_body_bytes_total"); (spliced > 0) == overTLS {
			t.Errorf("%v bytes spliced over %s", spliced, map[bool]string{false: "plain TCP", true: "TLS"}[overTLS])
		}
	})

	t.Run("reads slowly", func(t *testing.T) {
		_, resp := get()
		// 64 KiB every 100 ms, for three stall timeouts: each 64 KiB leaves
		// within the timeout, the answer as a whole does not.
		start := time.Now()
		var n int64
		for time.Since(start) < 3*stall {
			m, err := io.CopyN(io.Discard, resp.Body, 64<<10)
			n += m
			if err != nil {
				t.Fatalf("after %d bytes in %v: %v", n, time.Since(start), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		m, err := io.Copy(io.Discard, resp.Body)
		if err != nil || n+m != size {
			t.Fatalf("a slow but steady reader got %d of %d bytes: %v", n+m, size, err)
		}
	})
}
