package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// rawSignedHead is the request line and headers of a header-signed request
// with an unsigned payload of size bytes, as a client would put them on the
// wire; the body is the caller's to send (or not).
func rawSignedHead(t *testing.T, ep stack.Endpoint, method, path string, size int64, extra map[string]string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, ep.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", method, req.URL.RequestURI(), req.URL.Host, size)
	for k, vs := range req.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// closedBy reads c until the server closes it, and says how long after since
// that was (an error if it is still open at limit).
func closedBy(c net.Conn, since time.Time, limit time.Duration) (time.Duration, error) {
	_ = c.SetReadDeadline(since.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, fmt.Errorf("still open %v after its last byte", limit)
	}
	return time.Since(since), nil
}

// adminMetric reads one unlabelled sample from the admin listener's /metrics.
func adminMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	v, ok := metricsOf(t, admin)[name]
	if !ok {
		t.Fatalf("no %s in /metrics", name)
	}
	return v
}

// 200 slow connections at once (silent, half a request head, or full PutObject
// headers and a body that stops) are each closed within the configured
// timeouts, while a normal client's PUTs and GETs all succeed, and the
// gateway's memory stays bounded.
func TestSlowConnectionsAreClosed(t *testing.T) {
	const (
		headerTimeout = 2 * time.Second
		stallTimeout  = 3 * time.Second
		slack         = 3 * time.Second // two shared cores, other tests running
		perKind       = 50
	)
	g := startGatewayProcess(t, testenv.Store(t),
		"FENCEGATE_HEADER_TIMEOUT="+headerTimeout.String(), "FENCEGATE_BODY_STALL_TIMEOUT="+stallTimeout.String())
	ctx := context.Background()
	bucket := "t-slowloris-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	client := g.S3Client()
	payload := bytes.Repeat([]byte("fencegate "), 400) // 4 KB
	roundTrip := func(key string) error {
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(payload)}); err != nil {
			return fmt.Errorf("PUT %s: %w", key, err)
		}
		out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
		if err != nil {
			return fmt.Errorf("GET %s: %w", key, err)
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || !bytes.Equal(got, payload) {
			return fmt.Errorf("GET %s: %d bytes, %v", key, len(got), err)
		}
		return nil
	}
	for i := range 5 { // warm up: pools, caches, the runtime's heap
		if err := roundTrip("warm-" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	rssBefore := g.rssKiB(t, "VmRSS")

	addr := strings.TrimPrefix(g.URL, "http://")
	kinds := []struct {
		name  string
		limit time.Duration // from its last byte sent
		send  func(i int) []byte
	}{
		{"silent", headerTimeout, func(int) []byte { return nil }},
		{"half a request head", headerTimeout, func(i int) []byte {
			return []byte(fmt.Sprintf("PUT /%s/half-%d HTTP/1.1\r\nHost: %s\r\nX-Amz-Date: 2026", bucket, i, addr))
		}},
		// fasthttp reads up to 8 KiB of body before the handler runs, under the
		// stall timeout armed when the headers arrived.
		{"headers, 100 body bytes", stallTimeout, func(i int) []byte {
			return append(rawSignedHead(t, g.Endpoint, "PUT", fmt.Sprintf("/%s/stop-%d", bucket, i), 1<<20, nil), make([]byte, 100)...)
		}},
		// The handler runs: lease, store request, then the body stalls in bodyGuard.
		{"headers, 16 KiB body", stallTimeout, func(i int) []byte {
			return append(rawSignedHead(t, g.Endpoint, "PUT", fmt.Sprintf("/%s/stall-%d", bucket, i), 1<<20, nil), make([]byte, 16<<10)...)
		}},
	}
	type result struct {
		kind int
		took time.Duration
		err  error
	}
	results := make(chan result, perKind*len(kinds))
	var sent sync.WaitGroup
	for k, kind := range kinds {
		for i := range perKind {
			sent.Add(1)
			go func() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					sent.Done()
					results <- result{k, 0, err}
					return
				}
				defer c.Close()
				_, err = c.Write(kind.send(i))
				last := time.Now()
				sent.Done()
				if err != nil {
					results <- result{k, 0, err}
					return
				}
				took, err := closedBy(c, last, kind.limit+slack)
				results <- result{k, took, err}
			}()
		}
	}
	sent.Wait()
	slowStarted := time.Now()

	// The normal client works throughout.
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := roundTrip("normal-" + strconv.Itoa(i)); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			} else {
				ok.Add(1)
			}
		}
	}()
	// The gateway may not have accepted every one yet: poll for the peak.
	var openAtPeak float64
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && openAtPeak < perKind*float64(len(kinds)); {
		openAtPeak = max(openAtPeak, adminMetric(t, g.Admin, "fencegate_connections_open"))
	}

	took := make([][]time.Duration, len(kinds))
	for range perKind * len(kinds) {
		r := <-results
		if r.err != nil {
			t.Errorf("%s: %v", kinds[r.kind].name, r.err)
			continue
		}
		took[r.kind] = append(took[r.kind], r.took)
	}
	allClosed := time.Since(slowStarted)
	// A few more round trips after the slow connections are gone.
	waitFor(t, "the normal client's round trips", 60*time.Second, func() bool { return ok.Load() >= 20 })
	close(stop)
	<-clientDone
	peak := g.rssKiB(t, "VmHWM")
	waitFor(t, "the slow connections to be released", 10*time.Second, func() bool {
		return adminMetric(t, g.Admin, "fencegate_connections_open") < 70 // the client's pool at most
	})
	rssAfter := g.rssKiB(t, "VmRSS")

	for k, kind := range kinds {
		d := took[k]
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		t.Logf("%-24s %d closed by the gateway %v..%v after their last byte (timeout %v)",
			kind.name, len(d), d[0].Round(10*time.Millisecond), d[len(d)-1].Round(10*time.Millisecond), kind.limit)
		if d[0] < kind.limit-200*time.Millisecond {
			t.Errorf("%s: one closed after %v, before its timeout %v", kind.name, d[0], kind.limit)
		}
	}
	t.Logf("connections open with the %d slow ones held: %.0f; all closed %v after the last was opened",
		perKind*len(kinds), openAtPeak, allClosed.Round(10*time.Millisecond))
	t.Logf("normal client meanwhile: %d PUT+GET round trips succeeded, %d failed", ok.Load(), failed.Load())
	t.Logf("gateway RSS: before %.1f MiB, peak %.1f MiB, after %.1f MiB (growth %.1f MiB, limit 64)",
		float64(rssBefore)/1024, float64(peak)/1024, float64(rssAfter)/1024, float64(peak-rssBefore)/1024)
	if openAtPeak < perKind*float64(len(kinds)) {
		t.Errorf("only %.0f connections open while %d slow ones were held", openAtPeak, perKind*len(kinds))
	}
	if failed.Load() > 0 {
		t.Errorf("%d of the normal client's round trips failed; first: %v", failed.Load(), firstErr.Load())
	}
	if growth := float64(peak-rssBefore) / 1024; growth >= 64 {
		t.Errorf("peak RSS grew by %.1f MiB", growth)
	}
}

