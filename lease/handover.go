package lease

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Writers that may wait for a key in this gateway queue for it in arrival
// order, each taking its place before it first asks the database. Only the
// queue's head asks the database again; the others wait for their turn,
// with a slow poll (slowPoll) as a safety net. The head tries again at once
// when it is woken:
//
//   - handover: the key's lease was released (or committed) here;
//   - queue: the writer ahead of it left the queue (it took the key, gave up
//     or was cancelled), making it the head;
//   - notify: the key was released in another gateway, which PostgreSQL
//     announced to this gateway's release listener (wakeups.go);
//   - listener: the release listener was lost or regained, so a release may
//     have gone unheard;
//
// and otherwise when its poll comes round (poll): every WaitPollListening
// while the listener has been subscribed since before the head's last
// attempt, every WaitPoll otherwise (no listener, or it was lost), and no
// later than when the holder, if it died, stops being live (Acquire). A
// wake-up only brings forward the attempt the poll would have made.

// slowPoll is how often a waiter behind the queue's head checks anyway.
const slowPoll = time.Second

// What woke a waiter: the label of fencegate_lease_wakeups_total.
const (
	wokenHandover = "handover"
	wokenQueue    = "queue"
	wokenNotify   = "notify"
	wokenListener = "listener"
	wokenPoll     = "poll"
)

type keyQueues struct {
	mu     sync.Mutex
	queues map[[2]string]*keyQueue
	byHash map[string][]*keyQueue // by KeyHash of their key

	// The release listener: listening while subscribed; epoch counts its
	// changes, so a waiter can tell whether it stayed subscribed since.
	listening bool
	epoch     uint64
}

// keyQueue is the writers waiting for one key, first come first.
type keyQueue struct {
	hash string
	ws   []*waiter
}

// waiter is one writer in a key's queue; wake is signalled, with what woke
// it, when it should try again at once.
//
// A waiter that is not asking the database is parked: ask is what it would
// ask for. The holder's commit may then claim the parked head (claimed) and
// hand it the key in the commit's own transaction; the waiter, whatever
// wakes it, takes the outcome from handed before it asks again.
type waiter struct {
	wake    chan string
	ask     *AcquireParams // parked: the acquire it would make
	claimed bool           // a commit is handing it the key
	handed  chan handOff
}

// handOff is a commit's hand-over to a claimed waiter: acq nil when the
// key was released instead (the waiter asks for it itself).
type handOff struct {
	acq   *Acquired
	id    string    // the waiter's attempt, now the holder
	sent  time.Time // when the commit went
	epoch uint64    // the session's epoch as of then
}

