package main

import (
	"io"
	"sync"
	"time"
)

// logWriter batches the log's lines into few writes: a line goes out at once
// when no write is in progress, and the lines that come while one is go
// together in the next. At info level the gateway logs a line per request;
// written one by one that was a system call per request (about 9% of a
// small GET's CPU in a perf profile), batched it is one per burst. A line is
// handed to the writing goroutine, not written, when Write returns: a
// process killed outright loses the lines of the write in progress and
// those queued behind it (a few milliseconds'); Close writes what is queued.
type logWriter struct {
	out    io.Writer
	linger time.Duration // not yet used

	mu       sync.Mutex
	written  *sync.Cond // a batch was written: room again, or all done
	pending  []byte
	spare    []byte
	flushing bool
}

// maxPendingLog bounds the queued lines; beyond it Write waits (a slow
// stderr slows the gateway rather than growing its memory).
const maxPendingLog = 1 << 20

func newLogWriter(out io.Writer) *logWriter {
	w := &logWriter{out: out}
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
	if !w.flushing {
		w.flushing = true
		go w.flush()
	}
	return len(p), nil
}

// flush writes the queued lines, batch by batch, until none are left.
func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) > 0 {
		batch := w.pending
		w.pending = w.spare[:0]
		w.mu.Unlock()
		_, _ = w.out.Write(batch)
		w.mu.Lock()
		w.spare = batch
		w.written.Broadcast()
	}
	w.flushing = false
	w.written.Broadcast()
}

// Close waits until every line written so far is out.
func (w *logWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing || len(w.pending) > 0 {
		w.written.Wait()
	}
	return nil
}
