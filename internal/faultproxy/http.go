package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HTTP is a fault-injecting HTTP/1.1 proxy in front of one store.
//
// Forwarding: every forwarded request gets its own fresh TCP connection to the
// target, which is closed when the request is done. There is no connection
// pool, so nothing is ever retried or replayed, and closing that connection is
// how the proxy aborts an upstream request. The request is written by hand:
// the request line carries the request-target exactly as the client sent it
// (no re-encoding of %2B, %20, ...), then the Host header as sent, then every
// other header (names in Go's canonical case, which HTTP and SigV4 treat as
// equal; values and their order per name unchanged), then the body, streamed:
// a Content-Length body is copied byte for byte under the same Content-Length,
// a chunked body is re-chunked (chunk boundaries and extensions are not
// preserved; trailers are). Nothing is added: no User-Agent, Accept-Encoding,
// or Connection header.
//
// If the client's body breaks off (the client connection is cut mid-body),
// the upstream connection is closed before the body is complete, so the store
// sees a truncated, failed request, never a short complete one. If the client
// goes away after its request was sent (net/http notices once the request
// body has been read to the end), the upstream connection is closed too.
// If the upstream fails (cannot dial, connection lost, malformed response),
// the client connection is aborted without a response, as if the client had
// talked to the store directly.
//
// Responses are relayed with status, headers and body streamed (flushed after
// every read); the proxy adds no Date or Content-Type header of its own. A
// response body that breaks off upstream breaks off at the client. Interim 1xx
// responses from the store are not relayed (the proxy answers a client's
// "Expect: 100-continue" itself when it starts reading the body); protocol
// upgrades (101) are not supported.
//
// Rules: each request is checked against the rules in the order they were
// added; the first rule that matches and still has uses left applies (one rule
// per request); unmatched requests pass through.
type HTTP struct {
	target   string // host:port
	ln       net.Listener
	srv      *http.Server
	ctx      context.Context // parent of every request context
	cancel   context.CancelFunc
	handlers sync.WaitGroup
	requests atomic.Int64

	mu     sync.Mutex
	rules  []*rule
	closed bool
}

// Match selects requests for a rule. It sees the request after its headers
// were read and before any of its body was.
type Match func(r *http.Request) bool

// MethodPath matches requests with the given method ("" matches any) whose
// decoded URL path (r.URL.Path) starts with pathPrefix.
func MethodPath(method, pathPrefix string) Match {
	return func(r *http.Request) bool {
		return (method == "" || r.Method == method) && strings.HasPrefix(r.URL.Path, pathPrefix)
	}
}

// Event describes a request a rule acted on. Path is the decoded path
// (r.URL.Path). Status is the store's status code, or 0 if the store has not
// answered (Hold's Arrived events).
type Event struct {
	Method, Path, RawQuery string
	Status                 int
	// Whole, on a stall rule's Delivered: the stalled exchange ran to its
	// end once released (the store took the request's body whole and
	// answered; the client took the answer's body whole); false when either
	// side had gone meanwhile.
	Whole bool
}

type ruleKind int

const (
	kindFail ruleKind = iota
	kindDropResponse
	kindHold
	kindHoldResponse
	kindDelay
	kindWatch
	kindStallRequestBody
	kindStallResponseBody
)

type rule struct {
	match  Match
	left   int // uses left; -1 means always
	kind   ruleKind
	status int
	body   string
	delay  time.Duration
	events chan Event
	held   *Held
	starts chan Event // kindWatch: told when a request arrives
	after  int64      // the stall kinds: bytes of the body passed before the stall
}

