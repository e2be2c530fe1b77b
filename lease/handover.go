package lease

import (
	"sync"
	"time"
)

// Writers waiting for a key in this gateway queue for it in arrival order and
// are woken by the release (or commit) of the lease here, without waiting for
// a database poll: the key is handed over in one round trip. Only the queue's
// head polls the database (WaitPoll, for a holder in another gateway or one
// that died); the others wait for their turn, with a slow poll as a safety
// net. A writer that arrives while others wait joins the queue behind them
// instead of trying first, so no writer in this gateway starves.

// slowPoll is how often a waiter behind the queue's head checks anyway.
const slowPoll = time.Second

type keyQueues struct {
	mu     sync.Mutex
	queues map[[2]string][]*waiter
}

// waiter is one writer in a key's queue; wake is signalled when it should
// try again at once.
type waiter struct{ wake chan struct{} }

func (q *keyQueues) waiting(key [2]string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queues[key]) > 0
}

// join puts a new waiter at the end of key's queue.
func (q *keyQueues) join(key [2]string) *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queues == nil {
		q.queues = map[[2]string][]*waiter{}
	}
	q.queues[key] = append(q.queues[key], w)
	return w
}

// head reports whether w is first in key's queue.
func (q *keyQueues) head(key [2]string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[key]
	return len(ws) > 0 && ws[0] == w
}

// leave takes w out of key's queue and wakes the waiter now first, so it
// starts polling as the head (or, after a release w did not use, takes the
// key).
func (q *keyQueues) leave(key [2]string, w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(q.queues, key)
		return
	}
	q.queues[key] = ws
	signal(ws[0])
}

// released wakes the first waiter for key: the lease was just given back here.
func (q *keyQueues) released(key [2]string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.queues[key]; len(ws) > 0 {
		signal(ws[0])
	}
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
