package gateway

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func newTestSpool(t *testing.T) *spool {
	t.Helper()
	cfg := Config{}
	cfg.applyDefaults()
	return newSpool(&cfg, newMetrics())
}

// A buffer the spool reuses holds only its new body: a shorter body after a
// longer one reads back as itself, never with the older body's tail.
func TestSpoolBufferReuseLeaksNothing(t *testing.T) {
	sp := newTestSpool(t)
	read := func(s *spooled) string {
		r := s.reader()
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first := strings.Repeat("secret-A", 6<<10) // 48 KiB: a 64 KiB buffer
	if !sp.take(int64(len(first))) {
		t.Fatal("no spool space")
	}
	s, err := sp.fill(strings.NewReader(first), int64(len(first)))
	if err != nil {
		t.Fatal(err)
	}
	buf := s.buf
	if got := read(s); got != first {
		t.Fatalf("read back %d bytes", len(got))
	}
	s.done()
	// The same class again: sync.Pool gives the buffer just put back (same P).
	second := strings.Repeat("b", 40<<10)
	if !sp.take(int64(len(second))) {
		t.Fatal("no spool space")
	}
	s2, err := sp.fill(strings.NewReader(second), int64(len(second)))
	if err != nil {
		t.Fatal(err)
	}
	if s2.buf != buf {
		t.Log("the pool did not hand the same buffer back; the check below still holds")
	}
	if got := read(s2); got != second || strings.Contains(got, "secret") {
		t.Fatalf("the second body read back as %d bytes containing the first: %v", len(got), strings.Contains(got, "secret"))
	}
	s2.done()
	if held := sp.held.Load(); held != 0 {
		t.Fatalf("the spool still holds %d bytes", held)
	}
}

// Bodies take buffers of their own size class, not the largest.
func TestSpoolBufferClasses(t *testing.T) {
	sp := newTestSpool(t)
	for _, c := range []struct{ n, want int64 }{
		{0, 4 << 10}, {1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10},
		{64 << 10, 64 << 10}, {700 << 10, 1 << 20}, {1 << 20, 1 << 20},
	} {
		b := sp.buffers.get(c.n)
		if int64(cap(*b)) != c.want || len(*b) != 0 {
			t.Errorf("a %d-byte body got a buffer of len %d, cap %d; want cap %d", c.n, len(*b), cap(*b), c.want)
		}
		*b = append(*b, bytes.Repeat([]byte{'x'}, int(min(c.n, 10)))...)
		sp.buffers.put(b)
		if len(*b) != 0 {
			t.Errorf("a buffer went back with %d bytes in it", len(*b))
		}
	}
}

// A body of unknown length (a form's file) takes the spool's budget as its
// bytes arrive, never its whole limit ahead of them: a held one holds only
// what it sent, and gives it all back when it fails.
func TestFillUpToReservesAsBytesArrive(t *testing.T) {
	sp := newTestSpool(t)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := sp.fillUpTo(pr, 16<<20, time.Second)
		done <- err
	}()
	if _, err := pw.Write(bytes.Repeat([]byte("a"), 10<<10)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sp.held.Load() != 10<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("a body held after 10 KiB of its 16 MiB limit holds %d bytes of the spool", sp.held.Load())
		}
		time.Sleep(time.Millisecond)
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if err := <-done; err == nil {
		t.Fatal("a body cut short was spooled")
	}
	if held := sp.held.Load(); held != 0 {
		t.Fatalf("a failed body left %d bytes held", held)
	}
	// Past its limit: errBodyLonger, nothing held.
	if _, err := sp.fillUpTo(bytes.NewReader(make([]byte, 2<<20)), 1<<20, time.Second); !errors.Is(err, errBodyLonger) {
		t.Fatalf("a body over its limit: %v", err)
	}
	// Within the limit, in memory and on disk: all of it, and only it, held.
	for _, n := range []int{0, 5000, 1 << 20, 3 << 20} {
		body := bytes.Repeat([]byte("z"), n)
		s, err := sp.fillUpTo(bytes.NewReader(body), 4<<20, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if s.n != int64(n) || sp.held.Load() != int64(n) {
			t.Fatalf("a %d-byte body: n %d, held %d", n, s.n, sp.held.Load())
		}
		r := s.reader()
		got, _ := io.ReadAll(r)
		r.Close()
		s.done()
		if !bytes.Equal(got, body) || sp.held.Load() != 0 {
			t.Fatalf("a %d-byte body read back %d bytes, %d left held", n, len(got), sp.held.Load())
		}
	}
}
