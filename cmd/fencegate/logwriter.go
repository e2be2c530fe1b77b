package main

import (
	"io"
	"sync"
	"time"
)

// logWriter batches the log's lines into few writes: the first line after a
// quiet spell starts a linger (logLinger), and it and every line that comes
// before the linger ends go out in one write; lines that come while a write
// is in progress go together in the next. At info level the gateway logs a
// line per request; written one by one that was a system call per request
// (about 9% of a small GET's CPU in a perf profile), and written as soon as
// no write was in progress it was still about one write and one goroutine's
// wake-up per request at 32 clients (6% of a small GET's CPU), because the
// requests' lines seldom meet. A line is handed to the writing goroutine,
// not written, when Write returns: a process killed outright loses the lines
// of the linger and of the write in progress (some milliseconds'); Close
// writes what is queued at once.
type logWriter struct {
	out    io.Writer
	linger time.Duration

	mu      sync.Mutex
	written *sync.Cond // a batch was written: room again, or all done
	pending []byte
	spare   []byte
	armed   bool        // a write of pending is due: the timer runs, or flush does
	timer   *time.Timer // runs flush when the linger ends
}

// logLinger is how long the first line after a quiet spell waits for others
// to go out with it.
const logLinger = 10 * time.Millisecond

// maxPendingLog bounds the queued lines; beyond it Write waits (a slow
// stderr slows the gateway rather than growing its memory).
const maxPendingLog = 1 << 20

func newLogWriter(out io.Writer) *logWriter {
	w := &logWriter{out: out, linger: logLinger}
	w.written = sync.NewCond(&w.mu)
	return w
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) >= maxPendingLog {
		w.written.Wait()
	}
	w.pending = append(w.pending, p...)
	if !w.armed {
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(w.linger, w.flush)
		} else {
			w.timer.Reset(w.linger)
		}
	}
	return len(p), nil
}

// flush writes the queued lines when the linger ends.
func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
}

// flushLocked writes the queued lines, batch by batch, until none are left;
// w.mu is held except while writing.
func (w *logWriter) flushLocked() {
	for len(w.pending) > 0 {
		batch := w.pending
		w.pending = w.spare[:0]
		w.mu.Unlock()
		_, _ = w.out.Write(batch)
		w.mu.Lock()
		w.spare = batch
		w.written.Broadcast()
	}
	w.armed = false
	w.written.Broadcast()
}

// Close writes every line written so far, without waiting for the linger.
func (w *logWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed && w.timer.Stop() {
		w.flushLocked() // the timer will not run flush: this does its work
	}
	for w.armed || len(w.pending) > 0 {
		w.written.Wait()
	}
	return nil
}
