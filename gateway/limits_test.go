package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// readAnswer reads one HTTP answer from a raw connection.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// waitClosed waits (up to limit) for the server to close c, and says how long
// that took from start.
func waitClosed(c net.Conn, start time.Time, limit time.Duration) (time.Duration, error) {
	_ = c.SetReadDeadline(start.Add(limit))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return 0, fmt.Errorf("still open after %v", limit)
			}
			return time.Since(start), nil
		}
	}
}

// A connection past the per-IP limit is answered 503 SlowDown and closed; a
// place freed by a closed connection is taken again.
func TestConnLimitPerIP(t *testing.T) {
	s := startUnitServer(t, func(c *Config) { c.MaxConnsPerIP = 5 })
	var held []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, func() bool { return s.OpenConns() == 5 })
	over, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	fmt.Fprintf(over, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readAnswer(t, over)
	if resp.StatusCode != 503 || !strings.Contains(body, "<Code>SlowDown</Code>") || resp.Header.Get("x-amz-request-id") == "" {
		t.Fatalf("over the limit: %d %q", resp.StatusCode, body)
	}
	if _, err := waitClosed(over, time.Now(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	held[0].Close()
	waitFor(t, func() bool { return s.OpenConns() == 4 })
	again, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(again, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := readAnswer(t, again); resp.StatusCode != 403 { // anonymous, but served
		t.Fatalf("after a place freed: %d", resp.StatusCode)
	}
	again.Close()
	for _, c := range held[1:] {
		c.Close()
	}
	waitFor(t, func() bool { return s.OpenConns() == 0 })
	_, m := getText(t, s.admin+"/metrics")
	if !strings.Contains(m, `fencegate_connections_refused_total{limit="per_ip"} 1`) {
		t.Errorf("refusal not counted:\n%s", grepLines(m, "fencegate_connections"))
	}
}

// Silent and half-sent connections are closed at the header timeout; an idle
// keep-alive connection at the idle timeout.
func TestHeaderAndIdleTimeouts(t *testing.T) {
	s := startUnitServer(t, func(c *Config) { c.HeaderTimeout = 500 * time.Millisecond; c.IdleTimeout = 800 * time.Millisecond })
	var wg sync.WaitGroup
	for i, send := range []string{"", "GET /b/k HTT", "GET /b/k HTTP/1.1\r\nHost: x\r\nX-Pad: 1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			c, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, send)
			took, err := waitClosed(c, start, 5*time.Second)
			if err != nil || took < 400*time.Millisecond {
				t.Errorf("%d (%q): closed after %v, %v", i, send, took, err)
			}
		}()
	}
	wg.Wait()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Content-Length: 0, or an anonymous request's refusal closes the
	// connection (its body, if any, is never read).
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	if resp, _ := readAnswer(t, c); resp.Close {
		t.Fatal("the connection is not kept alive")
	}
	start := time.Now()
	took, err := waitClosed(c, start, 5*time.Second)
	if err != nil || took < 700*time.Millisecond {
		t.Fatalf("idle keep-alive connection closed after %v, %v", took, err)
	}
}

// s3Answer sends req and returns the status and S3 error code of the answer.
func s3Answer(client *http.Client, req *http.Request) (status int, code string, closed bool, err error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", false, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if i, j := strings.Index(string(b), "<Code>"), strings.Index(string(b), "</Code>"); i >= 0 && j > i {
		code = string(b[i+6 : j])
	}
	return resp.StatusCode, code, resp.Close, nil
}

// The small-body budget: a body that does not fit waits, then gets 503
// SlowDown with its connection closed; every byte taken is given back. (The
// store is unreachable, so a body that fits ends in 503 ServiceUnavailable.
// PutBucketTagging is forwarded as it is; conformance's
// TestBodyMemoryBudgetDeleteObjects covers a keyed write's body.)
func TestBodyMemoryBudget(t *testing.T) {
	const size = 800 << 10
	s := startUnitServer(t, func(c *Config) { c.BodyMemory = 1 << 20; c.BodyMemoryWait = 300 * time.Millisecond })
	client := &http.Client{Transport: &http.Transport{}}
	url := s.url + "/bucket?tagging"
	pr, pw := io.Pipe()
	type answer struct {
		status int
		code   string
		err    error
	}
	first := make(chan answer, 1)
	go func() {
		status, code, _, err := s3Answer(client, signed(t, "PUT", url, pr, size))
		first <- answer{status, code, err}
	}()
	chunk := make([]byte, 100<<10)
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.BodyMemoryInUse() == size })

	start := time.Now()
	status, code, closed, err := s3Answer(client, signed(t, "PUT", url, strings.NewReader(strings.Repeat("x", size)), size))
	if err != nil || status != 503 || code != "SlowDown" || !closed {
		t.Fatalf("second body: %d %s close=%v %v", status, code, closed, err)
	}
	t.Logf("second 800 KiB body refused after %v", time.Since(start).Round(time.Millisecond))

	for range 7 {
		if _, err := pw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	pw.Close()
	if a := <-first; a.err != nil || a.code != "ServiceUnavailable" {
		t.Fatalf("first body: %d %s %v", a.status, a.code, a.err)
	}
	waitFor(t, func() bool { return s.BodyMemoryInUse() == 0 })
	_, m := getText(t, s.admin+"/metrics")
	if !strings.Contains(m, "fencegate_buffered_body_bytes 0") || !strings.Contains(m, "fencegate_body_memory_refused_total 1") {
		t.Errorf("metrics:\n%s", grepLines(m, "body"))
	}
	// The budget is whole again: a body as large is read at once.
	status, code, _, err = s3Answer(client, signed(t, "PUT", url, strings.NewReader(strings.Repeat("x", size)), size))
	if err != nil || code != "ServiceUnavailable" {
		t.Fatalf("third body: %d %s %v", status, code, err)
	}
	// Larger than the whole budget: it could never fit.
	// (Its body stops after 16 KiB, so the answer cannot race a reset.)
	stop := make(chan struct{})
	defer close(stop)
	stalled := io.MultiReader(strings.NewReader(strings.Repeat("x", 16<<10)), blockingReader(stop))
	status, code, _, err = s3Answer(client, signed(t, "PUT", url, stalled, 2<<20))
	if err != nil || code != "MaxMessageLengthExceeded" {
		t.Fatalf("body larger than the budget: %d %s %v", status, code, err)
	}
	if n := s.BodyMemoryInUse(); n != 0 {
		t.Fatalf("%d bytes still taken", n)
	}
}

