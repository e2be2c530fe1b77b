package store

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/fencegate/fencegate/store/tcpwatch"
)

// The transport writes a request body to its connection with the
// connection's ReadFrom (once the headers are flushed, which it does for any
// body that is not a bytes.Reader or the like). net.TCPConn's ReadFrom
// splices from a socket and sends a file, and for any other reader falls back
// to io.Copy, which allocates a 32 KiB buffer per request body. Every body
// fencegate sends is an aws-chunked framing (gateway/awschunked.go) or a small
// document, never a socket or a file, so the transport's connections copy
// through pooled buffers instead: no allocation per body, and a small object's
// body leaves in one write.

// bodyCopyBufferSize holds a 64 KiB object with its framing.
const bodyCopyBufferSize = 128 << 10

var bodyCopyBuffers = sync.Pool{New: func() any { b := make([]byte, bodyCopyBufferSize); return &b }}

// copyConn is one of the transport's TCP connections to the store, with the
// pooled ReadFrom, and its writes bounded: a store that takes nothing more of
// a request body for the answer timeout is cut off (nil: no bound). Every
// other method is the TCP connection's own.
type copyConn struct {
	*net.TCPConn
	w       io.Writer // the connection as a plain writer, made once
	sending *tcpwatch.Watch
}

// writerOnly hides the connection's ReadFrom from io.CopyBuffer.
type writerOnly struct{ c *copyConn }

func (w writerOnly) Write(p []byte) (int, error) { return w.c.Write(p) }

func (c *copyConn) Write(p []byte) (int, error) {
	if err := c.sending.Start(); err != nil {
		return 0, err
	}
	defer c.sending.End()
	return c.TCPConn.Write(p)
}

func (c *copyConn) ReadFrom(r io.Reader) (int64, error) {
	bp := bodyCopyBuffers.Get().(*[]byte)
	defer bodyCopyBuffers.Put(bp)
	return io.CopyBuffer(c.w, r, *bp)
}

func (c *copyConn) Close() error {
	c.sending.Stop()
	return c.TCPConn.Close()
}

// dialCopyConns wraps dial's TCP connections as copyConns, their writes
// bounded by answer (<= 0: no bound).
func dialCopyConns(dial func(ctx context.Context, network, addr string) (net.Conn, error), answer time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok && err == nil {
			cc := &copyConn{TCPConn: tc}
			cc.w = writerOnly{cc}
			if answer > 0 {
				cc.sending = tcpwatch.Sending(tc, answer, nil)
			}
			return cc, nil
		}
		return c, err
	}
}