// NewHTTP starts a proxy on 127.0.0.1:0 in front of target, an http:// URL
// such as "http://127.0.0.1:9000" (a path, if any, is ignored).
func NewHTTP(target string) (*HTTP, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q is not an http://host:port URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &HTTP{target: u.Host, ln: ln, ctx: ctx, cancel: cancel}
	p.srv = &http.Server{
		Handler:     p,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL, http://127.0.0.1:port.
func (p *HTTP) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy: it closes the listener and every client and upstream
// connection, drops every held request, and waits for in-flight handlers.
func (p *HTTP) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.srv.Close()
	p.handlers.Wait()
}

// Requests is the number of requests the proxy has seen, whatever happened to
// them.
func (p *HTTP) Requests() int64 { return p.requests.Load() }

// Reset removes all rules. Requests already held stay held until released,
// failed, dropped, or the proxy is closed.
func (p *HTTP) Reset() {
	p.mu.Lock()
	p.rules = nil
	p.mu.Unlock()
}

// Fail answers matching requests with status and body without forwarding
// them: the store never sees them. The request body, if any, is read and
// discarded first. body is sent as application/xml if it starts with '<',
// otherwise as text/plain. times is the number of uses, -1 for always.
func (p *HTTP) Fail(m Match, times int, status int, body string) {
	p.add(&rule{match: m, left: times, kind: kindFail, status: status, body: body})
}

// DropResponse forwards matching requests to the store (so the store does
// perform them), reads the store's full response, discards it, and then
// closes the client connection abruptly (TCP reset) without sending any
// response byte. After the client connection is closed, an Event with the
// store's status is sent on the returned channel, which is buffered for times
// events (1024 if times is -1; further events are dropped if it is full).
//
// Beware that a Go http.Transport on the client side transparently retries a
// bodiless idempotent request (GET, HEAD) that failed this way on a reused
// keep-alive connection; the retry is a new request for the rules.
func (p *HTTP) DropResponse(m Match, times int) <-chan Event {
	ch := make(chan Event, eventBuffer(times))
	p.add(&rule{match: m, left: times, kind: kindDropResponse, events: ch})
	return ch
}

// Hold holds matching requests before forwarding anything: the proxy has read
// the request line and headers, but none of the body, and has not even
// connected to the store. See [Held] for how the test lets them go on.
func (p *HTTP) Hold(m Match, times int) *Held {
	h := newHeld(times, p.ctx.Done())
	p.add(&rule{match: m, left: times, kind: kindHold, held: h})
	return h
}

// HoldResponse forwards matching requests; when the store's response headers
// arrive, it signals Arrived (with the store's status) and holds the response,
// unrelayed (its body still unread from the store), until the test decides.
// See [Held].
func (p *HTTP) HoldResponse(m Match, times int) *Held {
	h := newHeld(times, p.ctx.Done())
	p.add(&rule{match: m, left: times, kind: kindHoldResponse, held: h})
	return h
}

// Watched reports the requests a Watch rule forwarded: Started when one
// arrives (its headers read, before its body is forwarded), Done when its
// exchange with the store is over (the store answered and the response was
// relayed, or the upstream connection was closed: the store has seen the
// request end either way). Status in Done is the store's, 0 if it never
// answered.
type Watched struct {
	Started <-chan Event
	Done    <-chan Event
}

// Watch forwards matching requests unchanged and reports each one's start and
// end (see [Watched]).
func (p *HTTP) Watch(m Match, times int) Watched {
	r := &rule{match: m, left: times, kind: kindWatch, events: make(chan Event, eventBuffer(times)), starts: make(chan Event, eventBuffer(times))}
	p.add(r)
	return Watched{Started: r.starts, Done: r.events}
}

// StallRequestBody forwards matching requests, but stops reading a request's
// body after its first after bytes (a store that stops taking a request: its
// sender's writes block once the sockets' buffers are full) and signals
// Arrived; Release reads on, Drop or Fail aborts the request (the store sees
// it cut off, the client a reset). See [Held].
func (p *HTTP) StallRequestBody(m Match, times int, after int64) *Held {
	h := newHeld(times, p.ctx.Done())
	p.add(&rule{match: m, left: times, kind: kindStallRequestBody, held: h, after: after})
	return h
}

// StallResponseBody forwards matching requests and relays the store's answer,
// but stops after the first after bytes of its body (a store that pauses
// mid-answer: the client waits for bytes that do not come) and signals
// Arrived with the store's status; Release relays the rest, Drop or Fail
// aborts the client's connection. See [Held].
func (p *HTTP) StallResponseBody(m Match, times int, after int64) *Held {
	h := newHeld(times, p.ctx.Done())
	p.add(&rule{match: m, left: times, kind: kindStallResponseBody, held: h, after: after})
	return h
}

// Delay waits d before forwarding matching requests (before reading any of
// the body).
func (p *HTTP) Delay(m Match, times int, d time.Duration) {
	p.add(&rule{match: m, left: times, kind: kindDelay, delay: d})
}

func (p *HTTP) add(r *rule) {
	if r.left == 0 || r.left < -1 {
		panic("faultproxy: times must be positive or -1")
	}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
}

// pick returns the first matching rule with uses left, using one.
func (p *HTTP) pick(r *http.Request) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, rl := range p.rules {
		if !rl.match(r) {
			continue
		}
		if rl.left > 0 {
			rl.left--
			if rl.left == 0 {
				p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
			}
		}
		if rl.held != nil {
			rl.held.begin()
		}
		return rl
	}
	return nil
}

func (p *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		abort(w)
		return
	}
	p.handlers.Add(1)
	p.mu.Unlock()
	defer p.handlers.Done()
	p.requests.Add(1)
	// Read the request body while writing the response: needed when the
	// store answers before it has read the whole body.
	_ = http.NewResponseController(w).EnableFullDuplex()

	rl := p.pick(r)
	if rl == nil {
		p.forward(w, r)
		return
	}
	ev := Event{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	switch rl.kind {
	case kindFail:
		failRequest(w, r, rl.status, rl.body)
	case kindDelay:
		t := time.NewTimer(rl.delay)
		defer t.Stop()
		select {
		case <-t.C:
			p.forward(w, r)
		case <-r.Context().Done():
			abort(w)
		}
	case kindWatch:
		select {
		case rl.starts <- ev:
		default:
		}
		p.sendAndRelay(w, r, &ev)
		select {
		case rl.events <- ev:
		default:
		}
	case kindDropResponse:
		up := p.answered(w, r, &ev)
		if up == nil {
			return
		}
		_, _ = io.Copy(io.Discard, up.resp.Body)
		up.close()
		abort(w)
		select {
		case rl.events <- ev:
		default:
		}
	case kindHold:
		defer rl.held.end()
		switch d := rl.held.arrive(ev); d.kind {
		case decRelease:
			p.forward(w, r)
		case decReleaseDetached:
			p.sendAndRelay(w, r.WithContext(context.WithoutCancel(r.Context())), &ev)
			select {
			case rl.held.delivered <- ev:
			default:
			}
		case decFail:
			failRequest(w, r, d.status, d.body)
		default:
			abort(w)
		}
	case kindHoldResponse:
		defer rl.held.end()
		up := p.answered(w, r, &ev)
		if up == nil {
			return
		}
		defer up.close()
		switch d := rl.held.arrive(ev); d.kind {
		case decRelease:
			_ = relay(w, up.resp)
		case decFail:
			up.close()
			writeFail(w, d.status, d.body)
		default:
			up.close()
			abort(w)
		}
	case kindStallRequestBody:
		defer rl.held.end()
		body := &stallingBody{ReadCloser: r.Body, left: rl.after, held: rl.held, ev: ev}
		defer body.delivered(&ev)
		r.Body = body
		p.sendAndRelay(w, r, &ev)
		ev.Whole = ev.Status != 0
	case kindStallResponseBody:
		defer rl.held.end()
		up := p.answered(w, r, &ev)
		if up == nil {
			return
		}
		defer up.close()
		body := &stallingBody{ReadCloser: up.resp.Body, left: rl.after, held: rl.held, ev: ev}
		defer body.delivered(&ev)
		up.resp.Body = body
		// A short rest fits the socket even after its reader has gone;
		// the request's context says the client's connection closed.
		ev.Whole = relay(w, up.resp) && r.Context().Err() == nil
	}
}

// stallingBody passes the first left bytes of a body, then waits for the
// held rule's decision: read on (Release), or fail (anything else).
type stallingBody struct {
	io.ReadCloser
	left    int64
	held    *Held
	ev      Event
	decided bool
}

var errStallDropped = errors.New("faultproxy: the stalled body was dropped")

// delivered reports a stalled exchange's end on Delivered (one that ended
// before its stall point is not reported).
func (b *stallingBody) delivered(ev *Event) {
	if !b.decided {
		return
	}
	select {
	case b.held.delivered <- *ev:
	default:
	}
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if !b.decided && b.left == 0 {
		b.decided = true
		if d := b.held.arrive(b.ev); d.kind != decRelease {
			return 0, errStallDropped
		}
	}
	if !b.decided && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	if !b.decided {
		b.left -= int64(n)
	}
	return n, err
}

// forward passes the request through to the store and relays the response.
func (p *HTTP) forward(w http.ResponseWriter, r *http.Request) {
	var ev Event
	p.sendAndRelay(w, r, &ev)
}

func failRequest(w http.ResponseWriter, r *http.Request, status int, body string) {
	_, _ = io.Copy(io.Discard, r.Body)
	writeFail(w, status, body)
}

func writeFail(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	ct := "text/plain; charset=utf-8"
	if strings.HasPrefix(body, "<") {
		ct = "application/xml"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// abort closes the client connection with a TCP reset, sending nothing more.
func abort(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func eventBuffer(times int) int {
	if times > 0 {
		return times
	}
	return 1024
}

var errShortBody = errors.New("faultproxy: request body shorter than Content-Length")

// sendAndRelay forwards r to the store and relays its answer, noting the
// status in ev; a request the store did not answer is aborted.
func (p *HTTP) sendAndRelay(w http.ResponseWriter, r *http.Request, ev *Event) {
	up := p.answered(w, r, ev)
	if up == nil {
		return
	}
	defer up.close()
	_ = relay(w, up.resp)
}

// answered forwards r to the store and returns the exchange, the store's
// status noted in ev; a request the store did not answer is aborted at the
// client, and answered returns nil.
func (p *HTTP) answered(w http.ResponseWriter, r *http.Request, ev *Event) *upstream {
	up, err := p.roundTrip(r)
	if err != nil {
		abort(w)
		return nil
	}
	ev.Status = up.resp.StatusCode
	return up
}
