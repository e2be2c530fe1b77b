package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// MaxPatternLen is the longest pattern [TCP.CutAfterClientSends] accepts.
const MaxPatternLen = 256

const (
	tcpDialTimeout = 5 * time.Second
	// cutDrainTimeout bounds how long a cut connection keeps draining the
	// server after half-closing it (see CutAfterClientSends).
	cutDrainTimeout = 5 * time.Second
)

// TCP is a fault-injecting TCP proxy. Each accepted connection is forwarded to
// one target over its own upstream connection. When either side of a proxied
// connection reaches EOF or an error, both sides are closed (half-close is not
// propagated; PostgreSQL and HTTP do not rely on it).
type TCP struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup
	dark   atomic.Bool // mirrors blackhole for the pumps' fast path

	mu        sync.Mutex
	conns     map[*tcpConn]struct{}
	blackhole bool
	lifted    chan struct{} // closed when the current blackhole is lifted
	rules     []*cutRule
	closed    bool
}

type cutRule struct {
	pattern []byte // lower-cased ASCII
	fired   chan struct{}
	darken  bool          // switch the blackhole on as the rule fires
	hold    chan struct{} // if not nil, the chunk waits for it to close
	cut     chan struct{} // closed when the client side is closed (before the chunk is written)
}

// NewTCP listens on 127.0.0.1:0 and forwards each accepted connection to
// target (host:port).
func NewTCP(target string) (*TCP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &TCP{
		target: target,
		ln:     ln,
		conns:  make(map[*tcpConn]struct{}),
		lifted: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *TCP) Addr() string { return p.ln.Addr().String() }

// Close closes the listener and every proxied connection, and waits for the
// proxy's goroutines to finish.
func (p *TCP) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

// Blackhole switches a simulated network partition on or off. While on, bytes
// in both directions on every existing connection are read and silently
// dropped; connections stay open. Connections accepted while on are kept open
// but not even dialed to the target (the target sees nothing) until the
// blackhole is lifted, then they are dialed and forwarding starts. Bytes
// dropped while on are lost for good, so the protocol stream on a connection
// that lived through a blackhole is usually broken; clients typically time
// out.
func (p *TCP) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.blackhole {
		return
	}
	p.blackhole = on
	p.dark.Store(on)
	if !on {
		close(p.lifted)
		p.lifted = make(chan struct{})
	}
}

// CutAll resets every current connection: both sides are closed with
// SO_LINGER 0, so peers see a reset (or EOF). When CutAll returns, Conns()
// no longer counts them.
func (p *TCP) CutAll() {
	p.mu.Lock()
	cs := make([]*tcpConn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.reset()
	}
}

// Conns is the number of open proxied connections. A connection cut by a
// CutAfterClientSends rule no longer counts, even while its server side is
// still draining.
func (p *TCP) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if !c.cutting.Load() {
			n++
		}
	}
	return n
}

// CutAfterClientSends arms a one-shot rule. The first time the
// client-to-server stream of any connection contains pattern, the read chunk
// that completes the pattern is forwarded to the server in full (bytes up to
// and including that chunk), and the connection is cut: the client side is
// closed first and nothing more, in particular no reply, is relayed to the
// client; the server side is half-closed after the chunk (FIN, so the server
// reads the whole chunk, then EOF) and drained for at most 5 s before it is
// closed. The cut connection stops counting in Conns() at once.
//
// Matching is ASCII case-insensitive ("commit" matches "COMMIT" and
// "Commit") on raw bytes, so it needs a plaintext protocol (PostgreSQL with
// sslmode=disable). A match may straddle reads; it must end in bytes read
// after the rule was armed. Bytes dropped by a blackhole break the stream: a
// match never spans them. Several rules may be armed; each fires once, on one
// connection. len(pattern) must be 1..MaxPatternLen.
//
// The returned channel is closed after the rule fired: the chunk has been
// written to the server's socket and the client side is closed.
func (p *TCP) CutAfterClientSends(pattern []byte) <-chan struct{} {
	return p.arm(&cutRule{pattern: pattern})
}

// CutAfterClientSendsThenDark is CutAfterClientSends that also switches the
// blackhole on as it fires, before the client side is closed: whatever the
// client sends next on any connection (after it learns of the cut) is lost
// until Blackhole(false), while the cut chunk still reaches the server.
func (p *TCP) CutAfterClientSendsThenDark(pattern []byte) <-chan struct{} {
	return p.arm(&cutRule{pattern: pattern, darken: true})
}

// CutAfterClientSendsHeld is CutAfterClientSends whose chunk is held: when
// the pattern matches, the client side is closed and cut is closed; the
// chunk reaches the server only once deliver is called (then fired is
// closed, as for CutAfterClientSends). So the client may act on the cut
// before the server sees what it sent.
func (p *TCP) CutAfterClientSendsHeld(pattern []byte) (cut, fired <-chan struct{}, deliver func()) {
	r := &cutRule{pattern: pattern, hold: make(chan struct{}), cut: make(chan struct{})}
	var once sync.Once
	return r.cut, p.arm(r), func() { once.Do(func() { close(r.hold) }) }
}

func (p *TCP) arm(r *cutRule) <-chan struct{} {
	if len(r.pattern) == 0 || len(r.pattern) > MaxPatternLen {
		panic("faultproxy: CutAfterClientSends pattern length out of range")
	}
	r.pattern = lowerASCII(nil, r.pattern)
	r.fired = make(chan struct{})
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r.fired
}

