package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// heldWriter holds its first Write until released, counting writes.
type heldWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	entered chan struct{}
	release chan struct{}
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	h.writes++
	first := h.writes == 1
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.release
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.Write(p)
}

// A line goes out at once; the lines that come while it is being written
// go together in one next write, in order, and Close waits for them.
func TestLogLinesWrittenMeanwhileGoTogether(t *testing.T) {
	out := &heldWriter{entered: make(chan struct{}), release: make(chan struct{})}
	w := newLogWriter(out)
	fmt.Fprintln(w, "line 0")
	<-out.entered // the first write is in progress, held
	for i := 1; i <= 100; i++ {
		fmt.Fprintln(w, "line", i)
	}
	close(out.release)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.buf.String()), "\n")
	if len(lines) != 101 {
		t.Fatalf("%d lines out, want 101", len(lines))
	}
	for i, l := range lines {
		if l != fmt.Sprint("line ", i) {
			t.Fatalf("line %d is %q: out of order", i, l)
		}
	}
	if out.writes != 2 {
		t.Fatalf("%d writes, want 2: the held line, then the 100 that came meanwhile", out.writes)
	}
}
