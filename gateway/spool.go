package gateway

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
)

// The spool receives a small PutObject body whole, verified (signature
// chunks, checksums, length), before the key's lease is taken (docs/DESIGN.md,
// "Concurrent writers"). The lease then covers one store round trip instead of
// the client's upload: concurrent writers of one key receive their bodies in
// parallel and publish in the order they finish, as S3 does, and a body cut
// short never reaches the store at all. Larger bodies, and bodies that arrive
// while the spool's budget is spent, stream as before.

// Defaults for the spool's limits (Config).
const (
	defaultSpoolMax    = 16 << 20  // bodies up to this are spooled
	defaultSpoolMemory = 1 << 20   // ... in memory up to this, else in a file
	defaultSpoolBudget = 256 << 20 // spooled bytes held at once, memory and disk
)

// spool is the gateway's body spool: its limits, its budget and its metrics.
type spool struct {
	max, inMemory int64
	dir           string
	budget        *semaphore.Weighted
	held          atomic.Int64
	memory, disk  prometheus.Gauge
	fellBack      prometheus.Counter
	waits         prometheus.Counter
	buffers       spoolBuffers
}

func newSpool(cfg *Config, m *metrics) *spool {
	sp := &spool{max: cfg.SpoolMax, inMemory: min(cfg.SpoolMemory, cfg.SpoolMax), dir: cfg.SpoolDir,
		budget: semaphore.NewWeighted(max(cfg.SpoolBudget, 1)),
		memory: m.spoolMemory, disk: m.spoolDisk, fellBack: m.spoolFellBack, waits: m.spoolWaits}
	sp.buffers.init(max(sp.inMemory, 0))
	return sp
}

// spoolBuffers pools the in-memory bodies' buffers by size, in powers of two
// from minSpoolBuffer up to the spool's memory size: a 64 KiB body takes a
// 64 KiB buffer, not one the size of the largest body memory may hold (which
// would hold, and fault in, far more memory than the budget counts).
type spoolBuffers struct {
	max   int64
	pools []sync.Pool // pools[i]: *[]byte of cap size(i), empty
}

const minSpoolBuffer = 4 << 10

func (p *spoolBuffers) init(max int64) {
	p.max = max
	n := 1
	for p.size(n-1) < max {
		n++
	}
	p.pools = make([]sync.Pool, n)
}

func (p *spoolBuffers) size(class int) int64 { return min(int64(minSpoolBuffer)<<class, p.max) }

// class is the smallest class whose buffers hold n bytes (n <= max).
func (p *spoolBuffers) class(n int64) int {
	c := 0
	for p.size(c) < n && c < len(p.pools)-1 {
		c++
	}
	return c
}

// get is an empty buffer of at least n bytes' capacity.
func (p *spoolBuffers) get(n int64) *[]byte {
	c := p.class(n)
	if b, ok := p.pools[c].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, p.size(c))
	return &b
}

// put empties b and keeps it for a later body of its class.
func (p *spoolBuffers) put(b *[]byte) {
	*b = (*b)[:0]
	if c := p.class(int64(cap(*b))); p.size(c) == int64(cap(*b)) {
		p.pools[c].Put(b)
	}
}

// spooled is one body held whole: in memory or in an unlinked temporary file
// (it has no name, so no crash can leave it behind). Its space goes back when
// its owner is done with it and every sending of it has been closed: the HTTP
// transport may still read a request body after the answer came.
type spooled struct {
	sp   *spool
	buf  *[]byte
	file *os.File
	n    int64
	refs atomic.Int32 // the owner's reference and one per open sending
	once sync.Once
}

// take reserves n bytes of the spool for a body of n bytes; false sends the
// body down the streaming path (too big, or the budget is spent: a body never
// waits for spool space).
func (sp *spool) take(n int64) bool {
	if sp == nil || sp.max <= 0 || n > sp.max || n < 0 {
		return false
	}
	if !sp.budget.TryAcquire(n) {
		sp.fellBack.Inc()
		return false
	}
	sp.held.Add(n)
	return true
}

