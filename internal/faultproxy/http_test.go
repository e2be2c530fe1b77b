package faultproxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// target is a store stand-in that counts what reached it.
type target struct {
	*httptest.Server
	conns    atomic.Int32 // TCP connections accepted
	requests atomic.Int32 // requests that reached the handler
}

func newTarget(t *testing.T, h http.HandlerFunc) *target {
	t.Helper()
	tg := &target{}
	tg.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.requests.Add(1)
		h(w, r)
	}))
	tg.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			tg.conns.Add(1)
		}
	}
	tg.Start()
	t.Cleanup(tg.Close)
	return tg
}

func newHTTPProxy(t *testing.T, tg *target) *HTTP {
	t.Helper()
	p, err := NewHTTP(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// client never reuses connections, so net/http never retries a request.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

type result struct {
	status int
	body   string
	err    error
}

func do(req *http.Request) result {
	resp, err := client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, body: string(b), err: err}
}

// goDo runs the request in the background.
func goDo(t *testing.T, method, url, body string) <-chan result {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan result, 1)
	go func() { ch <- do(req) }()
	return ch
}

func expectPending(t *testing.T, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("request finished while held: %+v", r)
	default:
	}
}

func TestHTTPPassThroughIsExact(t *testing.T) {
	type seen struct {
		requestURI, host, rawPath, query, body string
		header                                 http.Header
		contentLength                          int64
	}
	got := make(chan seen, 1)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.RequestURI, r.Host, r.URL.RawPath, r.URL.RawQuery, string(b), r.Header.Clone(), r.ContentLength}
		w.Header()["Date"] = nil // the proxy must not add these either
		w.Header()["Content-Type"] = nil
		w.Header().Set("X-Amz-Request-Id", "req-1")
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "ok")
	})
	p := newHTTPProxy(t, tg)

	c := dialTCP(t, strings.TrimPrefix(p.URL(), "http://"))
	const uri = "/bucket/a%2Bb%20c/d?x-id=PutObject&tagging=k%3Dv%2Bw"
	raw := "PUT " + uri + " HTTP/1.1\r\n" +
		"Host: store.example:9000\r\n" +
		"X-Amz-Date: 20240101T000000Z\r\n" +
		"x-amz-meta-multi: one\r\n" +
		"X-Amz-Meta-Multi: two\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc\r\n" +
		"Content-Length: 11\r\n\r\nhello world"
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || string(body) != "ok" || resp.Header.Get("X-Amz-Request-Id") != "req-1" {
		t.Fatalf("response %d %q %v", resp.StatusCode, body, resp.Header)
	}
	for _, k := range []string{"Date", "Content-Type"} {
		if _, ok := resp.Header[k]; ok {
			t.Errorf("proxy added a %s header", k)
		}
	}

	s := recv(t, got, "target request")
	if s.requestURI != uri || s.rawPath != "/bucket/a%2Bb%20c/d" || s.query != "x-id=PutObject&tagging=k%3Dv%2Bw" {
		t.Errorf("target saw URI %q rawPath %q query %q", s.requestURI, s.rawPath, s.query)
	}
	if s.host != "store.example:9000" || s.body != "hello world" || s.contentLength != 11 {
		t.Errorf("target saw host %q body %q length %d", s.host, s.body, s.contentLength)
	}
	want := http.Header{
		"X-Amz-Date":       {"20240101T000000Z"},
		"X-Amz-Meta-Multi": {"one", "two"},
		"Authorization":    {"AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc"},
		"Content-Length":   {"11"},
	}
	if len(s.header) != len(want) {
		t.Errorf("target headers %v, want exactly %v", s.header, want)
	}
	for k, v := range want {
		if !slices.Equal(s.header[k], v) {
			t.Errorf("target header %s = %q, want %q", k, s.header[k], v)
		}
	}
	if p.Requests() != 1 {
		t.Errorf("Requests = %d", p.Requests())
	}
}

func TestHTTPHeadKeepsContentLength(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "12345")
	})
	p := newHTTPProxy(t, tg)
	resp, err := client.Head(p.URL() + "/b/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != 12345 {
		t.Fatalf("HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
	}
}

