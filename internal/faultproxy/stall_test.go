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
// released, however little of it remained (a short rest is taken by the
// socket even after its reader has gone).
func TestHTTPStalledAnswerWhoseReaderLeft(t *testing.T) {
	for _, size := range []int{4 << 20, 300} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(size))
				_, _ = io.WriteString(w, strings.Repeat("b", size))
			})
			p := newHTTPProxy(t, tg)
			held := p.StallResponseBody(MethodPath("GET", "/b/k"), 1, 16)
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
		})
	}
}

type countingWriter struct{ n *atomic.Int64 }

func (w countingWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }
