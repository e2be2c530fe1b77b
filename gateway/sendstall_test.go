package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// tcpPair is a loopback connection: the gateway's end and the client's.
func tcpPair(t testing.TB) (server *net.TCPConn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); client.Close() })
	return s.(*net.TCPConn), client
}

// A write the client takes nothing of is cut between one and one and a half
// timeouts after the socket buffers fill, counted once; the connection then
// refuses every later write at once (crypto/tls's closing alert, with a
// deadline of its own, would otherwise wait on the client again).
func TestSendWatchCutsAStalledWrite(t *testing.T) {
	const timeout = 400 * time.Millisecond
	s, _ := tcpPair(t)
	stalled := prometheus.NewCounter(prometheus.CounterOpts{Name: "stalled"})
	c := &clientConn{TCPConn: s, send: newSendWatch(s, timeout, stalled)}
	start := time.Now()
	_, err := c.Write(make([]byte, 256<<20)) // far more than the sockets hold
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the stalled write ended with %v, want a timeout", err)
	}
	if took < timeout || took > 3*timeout {
		t.Errorf("the stalled write was cut after %v; the timeout is %v", took, timeout)
	}
	if got := testutil.ToFloat64(stalled); got != 1 {
		t.Errorf("stalls counted: %v", got)
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	start = time.Now()
	if _, err := c.Write([]byte("close notify")); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > timeout/4 {
		t.Errorf("a write after the cut: %v after %v", err, time.Since(start))
	}
	if got := testutil.ToFloat64(stalled); got != 1 {
		t.Errorf("stalls counted: %v", got)
	}
}

// A client that reads slowly but steadily is never cut, though each write
// call into the full socket buffer lasts longer than the timeout.
func TestSendWatchSparesASlowReader(t *testing.T) {
	const timeout = 400 * time.Millisecond
	s, client := tcpPair(t)
	// A fixed buffer, as in TestReaderThatStopsReadingIsCutOff: TCP reopens
	// the window once a good part of it is free, which at this pace is well
	// within the timeout.
	_ = client.(*net.TCPConn).SetReadBuffer(256 << 10)
	stalled := prometheus.NewCounter(prometheus.CounterOpts{Name: "stalled"})
	c := &clientConn{TCPConn: s, send: newSendWatch(s, timeout, stalled)}
	const size = 16 << 20
	go func() { // fill the buffers, then 64 KiB every 50 ms (1.3 MB/s) for 2 s
		time.Sleep(100 * time.Millisecond)
		for start := time.Now(); time.Since(start) < 5*timeout; {
			if _, err := io.CopyN(io.Discard, client, 64<<10); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = io.Copy(io.Discard, client)
	}()
	start := time.Now()
	n, err := c.Write(make([]byte, size))
	if err != nil || n != size {
		t.Fatalf("a slow reader's write: %d of %d bytes after %v: %v", n, size, time.Since(start), err)
	}
	if time.Since(start) < 5*timeout {
		t.Errorf("the write took %v, less than the slow reading", time.Since(start))
	}
}

// The watch's cost per write call (the hot path's responses are a few calls
// each): the watched connection against the plain one, to a reading client.
func BenchmarkClientConnWrite(b *testing.B) {
	for _, watched := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "watched"}[watched], func(b *testing.B) {
			s, client := tcpPair(b)
			go func() { _, _ = io.Copy(io.Discard, client) }()
			c := &clientConn{TCPConn: s}
			if watched {
				c.send = newSendWatch(s, time.Minute, prometheus.NewCounter(prometheus.CounterOpts{Name: "stalled"}))
			}
			p := make([]byte, 512)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A write that waits on its source (a body spliced from a store that pauses)
// while the client has taken every byte is not the client's stall: nothing
// is cut or counted.
func TestSendWatchSparesAClientWaitingOnTheSource(t *testing.T) {
	const timeout = 200 * time.Millisecond
	s, client := tcpPair(t)
	go func() { _, _ = io.Copy(io.Discard, client) }()
	stalled := prometheus.NewCounter(prometheus.CounterOpts{Name: "stalled"})
	c := &clientConn{TCPConn: s, send: newSendWatch(s, timeout, stalled)}
	if _, err := c.Write([]byte("the head, then the body pauses")); err != nil {
		t.Fatal(err)
	}
	c.send.begin() // as a splice blocked on reading the store
	time.Sleep(4 * timeout)
	c.send.end()
	if got := testutil.ToFloat64(stalled); got != 0 {
		t.Errorf("stalls counted: %v", got)
	}
	if _, err := c.Write([]byte("the rest")); err != nil {
		t.Errorf("a write after the source's pause: %v", err)
	}
}
