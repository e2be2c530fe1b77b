package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/store/tcpwatch"
)

// A connection the gateway closes while its client is still sending (a
// request refused before its body was read) must not be closed outright: a
// socket closed with unread bytes makes the kernel answer with a reset, and
// a reset can throw away the S3 error already sent before the client has
// read it. Clients that send their whole body before reading the answer
// (urllib3, curl without Expect) then report a broken connection instead of
// 403 SignatureDoesNotMatch or 400 BadDigest. So such a connection lingers:
// its write side is shut after the answer, what the client still sends is
// read and discarded, within a bound, and only then is it closed.
const (
	// lingerBytes and lingerTime bound what one refused request can make the
	// gateway read after its answer. A body larger than this still ends in a
	// reset; by then the client has had a second to read the answer.
	lingerBytes = 8 << 20
	lingerTime  = 2 * time.Second
)

// clientConn is a plain-TCP client connection as the S3 listener accepts it.
// The embedded *net.TCPConn keeps its ReadFrom, so relayed bodies still
// reach the client by splice(2) (relay.go).
type clientConn struct {
	*net.TCPConn
	linger atomic.Bool
	send   *tcpwatch.Watch // nil: writes are not bounded (sendstall.go)
	// begun: a byte of a request has arrived (after TLS's handshake): fasthttp
	// said so (StateActive). Only the connection's own goroutine touches it.
	begun bool
}

// clientConnOf is the plain-TCP connection under c, a *clientConn or TLS over
// one; nil for any other connection.
func clientConnOf(c net.Conn) *clientConn {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	cc, _ := c.(*clientConn)
	return cc
}

// Close closes the connection, after draining it if its last answer asked
// for that (lingerOnClose). fasthttp calls it from the connection's own
// goroutine, which the connection limit still counts while it drains.
func (c *clientConn) Close() error {
	c.send.Stop()
	if c.linger.Load() {
		return drainAndClose(c.TCPConn, lingerBytes, lingerTime)
	}
	return c.TCPConn.Close()
}

// lingerOnClose marks the connection of an answer sent with Connection:
// close while the request's body may still be arriving.
func lingerOnClose(ctx *fasthttp.RequestCtx) {
	// Over TLS, TLS's close_notify is sent first; the drain reads raw bytes.
	if cc := clientConnOf(ctx.Conn()); cc != nil {
		cc.linger.Store(true)
	}
}

// drainAndClose half-closes c once its answer is written, so the client sees
// the end of the answer, reads and discards up to max bytes the client is
// still sending, for at most d, then closes c.
func drainAndClose(c *net.TCPConn, max int64, d time.Duration) error {
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, _ = io.CopyN(io.Discard, c, max)
	return c.Close()
}
