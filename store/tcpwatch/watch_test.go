package tcpwatch

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair is a loopback connection: the watched end and its peer.
func tcpPair(t testing.TB) (watched *net.TCPConn, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); peer.Close() })
	return s.(*net.TCPConn), peer
}

// watchedConn brackets its reads and writes with the watches, as the
// gateway's client connections and the store client's connections do.
type watchedConn struct {
	*net.TCPConn
	send, receive *Watch
}

func (c *watchedConn) Write(p []byte) (int, error) {
	if err := c.send.Start(); err != nil {
		return 0, err
	}
	defer c.send.End()
	return c.TCPConn.Write(p)
}

func (c *watchedConn) Read(p []byte) (int, error) {
	if err := c.receive.Start(); err != nil {
		return 0, err
	}
	defer c.receive.End()
	return c.TCPConn.Read(p)
}

func watch(c *net.TCPConn, timeout time.Duration) (*watchedConn, *atomic.Int32) {
	var cuts atomic.Int32
	count := func() { cuts.Add(1) }
	return &watchedConn{TCPConn: c, send: Sending(c, timeout, count), receive: Receiving(c, timeout, count)}, &cuts
}

// A write the peer takes nothing of is cut between one and one and a half
// timeouts after the socket buffers fill, counted once; the direction then
// refuses every later write at once (crypto/tls's closing alert, with a
// deadline of its own, would otherwise wait on the peer again).
func TestSendingCutsAStalledWrite(t *testing.T) {
	const timeout = 400 * time.Millisecond
	s, _ := tcpPair(t)
	c, cuts := watch(s, timeout)
	start := time.Now()
	_, err := c.Write(make([]byte, 256<<20)) // far more than the sockets hold
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the stalled write ended with %v, want a timeout", err)
	}
	if took < timeout || took > 3*timeout {
		t.Errorf("the stalled write was cut after %v; the timeout is %v", took, timeout)
	}
	if got := cuts.Load(); got != 1 || !c.send.Cut() || c.receive.Cut() {
		t.Errorf("cuts counted: %v; sending cut %v, receiving cut %v", got, c.send.Cut(), c.receive.Cut())
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	start = time.Now()
	if _, err := c.Write([]byte("close notify")); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > timeout/4 {
		t.Errorf("a write after the cut: %v after %v", err, time.Since(start))
	}
	if got := cuts.Load(); got != 1 {
		t.Errorf("cuts counted: %v", got)
	}
}

// A peer that reads slowly but steadily is never cut, though each write
// call into the full socket buffer lasts longer than the timeout.
func TestSendingSparesASlowReader(t *testing.T) {
	const timeout = 400 * time.Millisecond
	s, peer := tcpPair(t)
	// A fixed buffer: TCP reopens the window once a good part of it is free,
	// which at this pace is well within the timeout.
	_ = peer.(*net.TCPConn).SetReadBuffer(256 << 10)
	c, cuts := watch(s, timeout)
	const size = 16 << 20
	go func() { // fill the buffers, then 64 KiB every 50 ms (1.3 MB/s) for 2 s
		time.Sleep(100 * time.Millisecond)
		for start := time.Now(); time.Since(start) < 5*timeout; {
			if _, err := io.CopyN(io.Discard, peer, 64<<10); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = io.Copy(io.Discard, peer)
	}()
	start := time.Now()
	n, err := c.Write(make([]byte, size))
	if err != nil || n != size {
		t.Fatalf("a slow reader's write: %d of %d bytes after %v: %v", n, size, time.Since(start), err)
	}
	if time.Since(start) < 5*timeout {
		t.Errorf("the write took %v, less than the slow reading", time.Since(start))
	}
	if got := cuts.Load(); got != 0 {
		t.Errorf("cuts counted: %v", got)
	}
}

// A write that waits on its source (a body spliced from a store that pauses)
// while the peer has taken every byte is not the peer's stall: nothing is
// cut or counted.
func TestSendingSparesAWriteWaitingOnItsSource(t *testing.T) {
	const timeout = 200 * time.Millisecond
	s, peer := tcpPair(t)
	go func() { _, _ = io.Copy(io.Discard, peer) }()
	c, cuts := watch(s, timeout)
	if _, err := c.Write([]byte("the head, then the body pauses")); err != nil {
		t.Fatal(err)
	}
	c.send.Begin() // as a splice blocked on reading its source
	time.Sleep(4 * timeout)
	c.send.End()
	if got := cuts.Load(); got != 0 {
		t.Errorf("cuts counted: %v", got)
	}
	if _, err := c.Write([]byte("the rest")); err != nil {
		t.Errorf("a write after the source's pause: %v", err)
	}
}

// A read whose peer sends nothing is cut between one and one and a half
// timeouts after the peer's last byte, counted once; the bytes the peer
// sent before were read.
func TestReceivingCutsASilentPeer(t *testing.T) {
	const timeout = 400 * time.Millisecond
	s, peer := tcpPair(t)
	c, cuts := watch(s, timeout)
	go func() { // a byte every quarter timeout for two timeouts, then silence
		for i := 0; i < 8; i++ {
			if _, err := peer.Write([]byte{'x'}); err != nil {
				return
			}
			time.Sleep(timeout / 4)
		}
	}()
	start := time.Now()
	var n int
	var err error
	for err == nil { // c.Read itself: io.Copy would take the TCPConn's WriteTo
		var m int
		m, err = c.Read(make([]byte, 64))
		n += m
	}
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != 8 {
		t.Fatalf("the read ended with %v after %d bytes, want a timeout after 8", err, n)
	}
	// The last byte came at about 1.75 timeouts.
	if took < 2*timeout+timeout/2 || took > 4*timeout {
		t.Errorf("the read was cut after %v; the peer fell silent at about %v, the timeout is %v", took, 7*timeout/4, timeout)
	}
	if got := cuts.Load(); got != 1 || !c.receive.Cut() || c.send.Cut() {
		t.Errorf("cuts counted: %v; receiving cut %v, sending cut %v", got, c.receive.Cut(), c.send.Cut())
	}
}

// A read that waits on this side (a body spliced to a slow client, its
// bytes waiting unread in the socket) is not the peer's stall.
func TestReceivingSparesAPeerWhoseBytesWaitUnread(t *testing.T) {
	const timeout = 200 * time.Millisecond
	s, peer := tcpPair(t)
	c, cuts := watch(s, timeout)
	if _, err := peer.Write([]byte("sent, not yet read")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	c.receive.Begin() // as a splice blocked on writing to its client
	time.Sleep(4 * timeout)
	c.receive.End()
	if got := cuts.Load(); got != 0 {
		t.Errorf("cuts counted: %v", got)
	}
	if _, err := io.ReadFull(c, make([]byte, len("sent, not yet read"))); err != nil {
		t.Errorf("a read after the pause: %v", err)
	}
}

// The watch's cost per write call (the hot path's answers are a few calls
// each): the watched connection against the plain one, to a reading peer.
func BenchmarkWatchedWrite(b *testing.B) {
	for _, watched := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "watched"}[watched], func(b *testing.B) {
			s, peer := tcpPair(b)
			go func() { _, _ = io.Copy(io.Discard, peer) }()
			var w io.Writer = s
			if watched {
				w, _ = watch(s, time.Minute)
			}
			p := make([]byte, 512)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.Write(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
