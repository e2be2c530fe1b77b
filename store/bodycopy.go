package store

import (
	"context"
	"io"
	"net"
	"sync"
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
// pooled ReadFrom; every other method is the TCP connection's own.
type copyConn struct {
	*net.TCPConn
	w io.Writer // the connection as a plain writer, made once
}

// writerOnly hides the connection's ReadFrom from io.CopyBuffer.
type writerOnly struct{ c *net.TCPConn }

func (w writerOnly) Write(p []byte) (int, error) { return w.c.Write(p) }

func (c *copyConn) ReadFrom(r io.Reader) (int64, error) {
	bp := bodyCopyBuffers.Get().(*[]byte)
	defer bodyCopyBuffers.Put(bp)
	return io.CopyBuffer(c.w, r, *bp)
}

// dialCopyConns wraps dial's TCP connections as copyConns.
func dialCopyConns(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok && err == nil {
			return &copyConn{TCPConn: tc, w: writerOnly{tc}}, nil
		}
		return c, err
	}
}
