package gateway

import (
	"io"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// A GetObject body on fencegate's own store connection (storeconn.go) reaches
// a plain-TCP client by splice(2), from the store's socket to the client's,
// never copied through the gateway's memory: fasthttp hands the body stream a
// writer whose ReadFrom ends in net.TCPConn.ReadFrom, which splices when it
// reads from another TCP socket. TLS clients get the buffered copy.

// spliceable reports whether resp's body can be spliced to ctx's client.
func spliceable(ctx *fasthttp.RequestCtx, resp *http.Response) bool {
	if _, ok := resp.Body.(*storeBody); !ok || resp.ContentLength <= 0 || len(resp.TransferEncoding) > 0 {
		return false
	}
	_, plain := ctx.Conn().(*net.TCPConn)
	return plain
}

// spliceTo writes the body to w: what the store connection's reader has
// buffered already, then the rest through rf (w's ReadFrom) straight from the
// store's socket. n counts the bytes written.
func (b *storeBody) spliceTo(w io.Writer, rf io.ReaderFrom, n *int64, spliced prometheus.Counter) error {
	size := b.resp.ContentLength
	br := b.sc.br
	k := min(int64(br.Buffered()), size)
	pre, _ := br.Peek(int(k))
	if _, err := w.Write(pre); err != nil {
		return b.fail(err)
	}
	_, _ = br.Discard(int(k))
	*n += k
	m, err := rf.ReadFrom(io.LimitReader(b.sc.c, size-k))
	*n += m
	spliced.Add(float64(m))
	if err == nil && m < size-k {
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
