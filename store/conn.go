package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/fencegate/fencegate/store/tcpwatch"
)

// GET and HEAD answers travel over the client's own HTTP/1.1 connections to
// the store rather than net/http's transport: a large body can then be
// spliced from the store's socket to the client's in the kernel (splice.go),
// which net/http's buffered body reader hides. Requests with a small body of
// known length (a small PutObject, an UploadPart, an XML document) come this
// way too: the calling goroutine writes the request and reads the answer
// itself, where the transport hands each request to a writer and a reader
// goroutine of its connection and back. Only plain-HTTP stores qualify; the
// rest of the traffic (large bodies, TLS) keeps the transport.

// conn is one keep-alive connection to the store.
type conn struct {
	c  *net.TCPConn
	br *bufio.Reader
	bw *bufio.Writer
	// sending and receiving bound how long the store may take nothing more of
	// a request, or send nothing more of an answer's body, once it has begun:
	// the answer timeout again (nil: no bound). The wait for the answer's head
	// has its own deadline (exchange).
	sending, receiving *tcpwatch.Watch
}

// close closes the connection and disarms its watches.
func (sc *conn) close() error {
	sc.sending.Stop()
	sc.receiving.Stop()
	return sc.c.Close()
}

// connPool pools idle connections to one store address.
type connPool struct {
	addr   string
	dialer net.Dialer
	answer time.Duration // the answer timeout (Config.AnswerTimeout); <= 0: none
	mu     sync.Mutex
	idle   []*conn
}

const maxIdleConns = 512