// blockingReader sends nothing until stop is closed.
type blockingReader chan struct{}

func (b blockingReader) Read([]byte) (int, error) {
	<-b
	return 0, io.EOF
}

// The unverified share: per address at most its cap (1 MiB of the default
// 64 MiB), in all at most an eighth of the body memory, never waited for; what it gives back is taken
// again, and authenticated requests keep the rest of the budget.
func TestUnverifiedShare(t *testing.T) {
	s := &Server{bodies: newBodyBudget(64<<20, 50*time.Millisecond, newMetrics())}
	ctxFrom := func(ip string) *fasthttp.RequestCtx {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}, nil)
		return &ctx
	}
	var held []*fasthttp.RequestCtx
	for i := 0; i < 16; i++ {
		ctx := ctxFrom("192.0.2.1")
		if e := s.takeUnverifiedMemory(ctx, maxPostFields); e != nil {
			t.Fatalf("form %d: %v", i, e)
		}
		held = append(held, ctx)
	}
	start := time.Now()
	if e := s.takeUnverifiedMemory(ctxFrom("192.0.2.1"), maxPostFields); e == nil || e.Code != "SlowDown" {
		t.Fatalf("the 17th unverified form of one address: %v, want SlowDown", e)
	}
	if took := time.Since(start); took > 20*time.Millisecond {
		t.Fatalf("a refused unverified form waited %s", took)
	}
	if e := s.takeUnverifiedMemory(ctxFrom("192.0.2.2"), maxPostFields); e != nil {
		t.Fatalf("another address: %v", e)
	}
	// An authenticated request may take all but the unverified share.
	if e := s.takeBodyMemory(ctxFrom("192.0.2.3"), 56<<20); e != nil {
		t.Fatalf("an authenticated body beside the unverified share: %v", e)
	}
	s.releaseBodyMemory(held[0])
	if e := s.takeUnverifiedMemory(ctxFrom("192.0.2.1"), maxPostFields); e != nil {
		t.Fatalf("a place given back is taken again: %v", e)
	}
	if e := s.takeUnverifiedMemory(ctxFrom("192.0.2.9"), maxUnverifiedPerIP+1); e == nil || e.Code != "MaxMessageLengthExceeded" {
		t.Fatalf("a body over the address's whole share: %v", e)
	}
}
