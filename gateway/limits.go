package gateway

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/semaphore"

	"github.com/fencegate/fencegate/store/tcpwatch"
)

// What a client can make the gateway hold is bounded here: open connections
// (in total and per client IP) and the memory of small request bodies, which
// are read whole. The timeouts that end slow connections are fasthttp's, set in
// New: ReadTimeout is the header timeout (from accept, or from a keep-alive
// request's first byte), IdleTimeout the keep-alive wait, and HeaderReceived
// re-arms the read deadline at the body stall timeout for the up to 8 KiB of
// body fasthttp reads before the handler runs. Later body reads go through
// bodyGuard, which sets its own deadline per read, so a steadily flowing upload
// of any size is never cut. Answers are bounded the same way: a client that
// takes none of one for the send stall timeout is cut off (sendstall.go).

// Defaults for the limits of Config.
const (
	defaultHeaderTimeout = 10 * time.Second
	defaultIdleTimeout   = 2 * time.Minute
	// defaultSendStallTimeout is nginx's send_timeout (sendstall.go).
	defaultSendStallTimeout = time.Minute
	defaultMaxConns         = 4096
	defaultMaxConnsPerIP    = 1024
	defaultBodyMemory       = 64 << 20
	defaultBodyMemoryWait   = 2 * time.Second
	// refusalAnswerers bounds the goroutines answering refused connections: past
	// it a refused connection is closed without an answer, which costs nothing.
	refusalAnswerers = 64
)

// connLimiter is the S3 listener's gate. It counts a connection from Accept to
// fasthttp's StateClosed (connState), which comes after a lingering close has
// drained it (linger.go). A connection over a limit gets 503 SlowDown and is
// closed, before fasthttp ever sees it.
type connLimiter struct {
	net.Listener
	maxTotal, maxPerIP int // <= 0: no bound
	tls                bool
	sendStall          time.Duration // each accepted connection's (sendstall.go)
	mu                 sync.Mutex
	total              int
	perIP              map[string]int
	answering          chan struct{}
	open               prometheus.Gauge
	refused            *prometheus.CounterVec
	sendStalled        prometheus.Counter
}

func newConnLimiter(ln net.Listener, maxTotal, maxPerIP int, m *metrics) *connLimiter {
	return &connLimiter{
		Listener: ln, maxTotal: maxTotal, maxPerIP: maxPerIP, perIP: map[string]int{},
		answering: make(chan struct{}, refusalAnswerers), open: m.connsOpen, refused: m.connsRefused,
		sendStalled: m.connsSendStalled,
	}
}

func connIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	return host
}

// Accept returns the next connection within the limits; the others are
// answered and closed here.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if reason := l.take(connIP(c)); reason != "" {
			l.refuse(c, reason)
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			cc := &clientConn{TCPConn: tc}
			if l.sendStall > 0 {
				cc.send = tcpwatch.Sending(tc, l.sendStall, l.sendStalled.Inc)
			}
			return cc, nil
		}
		return c, nil
	}
}

func (l *connLimiter) take(ip string) (refused string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxTotal > 0 && l.total >= l.maxTotal {
		return "total"
	}
	if l.maxPerIP > 0 && l.perIP[ip] >= l.maxPerIP {
		return "per_ip"
	}
	l.total++
	l.perIP[ip]++
	l.open.Inc()
	return ""
}

// connState notes a connection's first request byte, and releases its place
// when fasthttp is done with it.
func (l *connLimiter) connState(c net.Conn, st fasthttp.ConnState) {
	if st == fasthttp.StateActive {
		if cc := clientConnOf(c); cc != nil {
			cc.begun = true
		}
		return
	}
	if st != fasthttp.StateClosed && st != fasthttp.StateHijacked {
		return
	}
	ip := connIP(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip) // the map holds only IPs with open connections
	}
	l.open.Dec()
}

// refuse answers a connection over a limit with 503 SlowDown, which S3 clients
// retry with backoff. The answer is written, the write side shut, and what the
// client already sent read (briefly), so that closing does not reset the
// connection before the client has read the answer. A TLS connection is only
// closed: answering it would need a handshake.
func (l *connLimiter) refuse(c net.Conn, reason string) {
	l.refused.WithLabelValues(reason).Inc()
	if l.tls {
		c.Close()
		return
	}
	select {
	case l.answering <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.answering }()
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := c.Write(rawErrorResponse(errSlowDown, newRequestID()))
		tc, ok := c.(*net.TCPConn)
		if err != nil || !ok {
			c.Close()
			return
		}
		_ = drainAndClose(tc, 64<<10, time.Second)
	}()
}

// bodyBudget bounds the bytes of small request bodies (XML documents, up to
// maxSmallBody each) held whole at once. A request takes its body's declared
// length before reading it and gives it back when its handler returns.
//
// A request no key has authenticated (a POST form before its policy is
// verified, an anonymous request) takes its bytes from a small share of the
// budget instead, bounded per client address and never waited for, so that
// connections anyone can open cannot hold the memory authenticated requests
// need, nor one address the whole share.
type bodyBudget struct {
	sem     *semaphore.Weighted
	size    int64
	wait    time.Duration
	inUse   atomic.Int64
	gauge   prometheus.Gauge
	refused prometheus.Counter

	unverifiedMax, unverifiedPerIP int64
	mu                             sync.Mutex
	unverified                     int64
	unverifiedByIP                 map[string]int64 // only addresses holding some
}