// Past the per-IP limit an SDK client gets S3's SlowDown (which it would retry
// with backoff); when a place frees, it gets through.
func TestConnLimitPerIPSlowDown(t *testing.T) {
	g := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) { c.MaxConnsPerIP = 4 }})
	bucket := "t-perip-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	addr := strings.TrimPrefix(g.URL, "http://")
	waitFor(t, "the setup's connections to close", 10*time.Second, func() bool { return g.Server.OpenConns() <= 1 })
	base := g.Server.OpenConns() // the setup client's idle keep-alive, if still open
	var held []net.Conn
	for g.Server.OpenConns() < 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		waitFor(t, "the connection to be counted", 5*time.Second, func() bool { return g.Server.OpenConns() >= len(held) })
	}
	once := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	_, err := once.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("x")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "SlowDown" {
		t.Fatalf("over the per-IP limit: %v", err)
	}
	for _, c := range held {
		c.Close()
	}
	// The server counts a connection until it has seen it close.
	waitFor(t, "the held connections to be released", 10*time.Second, func() bool { return g.Server.OpenConns() <= base })
	if _, err := once.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("x")}); err != nil {
		t.Fatalf("with places free: %v", err)
	}
}

// deleteObjectsXML is a DeleteObjects document for keys prefix-0..n-1 (each
// padded to 200 bytes: the store takes no longer name), padded with
// whitespace to size bytes, which XML allows between elements.
func deleteObjectsXML(prefix string, n, size int) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><Delete><Quiet>true</Quiet>`)
	for i := range n {
		fmt.Fprintf(&b, "<Object><Key>%s</Key></Object>", budgetKey(prefix, i))
	}
	b.WriteString(strings.Repeat(" ", max(0, size-b.Len()-len("</Delete>"))))
	b.WriteString("</Delete>")
	return b.Bytes()
}

func budgetKey(prefix string, i int) string {
	k := fmt.Sprintf("%s-%d-", prefix, i)
	return k + strings.Repeat("k", 200-len(k))
}

// With a 1 MiB budget, of two 800 KiB DeleteObjects bodies at once one is read
// and runs, the other waits, then gets 503 SlowDown with its connection closed;
// afterwards the whole budget is free again.
func TestBodyMemoryBudgetDeleteObjects(t *testing.T) {
	g := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) {
		c.BodyMemory = 1 << 20
		c.BodyMemoryWait = 500 * time.Millisecond
	}})
	bucket := "t-budget-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	client := g.S3Client()
	for i := range 3 {
		key := budgetKey("first", i)
		if _, err := client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	doc := func(prefix string) ([]byte, map[string]string) {
		body := deleteObjectsXML(prefix, 3, 800<<10)
		sum := md5.Sum(body)
		return body, map[string]string{"Content-MD5": base64.StdEncoding.EncodeToString(sum[:]), "Content-Type": "application/xml"}
	}
	addr := strings.TrimPrefix(g.URL, "http://")

	// The first sends its head and part of its body, then waits: it holds its
	// share of the budget while its body is being read.
	body1, h1 := doc("first")
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if _, err := c1.Write(append(rawSignedHead(t, g.Endpoint, "POST", "/"+bucket+"?delete=", int64(len(body1)), h1), body1[:100<<10]...)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first body's share to be taken", 10*time.Second, func() bool { return g.Server.BodyMemoryInUse() == int64(len(body1)) })

	body2, h2 := doc("second")
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	start := time.Now()
	if _, err := c2.Write(rawSignedHead(t, g.Endpoint, "POST", "/"+bucket+"?delete=", int64(len(body2)), h2)); err != nil {
		t.Fatal(err)
	}
	// Its first 8 KiB: fasthttp reads that much before the handler runs.
	_, _ = c2.Write(body2[:8<<10])
	resp2, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if code := s3ErrorCode(t, resp2); resp2.StatusCode != 503 || code != "SlowDown" || !resp2.Close {
		t.Fatalf("second body: %d %s close=%v", resp2.StatusCode, code, resp2.Close)
	}
	t.Logf("second 800 KiB body answered 503 SlowDown after %v", time.Since(start).Round(time.Millisecond))
	if _, err := closedBy(c2, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("second connection: %v", err)
	}

	if _, err := c1.Write(body1[100<<10:]); err != nil {
		t.Fatal(err)
	}
	resp1, err := http.ReadResponse(bufio.NewReader(c1), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := readAllClose(t, resp1.Body)
	if resp1.StatusCode != 200 || bytes.Contains(b, []byte("<Error>")) {
		t.Fatalf("first body: %d %s", resp1.StatusCode, b)
	}
	list, err := client.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil || len(list.Contents) != 0 {
		t.Fatalf("after the first DeleteObjects: %d objects left, %v", len(list.Contents), err)
	}
	waitFor(t, "the budget to be whole again", 5*time.Second, func() bool { return g.Server.BodyMemoryInUse() == 0 })
	if v := adminMetric(t, g.Admin, "fencegate_buffered_body_bytes"); v != 0 {
		t.Fatalf("fencegate_buffered_body_bytes %v", v)
	}
}

// A connection that sends nothing within the header timeout is closed
// without an answer: clients keep spare connections in their pools unused,
// and one that finds an answer to a request it never sent on such a
// connection (or reads it as the answer to the request it sends just then)
// takes it for the server's error (Go's transport: "Unsolicited response
// received on idle HTTP channel"). A connection that began a request and
// did not finish its headers in time is answered 400 RequestTimeout. Over
// plain TCP and TLS.
func TestSilentConnectionIsClosedWithoutAnAnswer(t *testing.T) {
	const headerTimeout = time.Second
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[overTLS], func(t *testing.T) {
			g := startGateway(t, gatewayOptions{TLS: overTLS, Configure: func(c *gateway.Config) { c.HeaderTimeout = headerTimeout }})
			u, _ := url.Parse(g.URL)
			answerTo := func(send string) (string, time.Duration) {
				t.Helper()
				conn := dialGateway(t, u.Host, overTLS, func(*net.TCPConn) {})
				if tc, ok := conn.(*tls.Conn); ok {
					if err := tc.Handshake(); err != nil { // a pooled TLS connection has shaken hands
						t.Fatal(err)
					}
				}
				if _, err := io.WriteString(conn, send); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				_ = conn.SetReadDeadline(start.Add(10 * headerTimeout))
				got, err := io.ReadAll(conn)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("sent %q: still open after %v", send, 10*headerTimeout)
				}
				return string(got), time.Since(start)
			}
			if got, took := answerTo(""); got != "" || took < headerTimeout-100*time.Millisecond {
				t.Errorf("a connection that sent nothing: %q after %v, want closed without an answer after %v", got, took, headerTimeout)
			}
			got, took := answerTo("GET / HTTP/1.1\r\nHost: ")
			if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, "<Code>RequestTimeout</Code>") || took < headerTimeout-100*time.Millisecond {
				t.Errorf("a connection that began a request: %q after %v, want 400 RequestTimeout after %v", got, took, headerTimeout)
			}
		})
	}
}

// The admin listener holds no connection for ever either: one idle after a
// request is closed after --idle-timeout, as on the S3 listener (before, an
// idle keep-alive connection to /healthz, which needs no token, stayed open
// for good: enough of them would spend the process's file descriptors, the
// S3 listener's too).
func TestAdminConnectionsAreBounded(t *testing.T) {
	const idle = time.Second
	g := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) { c.IdleTimeout = idle }})
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.Admin, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /healthz: %v, %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	answered := time.Now()
	_ = conn.SetReadDeadline(answered.Add(10 * idle))
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("an idle admin connection still open %v after its answer; the idle timeout is %v", 10*idle, idle)
	}
	if took := time.Since(answered); took < idle-100*time.Millisecond {
		t.Errorf("closed %v after its answer, before the idle timeout %v", took, idle)
	}
}
