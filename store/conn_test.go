package store

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The client's own connections carry small writes (conn.go). These tests
// stand an httptest server in for the store: they need to close its
// connections, cut an exchange and count what arrived.

// putStore answers every PUT 200 after reading its body, and counts the PUTs
// that arrived and the bodies it read.
type putStore struct {
	srv    *httptest.Server
	puts   atomic.Int32
	bodies chan []byte
}

func newPutStore(t *testing.T) *putStore {
	ps := &putStore{bodies: make(chan []byte, 16)}
	ps.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.puts.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		ps.bodies <- b
		w.Header().Set("ETag", `"e"`)
	}))
	t.Cleanup(ps.srv.Close)
	return ps
}

func (ps *putStore) put(t *testing.T, p *connPool, body []byte) error {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, ps.srv.URL+"/b/k", bytes.NewReader(body))
	resp, err := p.roundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the PUT's answer: %s", resp.Status)
	}
	return nil
}

func TestSmallBodiesTravelOnTheClientsOwnConnections(t *testing.T) {
	var seen atomic.Value
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen.Store(r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Content-Length") + " " + r.Header.Get("X-Amz-Meta-A") + " " + string(b))
	})
	body := strings.Repeat("x", 64<<10)
	req, err := c.NewRequest(context.Background(), http.MethodPut, LevelObject, "b", "a key", "x-id=PutObject")
	if err != nil {
		t.Fatal(err)
	}
	req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
	req.Header.Set("X-Amz-Meta-A", "v")
	if !carries(req) {
		t.Fatal("a 64 KiB body of known length should travel on the client's own connections")
	}
	resp, err := c.Send(req, "UNSIGNED-PAYLOAD")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, own := resp.Body.(*Body); !own {
		t.Fatalf("the answer came through %T, not the client's own connection", resp.Body)
	}
	want := "PUT /b/a%20key?x-id=PutObject 65536 v " + body
	if got, _ := seen.Load().(string); got != want {
		t.Fatalf("the store saw %.80q..., want %.80q...", got, want)
	}
	if n := len(c.conns.idle); n != 1 {
		t.Fatalf("%d idle connections after the PUT, want its connection back in the pool", n)
	}
	large := &http.Request{Method: http.MethodPut, ContentLength: maxConnBody + 1, Body: io.NopCloser(strings.NewReader(""))}
	if carries(large) {
		t.Fatal("a body larger than maxConnBody should go through the transport")
	}
}

// A store closes idle keep-alive connections after a quiet spell. A write is
// sent once (W4): it must not find out by sending on a dead pooled
// connection, which would fail it with nothing written.
func TestPutAfterStoreClosedIdleConnections(t *testing.T) {
	ps := newPutStore(t)
	p := newConnPool(strings.TrimPrefix(ps.srv.URL, "http://"), 0)
	if err := ps.put(t, p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	<-ps.bodies
	if n := len(p.idle); n != 1 {
		t.Fatalf("%d idle connections, want 1", n)
	}
	ps.srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond) // the close reaches this side
	if err := ps.put(t, p, []byte("two")); err != nil {
		t.Fatalf("a PUT after the store closed its idle connection: %v", err)
	}
	if got := string(<-ps.bodies); got != "two" {
		t.Fatalf("the store read %q", got)
	}
	if n := ps.puts.Load(); n != 2 {
		t.Fatalf("the store saw %d PUTs, want 2", n)
	}
}

// A PUT whose exchange fails after it was sent is not sent again: its
// outcome is unknown, and only settling the key can tell (W4).
func TestPutCutMidExchangeIsSentOnce(t *testing.T) {
	var puts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		puts.Add(1)
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // read and dropped, no answer
		}
	}))
	t.Cleanup(srv.Close)
	p := newConnPool(strings.TrimPrefix(srv.URL, "http://"), 0)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, srv.URL+"/b/k", strings.NewReader("body"))
	if resp, err := p.roundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatal("a PUT whose connection was cut before the answer succeeded")
	}
	time.Sleep(50 * time.Millisecond)
	if n := puts.Load(); n != 1 {
		t.Fatalf("the store saw the PUT %d times, want once", n)
	}
}

// A body that does not match its Content-Length is refused before anything
// is written: the store never sees a request framed on a wrong length.
func TestBodyOfWrongLengthIsNotSent(t *testing.T) {
	ps := newPutStore(t)
	p := newConnPool(strings.TrimPrefix(ps.srv.URL, "http://"), 0)
	for _, tc := range []struct {
		name string
		body string
		n    int64
	}{{"short", "abc", 4}, {"long", "abcde", 4}} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, ps.srv.URL+"/b/k", io.NopCloser(strings.NewReader(tc.body)))
		req.ContentLength = tc.n
		if resp, err := p.roundTrip(req); err == nil {
			resp.Body.Close()
			t.Fatalf("%s body: sent", tc.name)
		}
	}
	// The connections it was not sent on are closed; the store saw no PUT.
	time.Sleep(50 * time.Millisecond)
	if n := ps.puts.Load(); n != 0 {
		t.Fatalf("the store saw %d PUTs, want none", n)
	}
}

// open tells an idle connection the peer closed from one it keeps.
func TestIdleConnectionOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := newConnPool(ln.Addr().String(), 0)
	sc, _, err := p.get(context.Background(), true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.c.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if !sc.open() {
		t.Fatal("an idle connection the peer keeps reads as closed")
	}
	peer.Close()
	time.Sleep(50 * time.Millisecond)
	if sc.open() {
		t.Fatal("an idle connection the peer closed reads as open")
	}
}

// writeHoldingP waits through the runtime's poller when the socket is full
// and delivers every byte in order; a peer that is gone is an error, not a
// hang.
func TestWriteHoldingPWaitsForAFullSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	tc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	peer := <-accepted
	// Small socket buffers on both sides, and a peer that reads only after a
	// while: the write fills the socket and must wait, not spin or fail.
	_ = tc.(*net.TCPConn).SetWriteBuffer(4 << 10)
	_ = peer.(*net.TCPConn).SetReadBuffer(4 << 10)
	sc := &conn{c: tc.(*net.TCPConn)}
	data := make([]byte, maxConnBody)
	for i := range data {
		data[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(data))))
		got <- b
	}()
	start := time.Now()
	if err := sc.writeHoldingP(data); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("the write of %d bytes returned after %s, before the peer read: it did not fill the socket", len(data), took)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("the peer read %d bytes, not the %d written in order", len(b), len(data))
	}

	peer.Close()
	time.Sleep(50 * time.Millisecond)
	errc := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 100 && err == nil; i++ {
			err = sc.writeHoldingP(data)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("writes to a closed peer kept succeeding")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write to a closed peer hung")
	}
}
