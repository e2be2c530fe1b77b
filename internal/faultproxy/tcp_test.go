package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const waitLimit = 5 * time.Second

// recv waits for a value on ch, failing the test after waitLimit.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// echoServer echoes every connection and reports every chunk it reads.
type echoServer struct {
	addr     string
	accepted atomic.Int32
	chunks   chan string
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{addr: ln.Addr().String(), chunks: make(chan string, 100)}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.chunks <- string(buf[:n])
						_, _ = c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func newTCPProxy(t *testing.T, target string) *TCP {
	t.Helper()
	p, err := NewTCP(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and expects it echoed back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading echo of %q: %v", msg, err)
	}
	if string(buf) != msg {
		t.Fatalf("echo = %q, want %q", buf, msg)
	}
}

// expectTimeout asserts that nothing arrives on c for a short while.
func expectTimeout(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read = %q, %v; want a timeout", buf[:n], err)
	}
	_ = c.SetReadDeadline(time.Time{})
}

// expectClosed asserts that c is closed by the peer without any more data.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	var ne net.Error
	if n > 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read = %q, %v; want EOF or reset", buf[:n], err)
	}
}

func TestTCPForwards(t *testing.T) {
	srv := newEchoServer(t)
	p := newTCPProxy(t, srv.addr)
	c := dialTCP(t, p.Addr())
	roundTrip(t, c, "hello")
	roundTrip(t, c, "again")
	if got := recv(t, srv.chunks, "chunk"); got != "hello" {
		t.Fatalf("server got %q", got)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns = %d, want 1", n)
	}
}

func TestTCPBlackhole(t *testing.T) {
	srv := newEchoServer(t)
	p := newTCPProxy(t, srv.addr)
	c := dialTCP(t, p.Addr())
	roundTrip(t, c, "a")

	p.Blackhole(true)
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	expectTimeout(t, c)
	// A connection made during the partition is accepted, but the target
	// does not even see it.
	c2 := dialTCP(t, p.Addr())
	if _, err := c2.Write([]byte("lost2")); err != nil {
		t.Fatal(err)
	}
	expectTimeout(t, c2)
	if n := srv.accepted.Load(); n != 1 {
		t.Fatalf("target accepted %d connections during blackhole, want 1", n)
	}
	if n := p.Conns(); n != 2 {
		t.Fatalf("Conns = %d, want 2 (connections stay open)", n)
	}

	p.Blackhole(false)
	roundTrip(t, c, "back")
	roundTrip(t, c2, "new")
	// The server saw a, back, new and never the dropped bytes.
	for _, want := range []string{"a", "back", "new"} {
		if got := recv(t, srv.chunks, "chunk"); got != want {
			t.Fatalf("server got %q, want %q", got, want)
		}
	}
}

func TestTCPBlackholeDropsServerBytes(t *testing.T) {
	// The server writes only when told; its bytes must not reach the client
	// during the blackhole.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvConn := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			srvConn <- c
		}
	}()
	p := newTCPProxy(t, ln.Addr().String())
	c := dialTCP(t, p.Addr())
	sc := recv(t, srvConn, "server conn")
	defer sc.Close()

	p.Blackhole(true)
	if _, err := sc.Write([]byte("dropped")); err != nil {
		t.Fatal(err)
	}
	expectTimeout(t, c)
	p.Blackhole(false)
	if _, err := sc.Write([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "kept" {
		t.Fatalf("client read %q, %v; want kept", buf, err)
	}
}

func TestTCPCutAfterClientSends(t *testing.T) {
	srv := newEchoServer(t)
	p := newTCPProxy(t, srv.addr)
	c := dialTCP(t, p.Addr())
	roundTrip(t, c, "BEGIN;")
	recv(t, srv.chunks, "BEGIN")

	fired := p.CutAfterClientSends([]byte("commit"))
	// The pattern straddles two reads: the server has echoed the first half
	// before the second half is sent. Matching ignores ASCII case.
	roundTrip(t, c, "Qselect 1; COM")
	recv(t, srv.chunks, "first half")
	select {
	case <-fired:
		t.Fatal("rule fired on half a pattern")
	default:
	}
	if _, err := c.Write([]byte("mit;")); err != nil {
		t.Fatal(err)
	}
	recv(t, fired, "rule to fire")
	if got := recv(t, srv.chunks, "second half"); got != "mit;" {
		t.Fatalf("server got %q, want mit;", got)
	}
	// The server echoed "mit;", but the client never gets it.
	expectClosed(t, c)
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns = %d after cut, want 0", n)
	}

	// One-shot: another connection sending the pattern is unaffected.
	c2 := dialTCP(t, p.Addr())
	roundTrip(t, c2, "commit")
}

func TestTCPCutAll(t *testing.T) {
	srv := newEchoServer(t)
	p := newTCPProxy(t, srv.addr)
	c1 := dialTCP(t, p.Addr())
	c2 := dialTCP(t, p.Addr())
	roundTrip(t, c1, "one")
	roundTrip(t, c2, "two")
	if n := p.Conns(); n != 2 {
		t.Fatalf("Conns = %d, want 2", n)
	}
	p.CutAll()
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns = %d after CutAll, want 0", n)
	}
	expectClosed(t, c1)
	expectClosed(t, c2)
	// New connections still work.
	roundTrip(t, dialTCP(t, p.Addr()), "three")
}

func TestLowerASCII(t *testing.T) {
	if got := string(lowerASCII(nil, []byte("CoMMiT\xC3\x89"))); got != "commit\xC3\x89" {
		t.Fatalf("lowerASCII = %q", got)
	}
}