func (p *TCP) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return
		}
		c := &tcpConn{p: p, client: nc, ready: make(chan struct{}), done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			nc.Close()
			return
		}
		p.conns[c] = struct{}{}
		var wait chan struct{}
		if p.blackhole {
			wait = p.lifted
		}
		p.wg.Add(2)
		p.mu.Unlock()
		go c.connectAndPumpDown(wait)
		go c.pumpUp()
	}
}

// match reports the armed rule (removing it) that the stream completes with
// chunk, given the bytes before it in tail. It updates tail. Called only by
// the connection's client-to-server pump.
func (p *TCP) match(c *tcpConn, chunk []byte) *cutRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	var hit *cutRule
	if len(p.rules) > 0 {
		buf := lowerASCII(lowerASCII(nil, c.tail), chunk)
		for i, r := range p.rules {
			start := max(0, len(c.tail)-len(r.pattern)+1)
			if bytes.Contains(buf[start:], r.pattern) {
				hit = r
				p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
				break
			}
		}
	}
	const keep = MaxPatternLen - 1
	if len(chunk) >= keep {
		c.tail = append(c.tail[:0], chunk[len(chunk)-keep:]...)
	} else {
		c.tail = append(c.tail, chunk...)
		if n := len(c.tail) - keep; n > 0 {
			c.tail = append(c.tail[:0], c.tail[n:]...)
		}
	}
	return hit
}

func (p *TCP) forget(c *tcpConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func lowerASCII(dst, src []byte) []byte {
	for _, b := range src {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		dst = append(dst, b)
	}
	return dst
}

// tcpConn is one proxied connection.
type tcpConn struct {
	p      *TCP
	client net.Conn
	ready  chan struct{} // closed once the dial finished (server set, or nil on failure)
	done   chan struct{} // closed by closeBoth
	tail   []byte        // last bytes of the client-to-server stream (pumpUp only)

	cutting atomic.Bool   // set by a firing cut rule: drop all server bytes
	cutDone chan struct{} // closed when the cut chunk was written and the server half-closed

	mu     sync.Mutex
	server net.Conn
	closed bool
}

// connectAndPumpDown dials the target (after the blackhole lifts, if wait is
// not nil) and then relays server-to-client bytes.
func (c *tcpConn) connectAndPumpDown(wait chan struct{}) {
	defer c.p.wg.Done()
	if wait != nil {
		select {
		case <-wait:
		case <-c.done:
			close(c.ready)
			return
		}
	}
	sc, err := net.DialTimeout("tcp", c.p.target, tcpDialTimeout)
	c.mu.Lock()
	if err == nil && c.closed {
		sc.Close()
		err = net.ErrClosed
	}
	if err == nil {
		c.server = sc
	}
	c.mu.Unlock()
	close(c.ready)
	if err != nil {
		c.closeBoth(false)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := sc.Read(buf)
		if n > 0 && !c.p.dark.Load() && !c.cutting.Load() {
			if _, werr := c.client.Write(buf[:n]); werr != nil && !c.cutting.Load() {
				break
			}
		}
		if rerr != nil {
			break
		}
	}
	if c.cutting.Load() {
		<-c.cutDone // the cut path owns the server until it has written the chunk
	}
	c.closeBoth(false)
}

// pumpUp relays client-to-server bytes, applying blackhole and cut rules.
func (c *tcpConn) pumpUp() {
	defer c.p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 && !c.forwardUp(buf[:n]) {
			return
		}
		if err != nil {
			if !c.cutting.Load() {
				c.closeBoth(false)
			}
			return
		}
	}
}

// forwardUp forwards one chunk to the server; false means stop pumping.
func (c *tcpConn) forwardUp(chunk []byte) bool {
	if c.p.dark.Load() {
		c.tail = c.tail[:0] // dropped bytes: no match spans the gap
		return true
	}
	select {
	case <-c.ready:
	case <-c.done:
		return false
	}
	c.mu.Lock()
	sc := c.server
	c.mu.Unlock()
	if sc == nil {
		return false
	}
	if r := c.p.match(c, chunk); r != nil {
		c.cut(sc, chunk, r)
		return false
	}
	if _, err := sc.Write(chunk); err != nil {
		c.closeBoth(false)
		return false
	}
	return true
}

// cut implements a fired CutAfterClientSends rule.
func (c *tcpConn) cut(sc net.Conn, chunk []byte, r *cutRule) {
	c.cutDone = make(chan struct{})
	c.cutting.Store(true)
	if r.darken {
		c.p.Blackhole(true)
	}
	c.client.Close()
	if r.hold != nil {
		close(r.cut)
		select {
		case <-r.hold:
		case <-c.done:
		}
	}
	_, _ = sc.Write(chunk)
	if tc, ok := sc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = sc.SetReadDeadline(time.Now().Add(cutDrainTimeout))
	close(c.cutDone)
	close(r.fired)
}

// reset closes both sides with SO_LINGER 0 (a TCP reset).
func (c *tcpConn) reset() { c.closeBoth(true) }

func (c *tcpConn) closeBoth(rst bool) {
	c.p.forget(c)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	sc := c.server
	c.mu.Unlock()
	close(c.done)
	for _, nc := range []net.Conn{c.client, sc} {
		if nc == nil {
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok && rst {
			_ = tc.SetLinger(0)
		}
		_ = nc.Close()
	}
}
