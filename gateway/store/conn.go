package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// GET and HEAD answers travel over the client's own HTTP/1.1 connections to
// the store rather than net/http's transport: a large body can then be
// spliced from the store's socket to the client's in the kernel (splice.go),
// which net/http's buffered body reader hides. Only plain-HTTP stores
// qualify; the rest of the traffic keeps the transport.

// conn is one keep-alive connection to the store.
type conn struct {
	c  *net.TCPConn
	br *bufio.Reader
	bw *bufio.Writer
}

// connPool pools idle connections to one store address.
type connPool struct {
	addr   string
	dialer net.Dialer
	mu     sync.Mutex
	idle   []*conn
}

const maxIdleConns = 512

func newConnPool(addr string) *connPool {
	return &connPool{addr: addr, dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
}

// get takes an idle connection, or dials one (always, with fresh).
func (p *connPool) get(ctx context.Context, fresh bool) (sc *conn, reused bool, err error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 && !fresh {
		sc = p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return sc, true, nil
	}
	p.mu.Unlock()
	c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	tc := c.(*net.TCPConn)
	// A small read buffer: what it holds of a body is copied, the rest spliced.
	return &conn{c: tc, br: bufio.NewReaderSize(tc, 4<<10), bw: bufio.NewWriterSize(tc, 4<<10)}, false, nil
}

func (p *connPool) put(sc *conn) {
	_ = sc.c.SetDeadline(time.Time{})
	p.mu.Lock()
	if len(p.idle) < maxIdleConns {
		p.idle = append(p.idle, sc)
		sc = nil
	}
	p.mu.Unlock()
	if sc != nil {
		sc.c.Close()
	}
}

// roundTrip sends a signed, bodiless request and reads the answer's header.
// The body is the returned Body's. A pooled connection the store has closed
// meanwhile is retried once on a newly dialled one (not another pooled one:
// a store that closes idle connections closes them all, and after a quiet
// spell every pooled one is dead), as net/http does: only GET and HEAD come
// this way, and repeating them is safe (W4 is about writes).
func (p *connPool) roundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		return nil, errors.New("the store's own connections carry bodiless requests only")
	}
	for attempt := 0; ; attempt++ {
		sc, reused, err := p.get(req.Context(), attempt > 0)
		if err != nil {
			return nil, err
		}
		// The caller's context bounds the whole exchange, the wait for the
		// answer's head included (a hung store must not hold a lease or the
		// reconciler), and then the body's reads.
		stop := context.AfterFunc(req.Context(), func() { _ = sc.c.SetDeadline(time.Unix(1, 0)) })
		resp, err := sc.exchange(req)
		if err == nil {
			b := &Body{c: sc, pool: p, resp: resp, body: resp.Body, stop: stop}
			if resp.Body == http.NoBody {
				b.err = io.EOF // HEAD, 204, 304, an empty object: nothing to read
			}
			resp.Body = b
			return resp, nil
		}
		stop()
		sc.c.Close()
		if cerr := req.Context().Err(); cerr != nil {
			return nil, fmt.Errorf("%w (%w)", cerr, err)
		}
		if !reused || attempt > 0 || !staleConnError(err) {
			return nil, err
		}
	}
}

func (sc *conn) exchange(req *http.Request) (*http.Response, error) {
	if err := req.Write(sc.bw); err != nil {
		return nil, err
	}
	if err := sc.bw.Flush(); err != nil {
		return nil, err
	}
	return http.ReadResponse(sc.br, req)
}

// staleConnError is how a keep-alive connection the store closed while idle
// fails its next exchange.
func staleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Body is an answer's body on one of the client's own connections. Read
// through to its end, the connection goes back to the pool; closed early, it
// is closed.
type Body struct {
	c    *conn
	pool *connPool
	resp *http.Response
	body io.ReadCloser // as http.ReadResponse framed it
	stop func() bool
	err  error // set once the body is over (io.EOF when complete)
}

func (b *Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	if err != nil {
		b.err = err
	}
	return n, err
}

// Close returns the connection when the body was read through and the store
// keeps it alive; the context's watcher must be stopped first, or it could
// later poison a pooled connection's deadline.
func (b *Body) Close() error {
	if b.c == nil {
		return nil
	}
	sc := b.c
	b.c = nil
	stopped := b.stop()
	if stopped && b.err == io.EOF && !b.resp.Close {
		b.pool.put(sc)
		return nil
	}
	return sc.c.Close()
}