// join puts a new waiter at the end of key's queue.
func (q *keyQueues) join(key [2]string) *waiter {
	w := &waiter{wake: make(chan string, 1), handed: make(chan handOff, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queues == nil {
		q.queues = map[[2]string]*keyQueue{}
		q.byHash = map[string][]*keyQueue{}
	}
	kq := q.queues[key]
	if kq == nil {
		kq = &keyQueue{hash: KeyHash(key[0], key[1])}
		q.queues[key] = kq
		q.byHash[kq.hash] = append(q.byHash[kq.hash], kq)
	}
	kq.ws = append(kq.ws, w)
	return w
}

// head reports whether w is first in key's queue.
func (q *keyQueues) head(key [2]string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.headLocked(key, w)
}

func (q *keyQueues) headLocked(key [2]string, w *waiter) bool {
	kq := q.queues[key]
	return kq != nil && len(kq.ws) > 0 && kq.ws[0] == w
}

// leave takes w out of key's queue and, unless w took the key (the next
// waiter is woken when w releases it), wakes the waiter now first, so it
// starts polling as the head (or, after a release w did not use, takes the
// key).
func (q *keyQueues) leave(key [2]string, w *waiter, took bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.queues[key]
	if kq == nil {
		return
	}
	wasHead := len(kq.ws) > 0 && kq.ws[0] == w
	for i, x := range kq.ws {
		if x == w {
			kq.ws = append(kq.ws[:i:i], kq.ws[i+1:]...)
			break
		}
	}
	if len(kq.ws) == 0 {
		delete(q.queues, key)
		same := q.byHash[kq.hash]
		for i, x := range same {
			if x == kq {
				same = append(same[:i:i], same[i+1:]...)
				break
			}
		}
		if len(same) == 0 {
			delete(q.byHash, kq.hash)
		} else {
			q.byHash[kq.hash] = same
		}
		return
	}
	if wasHead && !took {
		signal(kq.ws[0], wokenQueue)
	}
}

// park records that w waits without asking the database, for p.
func (q *keyQueues) park(w *waiter, p AcquireParams) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.ask = &p
}

// handedOver unparks w before it asks the database. If a commit claimed it,
// it waits for the commit's hand-over and reports it (ok).
func (q *keyQueues) handedOver(w *waiter) (h handOff, ok bool) {
	q.mu.Lock()
	w.ask = nil
	claimed := w.claimed
	q.mu.Unlock()
	if !claimed {
		return handOff{}, false
	}
	h = <-w.handed
	q.mu.Lock()
	w.claimed = false
	q.mu.Unlock()
	return h, true
}

// claimHead claims key's first waiter for a commit's hand-over, if it is
// parked, and returns what it would ask for; nil: none to hand to.
func (q *keyQueues) claimHead(key [2]string) (*waiter, AcquireParams) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.queues[key]
	if kq == nil || len(kq.ws) == 0 || kq.ws[0].ask == nil || kq.ws[0].claimed {
		return nil, AcquireParams{}
	}
	w := kq.ws[0]
	w.claimed = true
	return w, *w.ask
}

// handOver gives a claimed waiter the commit's outcome and wakes it.
func (q *keyQueues) handOver(w *waiter, h handOff) {
	w.handed <- h
	signal(w, wokenHandover)
}

// released wakes the first waiter for key: the lease was just given back here.
func (q *keyQueues) released(key [2]string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if kq := q.queues[key]; kq != nil && len(kq.ws) > 0 {
		signal(kq.ws[0], wokenHandover)
	}
}

// notified wakes the first waiter of each key whose hash is keyHash: the
// release listener heard that key released elsewhere. It reports whether a
// waiter here wanted it.
func (q *keyQueues) notified(keyHash string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, kq := range q.byHash[keyHash] {
		if len(kq.ws) > 0 {
			signal(kq.ws[0], wokenNotify)
		}
	}
	return len(q.byHash[keyHash]) > 0
}

// setListening records that the release listener was subscribed (up) or
// lost, and wakes every queue's head: releases may have gone unheard while
// it was down, and while it is down the heads poll fast.
func (q *keyQueues) setListening(up bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.listening = up
	q.epoch++
	for _, kq := range q.queues {
		if len(kq.ws) > 0 {
			signal(kq.ws[0], wokenListener)
		}
	}
}

// listenState is the listener's state as a writer sees it before asking the
// database: whether it is subscribed, and its epoch.
func (q *keyQueues) listenState() (bool, uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.listening, q.epoch
}

// poll is how long w waits for a wake-up before trying again: slowPoll
// behind the head; for the head, a slow poll (listening) while the listener
// has been subscribed since epoch, when the head last asked the database (a
// release after that ask is announced to it), else the fast one (fast).
// Both are jittered.
func (q *keyQueues) poll(key [2]string, w *waiter, epoch uint64, fast, listening time.Duration) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.headLocked(key, w) {
		return slowPoll
	}
	p := fast
	if q.listening && q.epoch == epoch {
		p = listening
	}
	return p/2 + rand.N(p+1)
}

func signal(w *waiter, why string) {
	select {
	case w.wake <- why:
	default:
	}
}