func newConnPool(addr string, answer time.Duration) *connPool {
	return &connPool{addr: addr, answer: answer, dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
}

// get takes an idle connection, or dials one (always, with fresh). With
// checked, an idle connection the store has closed is skipped (closed here),
// as net/http's transport drops them: a write is sent once (W4), so it must
// not find out that its connection is dead by sending on it.
func (p *connPool) get(ctx context.Context, fresh, checked bool) (sc *conn, reused bool, err error) {
	for !fresh {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		sc = p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if !checked || sc.open() {
			return sc, true, nil
		}
		sc.close()
	}
	c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	tc := c.(*net.TCPConn)
	// A small read buffer: what it holds of a body is copied, the rest spliced.
	sc = &conn{c: tc, br: bufio.NewReaderSize(tc, 4<<10), bw: bufio.NewWriterSize(tc, 4<<10)}
	if p.answer > 0 {
		sc.sending = tcpwatch.Sending(tc, p.answer, nil)
		sc.receiving = tcpwatch.Receiving(tc, p.answer, nil)
	}
	return sc, false, nil
}

func (p *connPool) put(sc *conn) {
	_ = sc.c.SetDeadline(time.Time{})
	p.mu.Lock()
	if len(p.idle) < maxIdleConns && !sc.sending.Cut() && !sc.receiving.Cut() {
		p.idle = append(p.idle, sc)
		sc = nil
	}
	p.mu.Unlock()
	if sc != nil {
		sc.close()
	}
}

// maxConnBody is the largest request body the client's own connections
// carry: one pooled copy buffer's worth (bodycopy.go), so a small object
// leaves in one write. Larger bodies go through the transport, whose writer
// and reader run at once (a store may answer early and stop reading).
const maxConnBody = bodyCopyBufferSize - 4<<10

// carries reports whether the client's own connections take req: GET and
// HEAD, and any other request whose body has a known length up to
// maxConnBody.
func carries(req *http.Request) bool {
	switch {
	case repeatable(req):
		return bodiless(req)
	case bodiless(req):
		return req.ContentLength == 0
	default:
		return req.ContentLength > 0 && req.ContentLength <= maxConnBody
	}
}

// repeatable: GET and HEAD, the requests the client's own connections may
// send again on a fresh connection.
func repeatable(req *http.Request) bool {
	return req.Method == http.MethodGet || req.Method == http.MethodHead
}

func bodiless(req *http.Request) bool { return req.Body == nil || req.Body == http.NoBody }

// roundTrip sends a signed request and reads the answer's header. The body
// is the returned Body's. A GET or HEAD on a pooled connection the store has
// closed meanwhile is retried once on a newly dialled one (not another pooled
// one: a store that closes idle connections closes them all, and after a
// quiet spell every pooled one is dead), as net/http does: repeating them is
// safe. Any other request is sent once (W4), on a pooled connection checked
// to be open just before, as the transport's own would be.
func (p *connPool) roundTrip(req *http.Request) (*http.Response, error) {
	if !carries(req) {
		return nil, errors.New("the store's own connections carry GET, HEAD and small bodies of known length only")
	}
	read := repeatable(req)
	for attempt := 0; ; attempt++ {
		sc, reused, err := p.get(req.Context(), attempt > 0, !read)
		if err != nil {
			if !read && req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
		// The caller's context bounds the whole exchange, the wait for the
		// answer's head included (a hung store must not hold a lease or the
		// reconciler), and then the body's reads.
		stop := context.AfterFunc(req.Context(), func() { _ = sc.c.SetDeadline(time.Unix(1, 0)) })
		resp, err := sc.exchange(req, p.answer)
		if err == nil {
			b := &Body{c: sc, pool: p, resp: resp, body: resp.Body, stop: stop}
			if resp.Body == http.NoBody {
				b.err = io.EOF // HEAD, 204, 304, an empty object: nothing to read
			}
			resp.Body = b
			return resp, nil
		}
		stop()
		sc.close()
		if cerr := req.Context().Err(); cerr != nil {
			return nil, fmt.Errorf("%w (%w)", cerr, err)
		}
		if !read || !reused || attempt > 0 || !staleConnError(err) {
			return nil, err
		}
	}
}

// exchange sends req and reads the head of the answer, which must begin
// within answer of the request's last byte (<= 0: no bound).
func (sc *conn) exchange(req *http.Request, answer time.Duration) (*http.Response, error) {
	if err := sc.sending.Start(); err != nil {
		return nil, err
	}
	err := sc.writeRequest(req)
	sc.sending.End()
	if err != nil {
		if sc.sending.Cut() {
			return nil, requestStalledFor(answer)
		}
		return nil, err
	}
	if answer <= 0 {
		return http.ReadResponse(sc.br, req)
	}
	_ = sc.c.SetReadDeadline(time.Now().Add(answer))
	resp, err := http.ReadResponse(sc.br, req)
	_ = sc.c.SetReadDeadline(time.Time{})
	if req.Context().Err() != nil {
		// The context's stop (roundTrip) may have set its deadline just
		// before the line above took it away.
		_ = sc.c.SetDeadline(time.Unix(1, 0))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && req.Context().Err() == nil {
		return nil, noAnswerWithin(answer)
	}
	return resp, err
}

// writeRequest writes req whole.
func (sc *conn) writeRequest(req *http.Request) error {
	if !bodiless(req) {
		return sc.writeWithBody(req)
	}
	if err := req.Write(sc.bw); err != nil {
		return err
	}
	return sc.bw.Flush()
}

// writeWithBody writes req's head and its whole body (req.ContentLength
// bytes, at most maxConnBody) in one write from a pooled buffer, and closes
// the body. A body that ends early or runs long is an error and nothing of it
// is written: the store never sees a request framed on a wrong length.
func (sc *conn) writeWithBody(req *http.Request) error {
	defer req.Body.Close()
	bp := bodyCopyBuffers.Get().(*[]byte)
	defer bodyCopyBuffers.Put(bp)
	hw := headWriter((*bp)[:0])
	hw = append(hw, req.Method...)
	hw = append(hw, ' ')
	hw = append(hw, req.URL.RequestURI()...)
	hw = append(hw, " HTTP/1.1\r\nHost: "...)
	hw = append(hw, req.Host...)
	hw = append(hw, "\r\nContent-Length: "...)
	hw = strconv.AppendInt(hw, req.ContentLength, 10)
	hw = append(hw, "\r\n"...)
	if err := req.Header.WriteSubset(&hw, framingHeaders); err != nil {
		return err
	}
	hw = append(hw, "\r\n"...)
	head := len(hw)
	size := int(req.ContentLength)
	if head+size+1 > cap(hw) {
		return fmt.Errorf("a request head of %d bytes and a body of %d do not fit the %d-byte buffer", head, size, cap(hw))
	}
	buf := hw[:head+size+1]
	// One byte more than the length: a body that runs long is found here.
	n, err := io.ReadFull(req.Body, buf[head:])
	switch {
	case err == io.ErrUnexpectedEOF && n == size:
	case err == nil:
		return fmt.Errorf("the request body is longer than its Content-Length %d", size)
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return fmt.Errorf("the request body ended after %d of its %d bytes", n, size)
	default:
		return err
	}
	return sc.writeHoldingP(buf[:head+size])
}

// writeHoldingP writes p to the connection with raw write(2) calls, waiting
// for the socket through the runtime's poller when it is full. A 64 KiB write
// to a local store runs the receiver's TCP path inside the call (tens of
// microseconds), and a goroutine in an ordinary system call that long has its
// processor taken away by the runtime's monitor and handed to another thread,
// waking it: two context switches per write on a loaded machine, and a
// monitor that keeps polling every 20 us. The socket is non-blocking, so a
// raw call cannot block: it returns EAGAIN when the socket is full.
func (sc *conn) writeHoldingP(p []byte) error {
	raw, err := sc.c.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		for len(p) > 0 {
			n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch {
			case e == syscall.EAGAIN:
				return false // wait until the socket takes more
			case e == syscall.EINTR:
				continue
			case e != 0:
				werr = e
				return true
			}
			p = p[n:]
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}

// headWriter appends what is written to it: Header.WriteSubset's target.
type headWriter []byte

func (w *headWriter) Write(p []byte) (int, error) {
	*w = append(*w, p...)
	return len(p), nil
}

// framingHeaders are written by writeWithBody itself, never from the header.
var framingHeaders = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true}

// open reports whether an idle connection is still open: nothing has arrived
// on it (a store that closed it sent its FIN, which reads as zero bytes) and
// no error is pending. It peeks without blocking and without consuming.
func (sc *conn) open() bool {
	if sc.br.Buffered() > 0 {
		return false // an idle connection has nothing to read
	}
	raw, err := sc.c.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait: the peek's answer is the answer
	})
	return alive
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

var errBodyClosed = errors.New("read on a closed body")

func (b *Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := b.c.receiving.Start(); err != nil {
		return 0, b.fail(err)
	}
	n, err := b.body.Read(p)
	b.c.receiving.End()
	if err != nil {
		b.fail(err)
	}
	return n, b.err
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
	whole := b.err == io.EOF
	if b.err == nil {
		b.err = errBodyClosed
	}
	if stopped && whole && !b.resp.Close {
		b.pool.put(sc)
		return nil
	}
	return sc.close()
}
