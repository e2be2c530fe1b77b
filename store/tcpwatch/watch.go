// Package tcpwatch bounds how long a read or write on a TCP connection may
// wait on its peer without the peer doing its part: taking bytes (a send) or
// sending them (a receive). A peer that stops would otherwise hold the
// connection, the goroutine waiting on it and whatever that goroutine holds
// (a key's lease, a client's answer) for as long as the connection lives:
// a stopped process's kernel goes on acknowledging TCP's probes.
//
// What counts as the peer's part is what the kernel counts, not a call
// returning: a write into a full socket buffer returns only when a third of
// it is free, which a slow but steady reader can take longer than the timeout
// to make, and a body spliced between two sockets is one call for the whole
// body. So a watch, armed when a read or write starts, looks at the
// connection every half timeout while one lasts, and cuts it (a deadline in
// the past) once a whole timeout has passed without progress: between one
// and one and a half timeouts after the peer's last part.
package tcpwatch

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Watch bounds one direction of one connection. A nil *Watch bounds nothing:
// its methods do nothing (Start never refuses, Cut is false).
type Watch struct {
	conn     *net.TCPConn
	timeout  time.Duration
	progress func(*net.TCPConn) (mark uint64, owed, ok bool)
	deadline func(*net.TCPConn, time.Time) error
	onCut    func()
	active   atomic.Int32 // reads or writes in progress
	fresh    atomic.Bool  // no check yet since the first began
	cut      atomic.Bool  // the peer stalled: the direction takes no more calls
	timer    *time.Timer  // runs check every timeout/2 while a call lasts

	mu           sync.Mutex // check's state (the timer's runs may overlap)
	mark         uint64     // the peer's progress at the last check
	lastProgress time.Time  // the last check that found it moving
}

// Sending watches the writes to conn: the peer's part is acknowledging what
// was sent (tcpi_bytes_acked), owed while anything written waits for it.
// onCut (may be nil) runs once, when the watch cuts a write.
func Sending(conn *net.TCPConn, timeout time.Duration, onCut func()) *Watch {
	return newWatch(conn, timeout, sendProgress, (*net.TCPConn).SetWriteDeadline, onCut)
}

// Receiving watches the reads from conn: the peer's part is sending bytes
// (tcpi_bytes_received), owed while the socket holds nothing unread (bytes
// waiting in it mean the reader is the slow side, as when a body spliced to
// a slow client waits on the client). Bytes already out of the socket but not
// yet passed on (the last of a body, in a splice's pipe) do not count: a
// reader stuck on them for a whole timeout is cut too, where the client's
// own send watch, shorter by default, has not cut it first.
func Receiving(conn *net.TCPConn, timeout time.Duration, onCut func()) *Watch {
	return newWatch(conn, timeout, receiveProgress, (*net.TCPConn).SetReadDeadline, onCut)
}

func newWatch(conn *net.TCPConn, timeout time.Duration, progress func(*net.TCPConn) (uint64, bool, bool),
	deadline func(*net.TCPConn, time.Time) error, onCut func()) *Watch {
	w := &Watch{conn: conn, timeout: timeout, progress: progress, deadline: deadline, onCut: onCut}
	w.timer = time.AfterFunc(time.Hour, w.check)
	w.timer.Stop()
	return w
}

// Start begins a read or write, or refuses it (os.ErrDeadlineExceeded) once
// the watch has cut: a later call (crypto/tls's closing alert, which sets a
// deadline of its own) would wait on the same peer again. End ends it.
func (w *Watch) Start() error {
	if w == nil {
		return nil
	}
	if w.cut.Load() {
		return os.ErrDeadlineExceeded
	}
	w.Begin()
	return nil
}

// Begin is Start without the refusal; the first call in progress arms the
// watch.
func (w *Watch) Begin() {
	if w == nil {
		return
	}
	if w.active.Add(1) == 1 {
		w.fresh.Store(true)
		w.timer.Reset(w.timeout / 2)
	}
}

// End ends a call begun by Start or Begin.
func (w *Watch) End() {
	if w != nil {
		w.active.Add(-1)
	}
}

// Stop disarms the watch for good: the connection is closing.
func (w *Watch) Stop() {
	if w != nil {
		w.timer.Stop()
	}
}

// Cut reports whether the watch has cut the connection.
func (w *Watch) Cut() bool { return w != nil && w.cut.Load() }

// check cuts a call the peer has done nothing for in a whole timeout, and
// else looks again in half a timeout while a call lasts.
func (w *Watch) check() {
	if w.active.Load() == 0 {
		return
	}
	now := time.Now()
	mark, owed, ok := w.progress(w.conn)
	w.mu.Lock()
	// The first look since the call began compares with a count from before
	// it: it counts as progress, and the whole timeout is measured from here.
	// A peer that owes nothing is not stalled: the call waits on this side
	// (a write whose source pauses, a read whose data sits unread).
	if w.fresh.Swap(false) || ok && (mark != w.mark || !owed) {
		w.mark, w.lastProgress = mark, now
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
	if w.onCut != nil {
		w.onCut()
	}
	// The call in progress fails with a timeout, and so does every later one.
	_ = w.deadline(w.conn, time.Unix(1, 0))
}
