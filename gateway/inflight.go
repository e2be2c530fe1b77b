package gateway

import (
	"net"
	"sync"
	"time"
)

// inflight tracks requests being served, so that a shutdown whose grace ran
// out can end them: their store requests are cancelled and their client
// connections unblocked, which makes each handler finish its write (the
// attempt is recorded failed or unknown) and release its lease.
type inflight struct {
	mu    sync.Mutex
	next  uint64
	items map[uint64]inflightItem
	wg    sync.WaitGroup
}

type inflightItem struct {
	cancel func()
	conn   net.Conn
}

func (f *inflight) add(conn net.Conn) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.items == nil {
		f.items = map[uint64]inflightItem{}
	}
	f.next++
	f.items[f.next] = inflightItem{conn: conn}
	f.wg.Add(1)
	return f.next
}

func (f *inflight) setCancel(id uint64, cancel func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if it, ok := f.items[id]; ok {
		it.cancel = cancel
		f.items[id] = it
	}
}

func (f *inflight) done(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.items[id]; ok {
		delete(f.items, id)
		f.wg.Done()
	}
}

// cut ends every request still in flight and waits (up to limit) for their
// handlers to return.
func (f *inflight) cut(limit time.Duration) bool {
	f.mu.Lock()
	for _, it := range f.items {
		if it.cancel != nil {
			it.cancel()
		}
		if it.conn != nil {
			_ = it.conn.SetDeadline(time.Now())
		}
	}
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}
