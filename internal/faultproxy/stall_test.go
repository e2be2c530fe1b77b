package faultproxy

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A stalled request body reaches the store up to the stall point and no
// further until released; then the rest arrives whole.
func TestHTTPStallRequestBody(t *testing.T) {
	var got atomic.Int64
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(countingWriter{&got}, r.Body)
	})
	p := newHTTPProxy(t, tg)
	const size, after = 1 << 20, 100 << 10
	held := p.StallRequestBody(MethodPath("PUT", "/b/k"), 1, after)
	res := goDo(t, "PUT", p.URL()+"/b/k", strings.Repeat("a", size))
	ev := recv(t, held.Arrived, "the stall")
	if ev.Method != "PUT" || ev.Path != "/b/k" {
		t.Fatalf("event %+v", ev)
	}
	time.Sleep(100 * time.Millisecond)
	if n := got.Load(); n != after {
		t.Fatalf("the store got %d bytes while stalled, want %d", n, after)
	}
	expectPending(t, res)
	held.Release()
	if r := recv(t, res, "the released request"); r.status != 200 || got.Load() != size {
		t.Fatalf("released: %+v, the store got %d bytes", r, got.Load())
	}
	if ev := recv(t, held.Delivered, "the stalled exchange's end"); !ev.Whole || ev.Status != 200 {
		t.Fatalf("delivered %+v, want whole with the store's 200", ev)
	}
}

// A stalled request whose sender went away meanwhile is not whole when
// released: the store never has its body, and Delivered says so.
func TestHTTPStalledRequestWhoseSenderLeft(t *testing.T) {
	readErr := make(chan error, 1)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		readErr <- err
	})
	p := newHTTPProxy(t, tg)
	held := p.StallRequestBody(MethodPath("PUT", "/b/k"), 1, 10)
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("a", 500))
	recv(t, held.Arrived, "the stall")
	conn.Close()
	time.Sleep(50 * time.Millisecond)
	held.Release()
	if ev := recv(t, held.Delivered, "the stalled exchange's end"); ev.Whole {
		t.Fatalf("delivered %+v: whole, though its sender had gone", ev)
	}
	if err := recv(t, readErr, "the store's read"); err == nil {
		t.Fatal("the store read a whole body")
	}
}

// A stalled answer whose reader went away meanwhile is not whole when
// released.
func TestHTTPStalledAnswerWhoseReaderLeft(t *testing.T) {
	const size, after = 4 << 20, 100 << 10
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = io.WriteString(w, strings.Repeat("b", size))
	})
	p := newHTTPProxy(t, tg)
	held := p.StallResponseBody(MethodPath("GET", "/b/k"), 1, after)
	resp, err := client.Get(p.URL() + "/b/k")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, held.Arrived, "the stall")
	resp.Body.Close()
	time.Sleep(50 * time.Millisecond)
	held.Release()
	if ev := recv(t, held.Delivered, "the stalled exchange's end"); ev.Whole || ev.Status != 200 {
		t.Fatalf("delivered %+v: want not whole, with the store's 200", ev)
	}
}

// A dropped stall cuts the request off: the store never sees it whole.
func TestHTTPStallRequestBodyDropped(t *testing.T) {
	readErr := make(chan error, 1)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		readErr <- err
	})
	p := newHTTPProxy(t, tg)
	held := p.StallRequestBody(MethodPath("PUT", "/b/k"), 1, 10)
	res := goDo(t, "PUT", p.URL()+"/b/k", strings.Repeat("a", 1000))
	recv(t, held.Arrived, "the stall")
	held.Drop()
	if err := recv(t, readErr, "the store's read"); err == nil {
		t.Fatal("the store read a whole body")
	}
	if r := recv(t, res, "the dropped request"); r.err == nil {
		t.Fatalf("the client got an answer: %+v", r)
	}
}

// A stalled answer reaches the client up to the stall point; released, the
// rest follows.
func TestHTTPStallResponseBody(t *testing.T) {
	const size, after = 1 << 20, 100 << 10
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1048576")
		_, _ = io.WriteString(w, strings.Repeat("b", size))
	})
	p := newHTTPProxy(t, tg)
	held := p.StallResponseBody(MethodPath("GET", "/b/k"), 1, after)
	resp, err := client.Get(p.URL() + "/b/k")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ev := recv(t, held.Arrived, "the stall"); ev.Status != 200 {
		t.Fatalf("event %+v", ev)
	}
	first := make([]byte, after)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	more := make(chan int, 1)
	go func() { n, _ := resp.Body.Read(make([]byte, 10)); more <- n }()
	select {
	case n := <-more:
		t.Fatalf("read %d bytes past the stall", n)
	case <-time.After(100 * time.Millisecond):
	}
	held.Release()
	n := recv(t, more, "the first byte after the release")
	rest, err := io.ReadAll(resp.Body)
	if err != nil || after+n+len(rest) != size {
		t.Fatalf("after the release: %d+%d+%d bytes, %v", after, n, len(rest), err)
	}
	if ev := recv(t, held.Delivered, "the stalled exchange's end"); !ev.Whole {
		t.Fatalf("delivered %+v, want whole", ev)
	}
}

type countingWriter struct{ n *atomic.Int64 }

func (w countingWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }
