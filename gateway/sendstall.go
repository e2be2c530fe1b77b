package gateway

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A client that stops reading an answer would otherwise hold its connection,
// the goroutine serving it and the store connection behind a relayed body for
// as long as it likes: one key with read access, or a public object, could
// fill --max-conns with connections that never finish. So a write to a client
// that moves nothing for the send stall timeout ends: the connection is
// closed. What counts as moving is the client acknowledging bytes (the
// kernel's tcpi_bytes_acked), not a write call returning: a write into a full
// socket buffer returns only when a third of the buffer is free, which a slow
// but steady reader of a large object can take longer than the timeout to
// make, and a body spliced from the store (relay.go) is one call for the whole
// object. So a watch, armed when a write starts, looks at the connection every
// half timeout while the write lasts, and cuts the write (a deadline in the
// past) once a whole timeout has passed without an acknowledged byte: between
// one and one and a half timeouts after the client stopped taking data. (An
// application that reads at its own slow pace through a large socket buffer
// acknowledges in bursts, as TCP reopens its window only once much of the
// buffer is free: docs/OPERATING.md, Limits, says what pace the timeout needs.)

// sendWatch bounds the writes to one client connection.
type sendWatch struct {
	conn    *net.TCPConn
	timeout time.Duration
	stalled prometheus.Counter
	writing atomic.Int32 // writes in progress
	fresh   atomic.Bool  // no check yet since writing began
	cut     atomic.Bool  // the connection stalled: it takes no more writes
	timer   *time.Timer  // runs check every timeout/2 while a write lasts

	mu           sync.Mutex // check's state (the timer's runs may overlap)
	acked        uint64     // the client's acknowledged bytes at the last check
	lastProgress time.Time  // the last check that found acked grown
}

func newSendWatch(conn *net.TCPConn, timeout time.Duration, stalled prometheus.Counter) *sendWatch {
	w := &sendWatch{conn: conn, timeout: timeout, stalled: stalled}
	w.timer = time.AfterFunc(time.Hour, w.check)
	w.timer.Stop()
	return w
}

// begin and end bracket a write; the first write in progress arms the watch.
func (w *sendWatch) begin() {
	if w.writing.Add(1) == 1 {
		w.fresh.Store(true)
		w.timer.Reset(w.timeout / 2)
	}
}

func (w *sendWatch) end() { w.writing.Add(-1) }

// check cuts a write the client has taken nothing of for a whole timeout, and
// else looks again in half a timeout while a write lasts.
func (w *sendWatch) check() {
	if w.writing.Load() == 0 {
		return
	}
	now := time.Now()
	acked, pending, ok := sendProgress(w.conn)
	w.mu.Lock()
	// The first look since writing began compares with a count from before
	// it: it counts as progress, and the whole timeout is measured from here.
	// A client that has taken every byte written to it is not stalled: the
	// write waits on its source (a body spliced from a store that pauses,
	// which this watch does not bound).
	if w.fresh.Swap(false) || ok && (acked != w.acked || !pending) {
		w.acked, w.lastProgress = acked, now
	}
	stalled := now.Sub(w.lastProgress) >= w.timeout
	w.mu.Unlock()
	if !stalled {
		w.timer.Reset(w.timeout / 2)
		return
	}
	if !w.cut.CompareAndSwap(false, true) {
		return
	}
	w.stalled.Inc()
	// The write in progress fails with a timeout, fasthttp closes the
	// connection, and the relayed body closes the store's.
	_ = w.conn.SetWriteDeadline(time.Unix(1, 0))
}

// start begins a write, or refuses it on a connection already cut: a later
// write (crypto/tls's closing alert, which sets a deadline of its own) would
// wait on the same client again.
func (w *sendWatch) start() error {
	if w.cut.Load() {
		return os.ErrDeadlineExceeded
	}
	w.begin()
	return nil
}

// Write and ReadFrom are the client connection's writes, watched when it has a
// send stall bound. ReadFrom stays net.TCPConn's, so a body from the store's
// socket is still spliced.
func (c *clientConn) Write(p []byte) (int, error) {
	if c.send == nil {
		return c.TCPConn.Write(p)
	}
	if err := c.send.start(); err != nil {
		return 0, err
	}
	defer c.send.end()
	return c.TCPConn.Write(p)
}

func (c *clientConn) ReadFrom(r io.Reader) (int64, error) {
	if c.send == nil {
		return c.TCPConn.ReadFrom(r)
	}
	if err := c.send.start(); err != nil {
		return 0, err
	}
	defer c.send.end()
	return c.TCPConn.ReadFrom(r)
}
