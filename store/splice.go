package store

import (
	"errors"
	"io"
	"net/http"
	"os"
)

// A GetObject body on the client's own connection (conn.go) can reach a
// plain-TCP client by splice(2), from the store's socket to the client's,
// never copied through the gateway's memory: the gateway's writer has a
// ReadFrom that ends in net.TCPConn.ReadFrom, which splices when it reads from
// another TCP socket.

// Spliceable returns resp's body when it can be spliced: it travels on one of
// the client's own connections, with a known, non-zero length.
func Spliceable(resp *http.Response) (*Body, bool) {
	b, ok := resp.Body.(*Body)
	if !ok || resp.ContentLength <= 0 || len(resp.TransferEncoding) > 0 {
		return nil, false
	}
	return b, true
}

// SpliceTo writes the body to w: what the connection's reader has buffered
// already, then the rest through rf (w's ReadFrom) straight from the store's
// socket. It returns the bytes written and how many of them were spliced.
func (b *Body) SpliceTo(w io.Writer, rf io.ReaderFrom) (written, spliced int64, err error) {
	size := b.resp.ContentLength
	br := b.c.br
	k := min(int64(br.Buffered()), size)
	pre, _ := br.Peek(int(k))
	if _, err := w.Write(pre); err != nil {
		return 0, 0, b.fail(err)
	}
	_, _ = br.Discard(int(k))
	if err := b.c.receiving.Start(); err != nil {
		return k, 0, b.fail(err)
	}
	m, err := rf.ReadFrom(io.LimitReader(b.c.c, size-k))
	b.c.receiving.End()
	if err == nil && m < size-k {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return k + m, m, b.fail(err)
	}
	b.err = io.EOF
	return k + m, m, nil
}

// fail ends the body with err; a read the store's silence cut says so.
func (b *Body) fail(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) && b.c.receiving.Cut() {
		err = answerStalledFor(b.pool.answer)
	}
	b.err = err
	return err
}
