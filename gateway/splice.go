package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// spliceMin is the smallest answer body relayed by splice(2) from the store's
// socket to the client's. Below it, handing the connection to a goroutine and
// back to the server costs more than the user-space copy it saves.
const spliceMin = 1 << 20

// trySplice relays a large object body from the store to a plain-TCP client
// without copying it through user space: the client's connection is taken from
// fasthttp once the handler returns, the header written, the body spliced, and
// the connection handed back to the server for its next request. It reports
// false, leaving resp untouched, when the answer or the connection does not
// qualify (TLS, a client closing after this request, a small or unframed body).
func (s *Server) trySplice(ctx *fasthttp.RequestCtx, r *request, resp *http.Response) bool {
	body, ok := resp.Body.(*storeBody)
	if !ok || resp.ContentLength < spliceMin || len(resp.TransferEncoding) > 0 ||
		resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		return false
	}
	// A connection served again after an earlier splice is still wrapped.
	if _, plain := unwrapConn(ctx.Conn()).(*net.TCPConn); !plain {
		return false
	}
	if ctx.Request.Header.ConnectionClose() || !ctx.Request.Header.IsHTTP11() {
		return false
	}
	h := &ctx.Response.Header
	h.SetContentLength(int(resp.ContentLength))
	head := append([]byte(nil), h.Header()...)
	out := &countingBody{rc: body, cancel: r.cancelUpstream}
	r.out = out
	// The relay outlives the handler, and fasthttp no longer counts the
	// connection: a shutdown waits for it here.
	id := s.inflight.add(ctx.Conn())
	s.inflight.setCancel(id, r.cancelUpstream)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		err := body.spliceTo(c, head, out, s.metrics.splicedBytes)
		out.Close() // logs the request; the store connection is pooled again if whole
		s.inflight.done(id)
		if err == nil && !s.closing.Load() {
			var rc *resumedConn
			if rc, err = resume(c); err == nil {
				_ = s.s3.ServeConn(rc) // closes it when the client is done
				return
			}
		}
		c.Close()
	})
	return true
}

// spliceTo writes head, then the body: what the store connection's reader has
// buffered already, and the rest spliced from its socket.
func (b *storeBody) spliceTo(c net.Conn, head []byte, counted *countingBody, spliced prometheus.Counter) error {
	dst, ok := unwrapConn(c).(*net.TCPConn)
	if !ok {
		return b.fail(errNotSpliceable)
	}
	n := b.resp.ContentLength
	br := b.sc.br
	k := min(int64(br.Buffered()), n)
	pre, _ := br.Peek(int(k))
	bufs := net.Buffers{head, pre}
	if _, err := bufs.WriteTo(dst); err != nil {
		return b.fail(err)
	}
	_, _ = br.Discard(int(k))
	counted.n += k
	m, err := dst.ReadFrom(io.LimitReader(b.sc.c, n-k))
	counted.n += m
	spliced.Add(float64(m))
	if err == nil && m < n-k {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return b.fail(err)
	}
	b.err = io.EOF
	return nil
}

func (b *storeBody) fail(err error) error {
	b.err = err
	return err
}

type errorString string

func (e errorString) Error() string { return string(e) }

const errNotSpliceable = errorString("hijacked connection is not plain TCP")

// unwrapConn is the socket under fasthttp's hijacked-connection wrapper, or
// under a resumedConn.
func unwrapConn(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ UnsafeConn() net.Conn })
		if !ok {
			return c
		}
		c = u.UnsafeConn()
	}
}

// resumedConn is a client connection handed back to the server after a
// splice: the bytes fasthttp had read ahead (a pipelined request) come first.
// Handing back fasthttp's own wrapper instead would nest one more wrapper and
// read buffer for every splice on a keep-alive connection.
type resumedConn struct {
	*net.TCPConn
	pending []byte
}

func (c *resumedConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.TCPConn.Read(p)
}

func (c *resumedConn) UnsafeConn() net.Conn { return c.TCPConn }

// maxReadAhead bounds what a client may have pipelined behind a spliced GET.
const maxReadAhead = 1 << 20

// resume takes from hijacked connection c the bytes its reader holds, without
// waiting on the socket: under an expired deadline, a read returns what is
// buffered, then a timeout before any system call.
func resume(c net.Conn) (*resumedConn, error) {
	tcp, ok := unwrapConn(c).(*net.TCPConn)
	if !ok {
		return nil, errNotSpliceable
	}
	if err := tcp.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return nil, err
	}
	var pending []byte
	var buf [4 << 10]byte
	for {
		n, err := c.Read(buf[:])
		pending = append(pending, buf[:n]...)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(pending) > maxReadAhead {
			return nil, errorString("more than 1 MiB pipelined behind a spliced answer")
		}
	}
	if err := tcp.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return &resumedConn{TCPConn: tcp, pending: pending}, nil
}