// fill reads all n bytes of src into the spool space take reserved. On error
// the space is given back.
func (sp *spool) fill(src io.Reader, n int64) (*spooled, error) {
	s := &spooled{sp: sp, n: n}
	s.refs.Store(1)
	var err error
	if n <= sp.inMemory {
		s.buf = sp.buffers.get(n)
		b := (*s.buf)[:n]
		_, err = io.ReadFull(src, b)
		*s.buf = b
		sp.memory.Add(float64(n))
	} else {
		s.file, err = os.CreateTemp(sp.dir, "fencegate-spool-*")
		if err == nil {
			// Unlinked at once: the space goes back when the file is closed, by
			// whatever path, a crash included.
			_ = os.Remove(s.file.Name())
			sp.disk.Add(float64(n))
			var w int64
			w, err = io.CopyN(s.file, src, n)
			if err == nil && w != n {
				err = io.ErrUnexpectedEOF
			}
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		// The source must be at its end: this is also where a verifying
		// reader checks the body's final signature and trailer.
		var one [1]byte
		for err == nil {
			var k int
			k, err = src.Read(one[:])
			if k > 0 {
				err = errBodyLonger
			}
		}
		if err == io.EOF {
			err = nil
		}
	}
	if err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

// reader reads the body from its start, for one sending; its Close ends that
// sending's hold on the body.
func (s *spooled) reader() io.ReadCloser {
	s.refs.Add(1)
	r := &spoolReader{s: s}
	if s.file != nil {
		r.Reader = io.NewSectionReader(s.file, 0, s.n)
	} else {
		r.mem.Reset(*s.buf)
		r.Reader = &r.mem
	}
	return r
}

type spoolReader struct {
	io.Reader
	mem  bytes.Reader // the in-memory body's reader, allocated with this one
	s    *spooled
	once sync.Once
}

func (r *spoolReader) Close() error {
	r.once.Do(r.s.unref)
	return nil
}

// done ends the owner's hold on the body.
func (s *spooled) done() { s.unref() }

func (s *spooled) unref() {
	if s.refs.Add(-1) == 0 {
		s.release()
	}
}

// release gives the body's space back, once.
func (s *spooled) release() {
	s.once.Do(func() {
		if s.file != nil {
			s.file.Close()
			s.sp.disk.Sub(float64(s.n))
		} else if s.buf != nil {
			s.sp.buffers.put(s.buf)
			s.sp.memory.Sub(float64(s.n))
		}
		s.sp.held.Add(-s.n)
		s.sp.budget.Release(s.n)
	})
}

// SpooledBytes is the bytes of PutObject bodies held in the spool now.
func (s *Server) SpooledBytes() int64 { return s.spool.held.Load() }

// reserve takes limit bytes of the spool's budget for a body of unknown
// length up to limit (a POST object's file, spooled whole: postobject.go),
// waiting up to wait for space. false: the budget stayed spent.
func (sp *spool) reserve(limit int64, wait time.Duration) bool {
	if !sp.budget.TryAcquire(limit) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := sp.budget.Acquire(ctx, limit)
		cancel()
		if err != nil {
			sp.fellBack.Inc()
			return false
		}
		sp.waits.Inc()
	}
	sp.held.Add(limit)
	return true
}

// fillUpTo reads src to its end into the limit bytes reserve took: in memory
// up to the spool's memory size, else in an unlinked temporary file. A body
// longer than limit fails with errBodyLonger as soon as its limit+1st byte
// arrives. On success the reserved space beyond the body's length goes back
// at once; on error all of it does.
func (sp *spool) fillUpTo(src io.Reader, limit int64) (*spooled, error) {
	giveBack := func(n int64) {
		sp.held.Add(-n)
		sp.budget.Release(n)
	}
	buf := sp.buffers.get(sp.inMemory)
	b := (*buf)[:cap(*buf)]
	if int64(len(b)) > limit+1 {
		b = b[:limit+1]
	}
	// Read until the buffer is full or the body ends: only io.EOF ends it (a
	// source's io.ErrUnexpectedEOF is a body cut short).
	n := 0
	var err error
	for n < len(b) && err == nil {
		var k int
		k, err = src.Read(b[n:])
		n += k
	}
	if err == io.EOF {
		if int64(n) > limit {
			err = errBodyLonger
		} else {
			// The whole body fits in memory.
			*buf = b[:n]
			s := &spooled{sp: sp, buf: buf, n: int64(n)}
			s.refs.Store(1)
			giveBack(limit - int64(n))
			sp.memory.Add(float64(n))
			return s, nil
		}
	}
	fail := func(err error) (*spooled, error) {
		sp.buffers.put(buf)
		giveBack(limit)
		return nil, err
	}
	if err != nil {
		return fail(err)
	}
	if int64(n) > limit {
		return fail(errBodyLonger)
	}
	f, err := os.CreateTemp(sp.dir, "fencegate-spool-*")
	if err != nil {
		return fail(err)
	}
	_ = os.Remove(f.Name())
	total := int64(n)
	if _, err = f.Write(b[:n]); err == nil {
		var w int64
		w, err = io.Copy(f, io.LimitReader(src, limit-total+1))
		total += w
		if err == nil && total > limit {
			err = errBodyLonger
		}
	}
	if err != nil {
		f.Close()
		return fail(err)
	}
	sp.buffers.put(buf)
	s := &spooled{sp: sp, file: f, n: total}
	s.refs.Store(1)
	giveBack(limit - total)
	sp.disk.Add(float64(total))
	return s, nil
}
