package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// bodyGuard stands between fasthttp's request body stream and whoever reads it
// (the HTTP transport's writer goroutine). The handler must not return while
// that goroutine may still read the stream (docs/DESIGN.md, truncation safety): close
// stops further reads, unblocks one in progress with a read deadline on the
// client connection, and waits for it. It also turns a body that stalls for
// longer than stall into S3's RequestTimeout.
type bodyGuard struct {
	mu      sync.Mutex // held for the duration of each Read
	r       io.Reader
	conn    net.Conn
	stall   time.Duration
	closed  bool
	err     error // first error seen from r
	n       int64 // bytes read
	atEOF   bool
	closeMu sync.Mutex
	stopped bool
}

var errBodyClosed = errors.New("request body no longer readable")

func newBodyGuard(r io.Reader, conn net.Conn, stall time.Duration) *bodyGuard {
	return &bodyGuard{r: r, conn: conn, stall: stall}
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, errBodyClosed
	}
	if g.err != nil {
		return 0, g.err
	}
	if g.stall > 0 && g.conn != nil {
		_ = g.conn.SetReadDeadline(time.Now().Add(g.stall))
	}
	n, err := g.r.Read(p)
	g.n += int64(n)
	if err == io.EOF {
		g.atEOF = true
	} else if err != nil {
		var ne net.Error
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			err = errRequestTimeout
		}
		g.err = err
	}
	return n, err
}

// stop ends all reading: later Reads fail, and a Read blocked on the client is
// unblocked and waited for. It reports whether the body was read to its end
// (if not, the connection cannot be reused).
func (g *bodyGuard) stop() (complete bool) {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	if !g.stopped {
		g.stopped = true
		if g.conn != nil {
			_ = g.conn.SetReadDeadline(time.Now())
		}
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		if g.conn != nil {
			_ = g.conn.SetReadDeadline(time.Time{})
		}
	}
	return g.atEOF
}

// failure is the first body error, if any.
func (g *bodyGuard) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}
