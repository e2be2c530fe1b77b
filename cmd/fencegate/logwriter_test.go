package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingWriter counts writes and keeps what they carried.
type countingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	return c.buf.Write(p)
}

func (c *countingWriter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// heldWriter is a countingWriter that holds its first Write until released.
type heldWriter struct {
	countingWriter
	held    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.held.Do(func() {
		close(h.entered)
		<-h.release
	})
	return h.countingWriter.Write(p)
}

// The lines that come while a write is in progress go together in one next
// write, in order, and Close waits for them.
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

// Lines that come within the linger after a quiet spell go in one write,
// even when each comes after the previous could have been written alone
// (a request's line every millisecond: one write, not one each); Close
// writes them at once instead of waiting out the linger.
func TestLogLinesWithinTheLingerGoTogether(t *testing.T) {
	out := &countingWriter{}
	w := newLogWriter(out)
	w.linger = time.Minute // the test's lines all come within it, however slow the machine
	for i := 0; i < 20; i++ {
		fmt.Fprintln(w, "line", i)
		time.Sleep(time.Millisecond) // room for a write of the lines so far
	}
	if n := out.count(); n != 0 {
		t.Fatalf("%d writes before the linger ended, want 0", n)
	}
	start := time.Now()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close took %v: it waited for the linger", d)
	}
	lines := strings.Split(strings.TrimSpace(out.buf.String()), "\n")
	if len(lines) != 20 || out.count() != 1 {
		t.Fatalf("%d lines in %d writes, want 20 in 1", len(lines), out.count())
	}
	for i, l := range lines {
		if l != fmt.Sprint("line ", i) {
			t.Fatalf("line %d is %q: out of order", i, l)
		}
	}
	// After Close a line still goes out, after the linger.
	w.linger = time.Millisecond
	fmt.Fprintln(w, "late")
	deadline := time.Now().Add(10 * time.Second)
	for out.count() != 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !strings.HasSuffix(out.buf.String(), "late\n") {
		t.Fatalf("a line written after Close never went out: %q", out.buf.String())
	}
}
