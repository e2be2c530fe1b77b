package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// Request bodies reach the store whole through the pooled copy, and the
// transport keeps its connection to the store alive between requests.
func TestBodiesCopyWholeOnOneConnection(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 12<<10) // 192 KiB: more than one buffer
	want := sha256.Sum256(payload)
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, err := io.ReadAll(r.Body)
		if err != nil || sha256.Sum256(got) != want {
			t.Errorf("the store received %d bytes (%v), not the body", len(got), err)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(Config{Endpoint: srv.URL, AccessKey: "a", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		req, err := c.NewRequest(context.Background(), http.MethodPut, LevelObject, "b", "k", "")
		if err != nil {
			t.Fatal(err)
		}
		// Not a bytes.Reader: the transport flushes the headers and copies
		// the body with the connection's ReadFrom, as it does a framed body.
		req.Body = io.NopCloser(struct{ io.Reader }{bytes.NewReader(payload)})
		req.ContentLength = int64(len(payload))
		resp, err := c.Send(req, sigv4.EmptySHA256)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to the store for 5 requests in a row", n)
	}
}

// A copyConn's ReadFrom allocates nothing per body.
func TestCopyConnReadFromAllocatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, s)
			s.Close()
		}
	}()
	c, err := dialCopyConns((&net.Dialer{}).DialContext, time.Minute)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rf, ok := c.(*copyConn)
	if !ok {
		t.Fatalf("dialled a %T", c)
	}
	body := make([]byte, 64<<10)
	src := bytes.NewReader(body)
	lr := &io.LimitedReader{}
	rf.ReadFrom(io.LimitReader(src, 1)) // the pool's first buffer
	allocs := testing.AllocsPerRun(20, func() {
		src.Reset(body)
		*lr = io.LimitedReader{R: src, N: int64(len(body))}
		if n, err := rf.ReadFrom(lr); n != int64(len(body)) || err != nil {
			t.Fatalf("copied %d: %v", n, err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per body", allocs)
	}
}