// TestHTTPStreamsBothWays sends 8 MiB each way, with Content-Length and
// chunked, and proves neither direction is buffered whole: the target reads
// the first MiB of the request before the client has written the rest, and
// the client reads the first MiB of the response before the target writes
// the rest.
func TestHTTPStreamsBothWays(t *testing.T) {
	const size, first = 8 << 20, 1 << 20
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(data)
	sum := sha256.Sum256(data)

	type seen struct {
		sum     string
		length  int64
		chunked bool
	}
	gotFirst := make(chan struct{}, 1)
	sendRest := make(chan struct{}, 1)
	got := make(chan seen, 1)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		if _, err := io.CopyN(h, r.Body, first); err != nil {
			t.Errorf("target reading first MiB: %v", err)
			return
		}
		gotFirst <- struct{}{}
		if _, err := io.Copy(h, r.Body); err != nil {
			t.Errorf("target reading body: %v", err)
		}
		got <- seen{hex.EncodeToString(h.Sum(nil)), r.ContentLength, slices.Equal(r.TransferEncoding, []string{"chunked"})}
		w.Header().Set("Content-Length", "8388608")
		_, _ = w.Write(data[:first])
		w.(http.Flusher).Flush()
		<-sendRest
		_, _ = w.Write(data[first:])
	})
	p := newHTTPProxy(t, tg)

	for _, chunked := range []bool{false, true} {
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("PUT", p.URL()+"/b/big", pr)
		req.ContentLength = size
		if chunked {
			req.ContentLength = -1
		}
		respc := make(chan *http.Response, 1)
		errc := make(chan error, 1)
		go func() {
			resp, err := client.Do(req)
			if err != nil {
				errc <- err
				return
			}
			respc <- resp
		}()
		if _, err := pw.Write(data[:first]); err != nil {
			t.Fatal(err)
		}
		recv(t, gotFirst, "target to read the first MiB")
		if _, err := pw.Write(data[first:]); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		s := recv(t, got, "target body")
		if s.sum != hex.EncodeToString(sum[:]) || s.chunked != chunked || (!chunked && s.length != size) {
			t.Fatalf("chunked=%v: target saw %+v", chunked, s)
		}
		var resp *http.Response
		select {
		case resp = <-respc:
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(waitLimit):
			t.Fatal("no response")
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(resp.Body, buf[:first]); err != nil {
			t.Fatal(err)
		}
		sendRest <- struct{}{}
		if _, err := io.ReadFull(resp.Body, buf[first:]); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !bytes.Equal(buf, data) {
			t.Fatal("response body differs")
		}
	}
}

func TestHTTPFail(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {})
	p := newHTTPProxy(t, tg)
	const xml = "<Error><Code>InternalError</Code></Error>"
	p.Fail(MethodPath("PUT", "/b/"), 1, 500, xml)

	r := recv(t, goDo(t, "PUT", p.URL()+"/b/k", strings.Repeat("x", 1<<20)), "failed request")
	if r.err != nil || r.status != 500 || r.body != xml {
		t.Fatalf("got %+v", r)
	}
	if tg.conns.Load() != 0 || tg.requests.Load() != 0 {
		t.Fatal("the target saw the failed request")
	}
	// Used up: the next one passes.
	if r := recv(t, goDo(t, "PUT", p.URL()+"/b/k", "x"), "second request"); r.status != 200 {
		t.Fatalf("got %+v", r)
	}
	if tg.requests.Load() != 1 || p.Requests() != 2 {
		t.Fatalf("target requests %d, proxy requests %d", tg.requests.Load(), p.Requests())
	}
}

func TestHTTPDropResponse(t *testing.T) {
	var stored atomic.Value
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		stored.Store(string(b))
		w.WriteHeader(201)
	})
	p := newHTTPProxy(t, tg)
	events := p.DropResponse(MethodPath("PUT", "/b/k"), 1)

	r := recv(t, goDo(t, "PUT", p.URL()+"/b/k?x=1", "payload"), "dropped request")
	if r.err == nil {
		t.Fatalf("client got a response: %+v", r)
	}
	ev := recv(t, events, "drop event")
	if ev != (Event{Method: "PUT", Path: "/b/k", RawQuery: "x=1", Status: 201}) {
		t.Fatalf("event %+v", ev)
	}
	if stored.Load() != "payload" {
		t.Fatalf("target stored %v", stored.Load())
	}
}

// TestHTTPClientCutMidBody: when the client's connection dies mid-body, the
// target's handler sees an error reading the body, not a short complete body.
func TestHTTPClientCutMidBody(t *testing.T) {
	for name, head := range map[string]string{
		"content-length": "Content-Length: 1000\r\n\r\n",
		"chunked":        "Transfer-Encoding: chunked\r\n\r\n64\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			gotPart := make(chan struct{})
			readErr := make(chan error, 1)
			tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
				if _, err := io.ReadFull(r.Body, make([]byte, 100)); err != nil {
					readErr <- err
					return
				}
				close(gotPart)
				_, err := io.Copy(io.Discard, r.Body)
				readErr <- err
			})
			p := newHTTPProxy(t, tg)
			c := dialTCP(t, strings.TrimPrefix(p.URL(), "http://"))
			msg := "PUT /b/k HTTP/1.1\r\nHost: x\r\n" + head + strings.Repeat("a", 100)
			if _, err := io.WriteString(c, msg); err != nil {
				t.Fatal(err)
			}
			recv(t, gotPart, "target to read the first 100 bytes")
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			err := recv(t, readErr, "target body read to end")
			if err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("target body read ended with %v, want an error", err)
			}
		})
	}
}

func TestHTTPDelay(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {})
	p := newHTTPProxy(t, tg)
	const d = 100 * time.Millisecond
	p.Delay(MethodPath("", "/"), 1, d)
	start := time.Now()
	if r := recv(t, goDo(t, "GET", p.URL()+"/x", ""), "delayed request"); r.status != 200 {
		t.Fatalf("got %+v", r)
	}
	if el := time.Since(start); el < d {
		t.Fatalf("request took %v, want >= %v", el, d)
	}
}

func TestNewHTTPRejectsNonHTTPTarget(t *testing.T) {
	for _, s := range []string{"127.0.0.1:9000", "https://127.0.0.1:9000", "://"} {
		if p, err := NewHTTP(s); err == nil {
			p.Close()
			t.Errorf("NewHTTP(%q) accepted", s)
		}
	}
}
