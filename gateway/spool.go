package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
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
	// crc is the body's CRC32, computed as it was received: the checksum
	// fencegate sends with a body the client gave none for, known (and
	// recorded on the attempt) before the store is asked.
	crc  uint32
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
	sum := crc32.NewIEEE()
	src = io.TeeReader(src, sum)
	defer func() { s.crc = sum.Sum32() }()
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

// checksum is the body's CRC32 as an x-amz-checksum-crc32 value.
func (s *spooled) checksum() string { return crc32Header(s.crc) }

// crc32Header is a CRC32 as an x-amz-checksum-crc32 header carries it.
func crc32Header(sum uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], sum)
	return base64.StdEncoding.EncodeToString(b[:])
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

// errSpoolFull: a body of unknown length found the spool's budget spent for
// its whole wait.
var errSpoolFull = errors.New("the spool's budget stayed spent")

// reservingReader takes the spool's budget for a body of unknown length as
// its bytes arrive (a POST object's file: postobject.go), never ahead of
// them: a form held inside its file part holds only what it sent, so held
// forms cannot lock the others out. A read past limit fails with
// errBodyLonger, reserving nothing more.
type reservingReader struct {
	src   io.Reader
	sp    *spool
	limit int64
	wait  time.Duration // for each piece of budget, when the budget is spent
	taken int64         // budget taken, = bytes read
}

func (r *reservingReader) Read(b []byte) (int, error) {
	if r.taken >= r.limit {
		// At the limit: one more byte fails the body, its end is EOF.
		var one [1]byte
		n, err := r.src.Read(one[:])
		if n > 0 {
			return 0, errBodyLonger
		}
		return 0, err
	}
	if int64(len(b)) > r.limit-r.taken {
		b = b[:r.limit-r.taken]
	}
	n, err := r.src.Read(b)
	if n > 0 {
		if !r.sp.budget.TryAcquire(int64(n)) {
			ctx, cancel := context.WithTimeout(context.Background(), r.wait)
			aerr := r.sp.budget.Acquire(ctx, int64(n))
			cancel()
			if aerr != nil {
				r.sp.fellBack.Inc()
				return 0, errSpoolFull
			}
			r.sp.waits.Inc()
		}
		r.sp.held.Add(int64(n))
		r.taken += int64(n)
	}
	return n, err
}

// giveBack returns all the budget the reader took.
func (r *reservingReader) giveBack() {
	r.sp.held.Add(-r.taken)
	r.sp.budget.Release(r.taken)
	r.taken = 0
}

// fillUpTo reads src to its end into the spool, taking its budget as the
// bytes arrive (waiting up to wait for each piece): in memory up to the
// spool's memory size, else in an unlinked temporary file. A body longer
// than limit fails with errBodyLonger as soon as its limit+1st byte arrives;
// a budget spent for the whole wait fails it with errSpoolFull. On error
// all the budget it took goes back.
func (sp *spool) fillUpTo(src io.Reader, limit int64, wait time.Duration) (*spooled, error) {
	sum := crc32.NewIEEE()
	rr := &reservingReader{src: io.TeeReader(src, sum), sp: sp, limit: limit, wait: wait}
	// In memory first, in buffers that grow by their size classes up to the
	// spool's memory size: a small file holds a small buffer.
	buf := sp.buffers.get(minSpoolBuffer)
	fail := func(err error) (*spooled, error) {
		sp.buffers.put(buf)
		rr.giveBack()
		return nil, err
	}
	var err error
	for err == nil {
		b := *buf
		if len(b) == cap(b) {
			if int64(cap(b)) >= sp.inMemory {
				break // memory is full: the rest goes to a file
			}
			bigger := sp.buffers.get(int64(cap(b)) + 1)
			*bigger = append(*bigger, b...)
			sp.buffers.put(buf)
			buf, b = bigger, *bigger
		}
		var k int
		k, err = rr.Read(b[len(b):cap(b)])
		*buf = b[:len(b)+k]
	}
	if err == io.EOF {
		// The whole body fits in memory.
		n := int64(len(*buf))
		s := &spooled{sp: sp, buf: buf, n: n, crc: sum.Sum32()}
		s.refs.Store(1)
		sp.memory.Add(float64(n))
		return s, nil
	}
	if err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp(sp.dir, "fencegate-spool-*")
	if err != nil {
		return fail(err)
	}
	_ = os.Remove(f.Name())
	if _, err = f.Write(*buf); err == nil {
		_, err = io.Copy(f, rr)
	}
	if err != nil {
		f.Close()
		return fail(err)
	}
	sp.buffers.put(buf)
	s := &spooled{sp: sp, file: f, n: rr.taken, crc: sum.Sum32()}
	s.refs.Store(1)
	sp.disk.Add(float64(s.n))
	return s, nil
}