// The unverified share: an eighth of the body memory; per address a quarter
// of that, and at most 16 forms' fields (1 MiB), so that a few addresses
// cannot hold it all either.
const (
	unverifiedShare    = 8
	maxUnverifiedPerIP = 16 * maxPostFields
)

func newBodyBudget(size int64, wait time.Duration, m *metrics) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(size), size: size, wait: wait, gauge: m.bodyBytes, refused: m.bodyRefused,
		unverifiedMax: size / unverifiedShare, unverifiedPerIP: min(maxUnverifiedPerIP, size/unverifiedShare/4),
		unverifiedByIP: map[string]int64{}}
}

// bodyLeaseKey is the request's user value holding the bytes it took.
const bodyLeaseKey = "fencegate.bodyMemory"

// takeBodyMemory reserves memory for a small body of decoded length n (< 0:
// not declared, so the most a small body may be). When the budget stays spent
// for its wait, the request gets 503 SlowDown and its connection is closed,
// its body unread. A body larger than the whole budget could never fit.
func (s *Server) takeBodyMemory(ctx *fasthttp.RequestCtx, n int64) *apiError {
	if n < 0 {
		n = maxSmallBody + 1
	}
	if n == 0 {
		return nil
	}
	b := s.bodies
	if n > b.size {
		return withClose(errMaxMessageLength)
	}
	if !b.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(context.Background(), b.wait)
		err := b.sem.Acquire(wctx, n)
		cancel()
		if err != nil {
			b.refused.Inc()
			return withClose(errSlowDown)
		}
	}
	b.inUse.Add(n)
	b.gauge.Add(float64(n))
	if prev, _ := ctx.UserValue(bodyLeaseKey).(int64); prev > 0 {
		n += prev // not expected: one small body per request
	}
	ctx.SetUserValue(bodyLeaseKey, n)
	return nil
}

// unverifiedLeaseKey is the request's user value holding what it took of the
// unverified share.
const unverifiedLeaseKey = "fencegate.unverifiedMemory"

type unverifiedLease struct {
	ip string
	n  int64
}

// takeUnverifiedMemory reserves n bytes for a request no key has
// authenticated, from the unverified share, for its client's address: at
// once or not at all (503 SlowDown, its connection closed).
func (s *Server) takeUnverifiedMemory(ctx *fasthttp.RequestCtx, n int64) *apiError {
	if n < 0 {
		n = maxSmallBody + 1
	}
	if n == 0 {
		return nil
	}
	b := s.bodies
	if n > b.unverifiedPerIP {
		return withClose(errMaxMessageLength)
	}
	ip := ctx.RemoteIP().String()
	b.mu.Lock()
	ok := b.unverified+n <= b.unverifiedMax && b.unverifiedByIP[ip]+n <= b.unverifiedPerIP && b.sem.TryAcquire(n)
	if ok {
		b.unverified += n
		b.unverifiedByIP[ip] += n
	}
	b.mu.Unlock()
	if !ok {
		b.refused.Inc()
		return withClose(errSlowDown)
	}
	b.inUse.Add(n)
	b.gauge.Add(float64(n))
	if prev, _ := ctx.UserValue(unverifiedLeaseKey).(unverifiedLease); prev.n > 0 {
		n += prev.n // not expected: one unverified hold per request
	}
	ctx.SetUserValue(unverifiedLeaseKey, unverifiedLease{ip: ip, n: n})
	return nil
}

// releaseUnverifiedMemory gives back what the request took of the
// unverified share, once: when its handler returns, or as soon as a form's
// policy is verified.
func (s *Server) releaseUnverifiedMemory(ctx *fasthttp.RequestCtx) {
	l, _ := ctx.UserValue(unverifiedLeaseKey).(unverifiedLease)
	if l.n <= 0 {
		return
	}
	ctx.RemoveUserValue(unverifiedLeaseKey)
	b := s.bodies
	b.mu.Lock()
	b.unverified -= l.n
	if b.unverifiedByIP[l.ip] -= l.n; b.unverifiedByIP[l.ip] <= 0 {
		delete(b.unverifiedByIP, l.ip)
	}
	b.mu.Unlock()
	b.inUse.Add(-l.n)
	b.gauge.Sub(float64(l.n))
	b.sem.Release(l.n)
}

// releaseBodyMemory gives back what the request took, once: of the budget
// and of the unverified share.
func (s *Server) releaseBodyMemory(ctx *fasthttp.RequestCtx) {
	s.releaseUnverifiedMemory(ctx)
	n, _ := ctx.UserValue(bodyLeaseKey).(int64)
	if n <= 0 {
		return
	}
	ctx.RemoveUserValue(bodyLeaseKey)
	b := s.bodies
	b.inUse.Add(-n)
	b.gauge.Sub(float64(n))
	b.sem.Release(n)
}

// BodyMemoryInUse is the bytes of small request bodies held now (0 when no
// request is reading or holding one).
func (s *Server) BodyMemoryInUse() int64 { return s.bodies.inUse.Load() }

// OpenConns is the number of open S3 client connections.
func (s *Server) OpenConns() int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return s.conns.total
}
